// Our golden files (tests/golden), found from HISTORY_GOLDEN_DIR or relative to this package.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const GOLDEN_DIR = process.env.HISTORY_GOLDEN_DIR ?? fileURLToPath(new URL("../../../tests/golden/", import.meta.url));

/** @param {string} path */
export function lines(path) {
  return readFileSync(path, "utf8").split("\n").filter(Boolean);
}

/** The codec sessions: `[name, events path, packed path]`. */
export function codecSessions() {
  const dir = join(GOLDEN_DIR, "codec");
  return readdirSync(dir)
    .filter((name) => name.endsWith(".events.jsonl"))
    .sort()
    .map((name) => [name.split(".")[0], join(dir, name), join(dir, name.replace(".events.", ".packed."))]);
}

/**
 * Every inline page body of the service goldens, as its exact text, with the cursor its
 * request pinned. Bodies over 64 KiB are pinned by hash only, so they are not here.
 */
export function goldenPages() {
  const dir = join(GOLDEN_DIR, "service");
  const pages = [];
  for (const name of readdirSync(dir).filter((n) => n.endsWith(".pages.jsonl")).sort()) {
    for (const line of lines(join(dir, name))) {
      const { path, status, body } = JSON.parse(line);
      if (body.sha256 !== undefined) continue;
      const prefix = `{"path":${JSON.stringify(path)},"status":${status},"body":`;
      if (!line.startsWith(prefix) || !line.endsWith("}")) throw new Error(`unexpected golden line in ${name}`);
      const query = new URL(path, "http://golden").searchParams;
      const cursor = (/** @type {string} */ key) => (query.has(key) ? Number(query.get(key)) : null);
      pages.push({
        file: name,
        path,
        session: new URL(path, "http://golden").pathname.replace(/\/page$/, ""),
        body: line.slice(prefix.length, -1),
        through: cursor("through"),
        before: cursor("before"),
      });
    }
  }
  return pages;
}

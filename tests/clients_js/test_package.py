"""clients/js as npm would publish it: packed, installed into a fresh project, used from TypeScript.

`npm pack` builds the declarations (the ``prepack`` script) and packs the tarball; a new
project installs it with ``npm install --offline`` (the package has no dependencies, so
nothing is fetched), and the pinned TypeScript of clients/js (its package-lock.json,
installed by scripts/with-node) type-checks a file that uses the client and the codec,
strictly, and one whose every marked line misuses them, so the types are not `any`.
`npm publish --dry-run` must pass without a warning.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "js"
NAME = "history-transport-client"
NODE = shutil.which("node")
NPM = shutil.which("npm")
TSC = PACKAGE / "node_modules" / ".bin" / "tsc"

pytestmark = [
    pytest.mark.skipif(NODE is None or NPM is None, reason="no node or npm on PATH (scripts/with-node installs it)"),
    pytest.mark.skipif(not TSC.exists(), reason="no clients/js/node_modules/.bin/tsc (scripts/with-node installs it)"),
]

CONSUMER_TSCONFIG = {
    "compilerOptions": {
        "strict": True,
        "noEmit": True,
        "target": "ES2022",
        "module": "NodeNext",
        "moduleResolution": "NodeNext",
        "lib": ["ES2022", "DOM"],
        "types": [],
        "skipLibCheck": False,
    },
}

USE = """\
import {
  HistoryClient,
  ServiceError,
  SessionDeletedError,
  decodeLiveRecords,
  decodePage,
  parseEventId,
  readPage,
  type Appended,
  type Created,
  type Event,
  type LiveRecords,
  type NewSession,
  type ListedSession,
  type ReadPage,
  type SearchHit,
  type SearchHits,
  type SearchKind,
  type SessionList,
} from "history-transport-client";

const client = new HistoryClient("http://127.0.0.1:8000", { token: "t0k", principal: "ann", timeoutMs: 5000 });
const header: NewSession = { id: "s1", createdAt: 0, cwd: "/w" };
const events: Event[] = [{ type: "user/message", seq: 0, time: 0, data: { text: "hi" }, surfaceOp: "append" }];

export async function write(): Promise<number> {
  const created: Created = await client.createSession(header);
  const incarnation: string = created.incarnation;
  const child = await client.createSession({ id: "s1.c", createdAt: 1, parentSession: "s1", origin: "subagent" });
  const appended: Appended = await client.append(created.id, events, { signal: new AbortController().signal });
  const again = await client.append(child.id, events);
  const idempotent: true | undefined = again.idempotent;
  await client.deleteSession(child.id);
  return appended.firstSeq + appended.headSeq + (idempotent ? 1 : 0) + incarnation.length;
}

export async function read(): Promise<string[]> {
  const page: ReadPage = await client.page("s1", { through: 0, maxMessages: 10 });
  const pinned = await client.page("s1", { through: 0, incarnation: "5d0c1e9a7b22" });
  const named: string | null = pinned.incarnation;
  const decoded = decodePage(JSON.parse('{"records":[],"hasMore":false,"fromSeq":0,"toSeq":0}'));
  const checked = readPage('{"records":[],"hasMore":false,"fromSeq":0,"toSeq":0}', { through: null });
  const bounds: number[] = [page.fromSeq, page.toSeq, decoded.fromSeq, checked.toSeq];
  const more: boolean = page.hasMore;
  const types: string[] = page.events({ after: -1 }).map((event: Event) => event.type);
  const walk = client.iterHistory("s1", { after: 0, incarnation: named ?? undefined });
  for await (const event of walk) types.push(`${event.seq}`);
  for await (const event of client.follow("s1", { after: 0, incarnation: "5d0c1e9a7b22" })) types.push(event.type);
  for await (const event of client.follow("s1", { packed: false })) types.push(event.type);
  const live: LiveRecords = decodeLiveRecords(JSON.parse('{"records":[],"fromSeq":0,"toSeq":0}'));
  types.push(...live.events().map((event: Event) => `${event.seq}`));
  const id = parseEventId("5d0c1e9a7b22:41");
  if (id !== null) types.push(`${id.incarnation ?? ""}:${id.seq}`);
  return more ? types : types.concat(bounds.map(String));
}

export async function list(): Promise<string[]> {
  const listed: SessionList = await client.sessions({ limit: 10, state: "open", q: "fix" });
  const first: ListedSession | undefined = listed.sessions[0];
  const tokens: number = first?.usage?.inputTokens ?? 0;
  const children = await client.subagents("s1", { q: "run" });
  return [`${listed.total}`, first?.title ?? "", `${first?.lastEventAt ?? tokens}`, `${children.total}`];
}

export async function find(signal: AbortSignal): Promise<string[]> {
  const filter = { state: "closed", since: 0, until: 1 } as const;
  const found: SearchHits = await client.search('"rate limit" retr*', { limit: 20, ...filter, signal });
  const more: SearchHits = await client.search("retry", { cursor: found.nextCursor ?? undefined });
  const hit: SearchHit | undefined = found.hits[0] ?? more.hits[0];
  if (hit === undefined) return [];
  const kind: SearchKind = hit.kind;
  const marked: string[] = hit.snippet.filter((_, i) => i % 2 === 1);
  const child = hit.parent === undefined ? undefined : hit.session;
  const at = await client.page(hit.parent ?? hit.session, { child, through: hit.seq });
  return [kind, hit.title ?? hit.session, `${hit.rank + hit.time + at.toSeq}`, ...marked];
}

export function why(error: unknown): string | null {
  if (error instanceof SessionDeletedError) return `${error.session} ${error.incarnation ?? "?"} deleted`;
  return error instanceof ServiceError ? `${error.status} ${error.code}: ${error.message}` : null;
}
"""

# Each line marked `// wrong` must be a type error; nothing else in the file is one.
WRONG = """\
import { HistoryClient, decodeLiveRecords, readPage, type Appended } from "history-transport-client";

const client = new HistoryClient("");
export async function misuse(): Promise<void> {
  await client.append("s1", [{ type: "note", seq: "0", time: 0, data: {} }]); // wrong
  await client.append("s1", [{ type: "note", seq: 0, data: {} }]); // wrong
  await client.createSession({ createdAt: 0 }); // wrong
  await client.createSession({ id: "s1", createdAt: 0, colour: "red" }); // wrong
  await client.createSession({ id: "s1", createdAt: 0, incarnation: "5d0c1e9a7b22" }); // wrong
  const gone: string = await client.deleteSession("s1"); // wrong
  await client.page(42); // wrong
  const appended: Appended = await client.createSession({ id: "s2", createdAt: 0 }); // wrong
  const from: string = readPage("{}").fromSeq; // wrong
  const missing: number = (await client.append("s1", [])).nextSeq; // wrong
  client.follow("s1", { packed: "no" }); // wrong
  const more: boolean = decodeLiveRecords({}).hasMore; // wrong
  await client.sessions({ state: "ended" }); // wrong
  const total: string = (await client.sessions()).total; // wrong
  await client.search(); // wrong
  await client.search("x", { state: "ended" }); // wrong
  await client.search("x", { since: "yesterday" }); // wrong
  const kind: "message" = (await client.search("x")).hits[0].kind; // wrong
  const counted: number = (await client.search("x")).total; // wrong
  const parent: string = (await client.search("x")).hits[0].parent; // wrong
  console.log(appended, from, missing, gone, more, total, kind, counted, parent);
}
"""


@dataclass(frozen=True)
class Packed:
    tarball: Path
    files: list[str]
    consumer: Path


def run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    # No update notifier, no audit and no funding messages: nothing that asks the registry.
    env = {**os.environ, "NO_UPDATE_NOTIFIER": "1", "npm_config_update_notifier": "false"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def tsc(project: Path, config: str) -> subprocess.CompletedProcess[str]:
    return run([str(TSC), "--noEmit", "-p", config], cwd=project)


def package_copy(dest: Path) -> Path:
    """clients/js copied to ``dest``/clients/js beside the repository's LICENSE, with its installed node_modules.

    `npm pack` and `npm publish` run the ``prepack`` script, which deletes and rebuilds types/ and copies
    ../../LICENSE in: run in the checkout, two of them at once (two pytest-xdist workers) would build
    into one types/ together. Each runs in a copy of its own instead, and the checkout is left as it was.
    """
    shutil.copy2(ROOT / "LICENSE", dest / "LICENSE")
    copy = dest / "clients" / "js"
    built = {"node_modules", "types", "LICENSE"}
    shutil.copytree(PACKAGE, copy, ignore=lambda folder, names: built & set(names) if folder == str(PACKAGE) else set())
    (copy / "node_modules").symlink_to(PACKAGE / "node_modules", target_is_directory=True)
    return copy


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Packed]:
    assert NPM is not None
    out = tmp_path_factory.mktemp("pack")
    source = package_copy(tmp_path_factory.mktemp("source"))
    pack = run([NPM, "pack", "--json", "--offline", "--pack-destination", str(out)], cwd=source)
    assert pack.returncode == 0, pack.stdout + pack.stderr
    [report] = json.loads(pack.stdout)
    tarball = out / report["filename"]
    assert tarball.is_file()

    consumer = tmp_path_factory.mktemp("consumer")
    (consumer / "package.json").write_text(json.dumps({"name": "consumer", "private": True, "type": "module"}))
    install = run([NPM, "install", "--offline", "--no-audit", "--no-fund", str(tarball)], cwd=consumer)
    assert install.returncode == 0, install.stdout + install.stderr
    (consumer / "tsconfig.json").write_text(json.dumps({**CONSUMER_TSCONFIG, "files": ["use.ts"]}))
    (consumer / "tsconfig.wrong.json").write_text(json.dumps({**CONSUMER_TSCONFIG, "files": ["wrong.ts"]}))
    (consumer / "use.ts").write_text(USE)
    (consumer / "wrong.ts").write_text(WRONG)
    yield Packed(tarball, sorted(entry["path"] for entry in report["files"]), consumer)


def test_the_tarball_holds_the_sources_the_declarations_and_the_license_only(packed: Packed) -> None:
    sources = sorted(path.name for path in (PACKAGE / "src").glob("*.js"))
    assert sources
    expected = {"LICENSE", "README.md", "package.json"}
    expected |= {f"src/{name}" for name in sources}
    expected |= {f"types/{name.removesuffix('.js')}.d.ts{map}" for name in sources for map in ("", ".map")}
    assert set(packed.files) == expected


def test_the_packed_manifest_is_public_and_points_at_the_declarations(packed: Packed) -> None:
    with tarfile.open(packed.tarball) as archive:
        member = archive.extractfile("package/package.json")
        assert member is not None
        manifest = json.load(member)
    assert manifest["name"] == NAME
    assert "private" not in manifest
    assert manifest["types"] == "./types/index.d.ts"
    assert manifest["exports"]["."] == {"types": "./types/index.d.ts", "default": "./src/index.js"}
    assert manifest.get("dependencies", {}) == {}


def test_the_readme_has_no_link_that_breaks_outside_the_repository() -> None:
    readme = (PACKAGE / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]*)\)", readme)
    assert [target for target in targets if not re.match(r"https?://|#", target)] == []
    assert "../" not in readme
    assert f"npm install {NAME}" in readme


def test_the_installed_package_imports_in_node(packed: Packed) -> None:
    assert NODE is not None
    script = (
        f'import {{ HistoryClient, readPage }} from "{NAME}";'
        'const page = readPage(\'{"records":[{"event":{"type":"note","seq":0,"time":0,"data":{}}}],'
        '"hasMore":false,"fromSeq":0,"toSeq":1}\');'
        "console.log(JSON.stringify([typeof HistoryClient.prototype.append, page.events()]));"
    )
    imported = run([NODE, "--input-type=module", "-e", script], cwd=packed.consumer)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout) == ["function", [{"type": "note", "seq": 0, "time": 0, "data": {}}]]


def test_typescript_checks_a_strict_use_of_the_installed_package(packed: Packed) -> None:
    checked = tsc(packed.consumer, "tsconfig.json")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_typescript_refuses_every_misuse_so_the_types_are_not_any(packed: Packed) -> None:
    checked = tsc(packed.consumer, "tsconfig.wrong.json")
    assert checked.returncode != 0
    wrong = {number for number, line in enumerate(WRONG.splitlines(), 1) if line.endswith("// wrong")}
    flagged = {int(line) for line in re.findall(r"^wrong\.ts\((\d+),\d+\): error TS\d+", checked.stdout, re.MULTILINE)}
    assert flagged == wrong, checked.stdout


def test_npm_publish_dry_run_passes_without_a_warning(tmp_path: Path) -> None:
    assert NPM is not None
    # A dry run warns when no login is configured for the registry, and asks the registry
    # whether the version exists. This one is offline and names a port on the loopback that
    # nothing serves, with a placeholder login: nothing leaves the machine.
    registry = "http://127.0.0.1:9/"
    npmrc = tmp_path / "npmrc"
    npmrc.write_text("//127.0.0.1:9/:_authToken=dry-run-placeholder\n")
    command = [NPM, "publish", "--dry-run", "--offline", "--userconfig", str(npmrc), "--registry", registry]
    published = run(command, cwd=package_copy(tmp_path))
    output = published.stdout + published.stderr
    assert published.returncode == 0, output
    assert [line for line in output.splitlines() if line.lower().startswith("npm warn")] == [], output
    assert f"+ {NAME}@" in output

// A real `history-service serve` as a child process on a fixed port, so a test can kill and
// restart it (the twin of testing/servers.py `ServerProcess`), and the service's own reads
// of its store, as the source of truth.
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { decodeStorageLine, expandRecords, validateHeader } from "../src/codec.js";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
export const SERVICE_BIN = process.env.HISTORY_SERVICE_BIN || join(REPO, ".venv/bin/history-service");
/** Why the live tests cannot run here, or `false`. */
export const SKIP = existsSync(SERVICE_BIN)
  ? false
  : `no history-service executable at ${SERVICE_BIN}: set HISTORY_SERVICE_BIN or create the repo's .venv`;

const run = promisify(execFile);

/** @returns {Promise<number>} a port free on 127.0.0.1 right now */
export async function freePort() {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  server.close();
  await once(server, "close");
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

export class ServiceProcess {
  /**
   * @param {string} storeUrl
   * @param {{port: number, args?: string[], env?: Record<string, string>}} options
   */
  constructor(storeUrl, { port, args = ["--auth", "none"], env = {} }) {
    this.storeUrl = storeUrl;
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.args = args;
    // A ping every second, so an idle follow stream shows it is alive long before any read timeout.
    // Idle connections outlive fetch's own 4 s keep-alive, so fetch always lets one go first and
    // never sends a request on a connection the server is closing.
    this.env = {
      ...process.env,
      HISTORY_ENABLE_TEST_SEED: "1",
      HISTORY_PING_INTERVAL: "1",
      HISTORY_TIMEOUT_KEEP_ALIVE: "60",
      ...env,
    };
    /** @type {import("node:child_process").ChildProcess | null} */
    this.child = null;
    this.stderr = "";
  }

  async start() {
    const args = ["serve", "--store", this.storeUrl, "--host", "127.0.0.1", "--port", String(this.port), ...this.args];
    const child = spawn(SERVICE_BIN, args, { env: this.env, stdio: ["ignore", "ignore", "pipe"] });
    this.child = child;
    this.stderr = "";
    // Read stderr as it comes, so a chatty server never blocks on a full pipe; keep the tail.
    child.stderr?.setEncoding("utf8").on("data", (text) => {
      this.stderr = (this.stderr + text).slice(-20_000);
    });
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`history-service exited (${child.exitCode ?? child.signalCode}): ${this.stderr}`);
      }
      if (Date.now() > deadline) throw new Error(`history-service did not start: ${this.stderr}`);
      try {
        if ((await fetch(`${this.url}/healthz`)).ok) return;
      } catch {
        // Not listening yet.
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** @param {NodeJS.Signals} [signal] */
  async stop(signal = "SIGTERM") {
    const child = this.child;
    this.child = null;
    if (child === null || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, "exit");
    child.kill(signal);
    const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(timer);
  }

  /** @param {string} path @param {unknown} body JSON text, or a value to encode @param {Record<string, string>} [headers] */
  async post(path, body, headers = {}) {
    const response = await fetch(`${this.url}${path}`, {
      method: "POST",
      headers: { "Content-Type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  }
}

/**
 * A session as `history-service export` reads it from the store, outside the HTTP
 * service: its header and its exact logical events (numbers keep their spellings).
 *
 * @param {string} storeUrl
 * @param {string} sessionId
 */
export async function exportSession(storeUrl, sessionId) {
  const { stdout } = await run(SERVICE_BIN, ["export", "--store", storeUrl, sessionId], {
    maxBuffer: 1 << 30,
    encoding: "utf8",
  });
  const lines = stdout.split("\n").filter((line) => line !== "");
  const header = validateHeader(JSON.parse(lines[0]));
  const records = lines.slice(1).map((line, i) => decodeStorageLine(line, `line ${i + 2}`));
  return { header, events: expandRecords(records) };
}

/** The scenario names the seeder accepts, read from its request type in history_service/seed.py. */
export function seederScenarios() {
  const source = readFileSync(join(REPO, "history_service/seed.py"), "utf8");
  const literal = /scenario:\s*Literal\[([^\]]*)\]/.exec(source);
  if (literal === null) throw new Error("history_service/seed.py: no `scenario: Literal[...]` field found");
  return [...literal[1].matchAll(/"([^"]+)"/g)].map((match) => match[1]).sort();
}

/** One seed request per seeder scenario, as testing/seeding.py `SCENARIOS`. */
export function scenarioRequests() {
  const explicit = readFileSync(join(REPO, "tests/golden/codec/text-turn.events.jsonl"), "utf8")
    .split("\n")
    .filter((line) => line !== "");
  return {
    "multi-turn": { scenario: "multi-turn", seed: 1, turns: 4 },
    subagent: { scenario: "subagent", seed: 2 },
    compaction: { scenario: "compaction", seed: 3 },
    // Spliced as text, so the golden events reach the seeder with their number spellings.
    explicit: `{"scenario":"explicit","header":${explicit[0]},"events":[${explicit.slice(1).join(",")}]}`,
    "dsh-synthetic": { scenario: "dsh-synthetic" },
  };
}

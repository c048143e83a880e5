// The JavaScript codec on the `realistic` tail page (416,756 events), packed against raw.
//
//   node --expose-gc bench/page.bench.js [DIR]
//
// DIR holds the bodies `python -m bench.js_fixture DIR` writes (default: $HISTORY_JS_FIXTURE_DIR,
// else history-js-bench in the temporary directory, made with the repository's .venv when missing). Prints one line,
// `HISTORY_JS_PAGE_PERF_RESULT {json}`:
//
// - time to a validated page: `readPage` of the packed body against the same call on the
//   raw body (JSON.parse plus validation of every event), from the body text, median of 9;
// - exact expansion of the packed page into all its events, median of 9;
// - heap peaks, each in a fresh `node --expose-gc` process, for three uses of the page:
//   the validated page alone, its events streamed (packed: one row at a time with
//   `iterPageEvents`), and all events in one array. Two measures: the largest
//   `heapUsed + external` at checkpoints after each phase, and the process's peak RSS,
//   both above the baseline before the body is read.
//
// It asserts structure (event counts, identical events), never time.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { iterPageEvents, readPage } from "../src/codec.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const ROUNDS = 9;
const HEAP_RUNS = 3;

/** @param {string[]} args */
function fixtureDir(args) {
  const dir = args[0] ?? process.env.HISTORY_JS_FIXTURE_DIR ?? join(tmpdir(), "history-js-bench");
  if (!existsSync(join(dir, "page.meta.json"))) {
    execFileSync(join(ROOT, ".venv", "bin", "python"), ["-m", "bench.js_fixture", dir], { cwd: ROOT, stdio: "inherit" });
  }
  return dir;
}

/** @param {number[]} samples */
function median(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** @param {number} ms */
const round = (ms) => Math.round(ms * 100) / 100;

/**
 * Median ms of `fn` over ROUNDS runs after one warm-up, with a full GC before each run.
 * @param {() => unknown} fn
 */
function timed(fn) {
  const gc = /** @type {() => void} */ (globalThis.gc);
  fn();
  const samples = [];
  for (let i = 0; i < ROUNDS; i++) {
    gc();
    const start = performance.now();
    fn();
    samples.push(performance.now() - start);
  }
  return { medianMs: round(median(samples)), samplesMs: samples.map(round) };
}

/** @param {string} dir */
function bodies(dir) {
  return {
    packed: readFileSync(join(dir, "page.packed.json"), "utf8"),
    raw: readFileSync(join(dir, "page.raw.json"), "utf8"),
  };
}

/** The figures of this process's main run. */
function main() {
  const dir = fixtureDir(process.argv.slice(2));
  const meta = JSON.parse(readFileSync(join(dir, "page.meta.json"), "utf8"));
  const { packed, raw } = bodies(dir);

  const packedPage = readPage(packed);
  const rawPage = readPage(raw);
  assert.equal(packedPage.toSeq - packedPage.fromSeq, meta.events);
  assert.equal(rawPage.records.length, meta.events);
  const packedEvents = packedPage.events();
  assert.equal(packedEvents.length, meta.events);
  assert.deepEqual(packedEvents, rawPage.events());

  const validated = { packed: timed(() => readPage(packed)), raw: timed(() => readPage(raw)) };
  const expansion = timed(() => packedPage.events());
  const heap = {};
  for (const use of ["page", "stream", "events"]) {
    const runs = { packed: [], raw: [] };
    for (let i = 0; i < HEAP_RUNS; i++) {
      for (const name of /** @type {const} */ (["packed", "raw"])) runs[name].push(child(dir, name, use));
    }
    const figure = (/** @type {"packed" | "raw"} */ name, /** @type {string} */ key) => median(runs[name].map((r) => r[key]));
    heap[use] = {
      packedPeakBytes: figure("packed", "heapPeak"),
      rawPeakBytes: figure("raw", "heapPeak"),
      heapRatio: round(figure("raw", "heapPeak") / figure("packed", "heapPeak")),
      packedMaxRssBytes: figure("packed", "rssPeak"),
      rawMaxRssBytes: figure("raw", "rssPeak"),
      rssRatio: round(figure("raw", "rssPeak") / figure("packed", "rssPeak")),
      runs,
    };
  }
  const result = {
    page: { ...meta, records: packedPage.records.length },
    validatedPage: { ...validated, speedup: round(validated.raw.medianMs / validated.packed.medianMs) },
    expansion: { events: packedEvents.length, ...expansion },
    heap,
    machine: { cpus: cpus().length, node: process.version, platform: `${process.platform}-${process.arch}` },
  };
  process.stdout.write(`\nHISTORY_JS_PAGE_PERF_RESULT ${stableJson(result)}\n`);
}

/**
 * One heap measurement in a fresh process.
 * @param {string} dir
 * @param {"packed" | "raw"} name
 * @param {string} use
 * @returns {{heapPeak: number, rssPeak: number}}
 */
function child(dir, name, use) {
  const run = spawnSync(process.execPath, ["--expose-gc", fileURLToPath(import.meta.url), "--heap", dir, name, use], {
    encoding: "utf8",
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout);
}

/** The heap side: read one body, use it as asked, and report the peaks above the baseline. */
function heapChild() {
  const [, , , dir, name, use] = process.argv;
  const gc = /** @type {() => void} */ (globalThis.gc);
  const used = () => {
    const memory = process.memoryUsage();
    return memory.heapUsed + memory.external;
  };
  gc();
  const base = used();
  const baseRss = process.memoryUsage().rss;
  let peak = 0;
  const checkpoint = () => {
    peak = Math.max(peak, used() - base);
  };
  const body = readFileSync(join(dir, `page.${name}.json`), "utf8");
  checkpoint();
  const page = readPage(body);
  checkpoint();
  let count = 0;
  if (use === "stream") {
    // A packed page expands one row at a time; every checkpoint holds at most one row's events.
    let since = 0;
    for (const event of iterPageEvents(page.records)) {
      count += event.seq >= 0 ? 1 : 0;
      if (++since === 10_000) {
        checkpoint();
        since = 0;
      }
    }
  } else if (use === "events") {
    const events = page.events();
    count = events.length;
    checkpoint();
  } else {
    count = page.toSeq - page.fromSeq;
  }
  checkpoint();
  assert.equal(count, page.toSeq - page.fromSeq);
  const rssPeak = process.resourceUsage().maxRSS * 1024 - baseRss;
  process.stdout.write(JSON.stringify({ heapPeak: peak, rssPeak }));
}

/**
 * JSON with sorted keys, as the Python benchmarks print their results.
 * @param {unknown} value
 * @returns {string}
 */
function stableJson(value) {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(",")}]`;
  if (typeof value === "object" && value !== null) {
    const entries = Object.keys(value)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${stableJson(/** @type {any} */ (value)[key])}`);
    return `{${entries.join(",")}}`;
  }
  return JSON.stringify(value);
}

if (typeof globalThis.gc !== "function") throw new Error("run with node --expose-gc");
if (process.argv[2] === "--heap") heapChild();
else main();

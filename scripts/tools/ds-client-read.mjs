// Reads a Durable Stream from offset -1 with the Durable Streams client (@durable-streams/client,
// pinned in package.json), for tests/history_service/durable/test_clients.py:
//
//   node ds-client-read.mjs URL [--live true|false|long-poll|sse] [--until up-to-date|closed]
//                               [--count N] [--resume N]
//
// `--live` is the client's own live option (default true). `--until up-to-date` (the default)
// reads with the client's json(), to the first up-to-date batch or wherever the client stops;
// `--until closed` follows with subscribeJson() until a batch says the stream closed, or after
// `--count` values. Each JSON value goes to stdout as one line, as JSON.stringify writes what
// the client parsed, written at once so a caller can watch a live read. A follow that fails
// resumes, up to `--resume` times (default 0), from the offset of the last batch it printed.
// Last, one JSON line goes to stderr: the last offset, upToDate and streamClosed, how many
// values were printed and how many resumes it took. A read that fails exits 1.
import { writeSync } from "node:fs";
import { stream } from "@durable-streams/client";

const usage =
  "usage: node ds-client-read.mjs URL [--live true|false|long-poll|sse] [--until up-to-date|closed] [--count N] [--resume N]";
const [url, ...rest] = process.argv.slice(2);
const options = { live: "true", until: "up-to-date", count: "", resume: "0" };
for (let i = 0; i < rest.length; i += 2) {
  const name = rest[i]?.replace(/^--/, "");
  if (!(name in options) || rest[i + 1] === undefined) throw new Error(usage);
  options[name] = rest[i + 1];
}
if (!url || !["true", "false", "long-poll", "sse"].includes(options.live)) throw new Error(usage);
if (!["up-to-date", "closed"].includes(options.until)) throw new Error(usage);
const live = { true: true, false: false }[options.live] ?? options.live;
const count = options.count === "" ? Infinity : Number(options.count);

// A killed server comes back within seconds: retry a lost connection soon, and not forever.
const backoffOptions = { initialDelay: 50, maxDelay: 1000, multiplier: 1.5, maxRetries: 200 };
// A synchronous write: a batch is printed whole before anything else runs, so the offset
// recorded with it is exactly where a resumed read must start. (fd 1 stays blocking, since
// process.stdout, which could make a pipe non-blocking, is never opened.)
const print = (items) => items.length && writeSync(1, items.map((item) => JSON.stringify(item) + "\n").join(""));

let printed = 0;
let resumes = 0;
let last = { offset: "-1", upToDate: false, streamClosed: false };

async function catchUp() {
  const res = await stream({ url, offset: "-1", live, backoffOptions });
  const items = (await res.json()).slice(0, count);
  print(items);
  printed = items.length;
  last = { offset: res.offset, upToDate: res.upToDate, streamClosed: res.streamClosed };
}

// One session of the client from `last.offset`: resolves when the follow is done, rejects
// when the client fails. A superseded session's late batches are dropped, never printed.
let generation = 0;
async function follow() {
  const mine = ++generation;
  const res = await stream({ url, offset: last.offset, live, backoffOptions });
  let unsubscribe = () => {};
  const finished = new Promise((resolve, reject) => {
    unsubscribe = res.subscribeJson((batch) => {
      if (mine !== generation) return;
      const items = batch.items.slice(0, count - printed);
      print(items);
      printed += items.length;
      last = { offset: batch.offset, upToDate: batch.upToDate, streamClosed: batch.streamClosed };
      if (printed >= count || batch.streamClosed) resolve();
    });
    // The client ends its read when it learns that the stream closed, perhaps from an SSE
    // control event that carries no batch, and perhaps before its subscriber has seen every
    // batch it holds: wait, boundedly, for the subscriber to print up to the client's offset.
    res.closed.then(async () => {
      for (let i = 0; i < 250 && last.offset !== res.offset; i++) await new Promise((wake) => setTimeout(wake, 20));
      if (mine !== generation || !res.streamClosed || last.offset !== res.offset) {
        reject(new Error(`the client ended its read at ${res.offset}, short of a closed stream`));
        return;
      }
      last.streamClosed = true;
      resolve();
    }, reject);
  });
  try {
    await finished;
  } finally {
    generation += mine === generation ? 1 : 0;
    unsubscribe();
  }
}

try {
  if (options.until === "up-to-date") await catchUp();
  else {
    for (;;) {
      try {
        await follow();
        break;
      } catch (err) {
        if (resumes >= Number(options.resume)) throw err;
        resumes += 1;
        process.stderr.write(`resuming from ${last.offset} after: ${err?.message ?? err}\n`);
      }
    }
  }
} catch (err) {
  process.stderr.write(`${err?.stack ?? err}\n`);
  process.exitCode = 1;
}
process.stderr.write(JSON.stringify({ ...last, values: printed, resumes }) + "\n");
process.exit();

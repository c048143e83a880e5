// The codec twin as a line oracle for tests/clients_js/test_codec_parity.py: one JSON
// request per stdin line, one JSON answer per stdout line. Lines travel as JSON text, so
// every comparison on the Python side is of exact bytes.
//
//   {"op":"pack","lines":[event…]}            → {"ok":true,"lines":[record…]}
//   {"op":"decode","lines":[storage line…]}   → {"ok":true,"results":[{"ok":true,"lines":[event…]} | error…]}
//   {"op":"json","texts":[json…]}             → {"ok":true,"results":[{"ok":true,"text":…} | error…]}
//   {"op":"page","body":…,"through":…,"before":…} → {"ok":true,"lines":[event…],"fast":[event…]}
//   {"op":"records","data":…}                 → {"ok":true,"lines":[event…]} (a records frame's data)
//
// A rejection answers {"ok":false,"error":<CodecError subclass name>,"message":…}; anything
// else thrown is a bug in the twin, answered as {"ok":false,"error":"crash: <name>",…}.
import { createInterface } from "node:readline";

import {
  decodeLiveRecords,
  decodeStorageLine,
  encodeJson,
  encodeRecord,
  expandRow,
  packChunkRuns,
  parseJsonExact,
  readPage,
  validateEvent,
} from "../src/codec.js";
import { CodecError } from "../src/errors.js";

/** @param {unknown} error */
function failure(error) {
  if (error instanceof CodecError) return { ok: false, error: error.name, message: error.message };
  const e = /** @type {Error} */ (error);
  return { ok: false, error: `crash: ${e?.name}`, message: String(e?.stack ?? e) };
}

/** @param {() => object} answer */
function attempt(answer) {
  try {
    return { ok: true, ...answer() };
  } catch (error) {
    return failure(error);
  }
}

/** @param {string} line */
function decodeLine(line) {
  const record = decodeStorageLine(line);
  const events = "seq0" in record ? expandRow(/** @type {any} */ (record)) : [record];
  return { lines: events.map(encodeRecord) };
}

const OPS = {
  /** @param {{lines: string[]}} request */
  pack: ({ lines }) => {
    const events = lines.map((line, i) => validateEvent(parseJsonExact(line), `events[${i}]`));
    return { lines: packChunkRuns(events).map(encodeRecord) };
  },
  /** @param {{lines: string[]}} request */
  decode: ({ lines }) => ({ results: lines.map((line) => attempt(() => decodeLine(line))) }),
  /** @param {{texts: string[]}} request */
  json: ({ texts }) => ({ results: texts.map((text) => attempt(() => ({ text: encodeJson(parseJsonExact(text)) }))) }),
  /** @param {{body: string, through: number | null, before: number | null}} request */
  page: ({ body, through, before }) => ({
    lines: readPage(body, { through, before, exact: true }).events().map(encodeRecord),
    fast: readPage(body, { through, before }).events().map(encodeRecord),
  }),
  /** @param {{data: string}} request */
  records: ({ data }) => ({ lines: decodeLiveRecords(parseJsonExact(data)).events().map(encodeRecord) }),
};

async function serve() {
  const input = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of input) {
    const request = JSON.parse(line);
    const op = OPS[/** @type {keyof OPS} */ (request.op)];
    const answer = op === undefined ? { ok: false, error: "crash: unknown op", message: request.op } : attempt(() => op(request));
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  }
}

// `node --test test/` runs every file under test/, this one too: there it has nothing to serve.
if (process.env.NODE_TEST_CONTEXT === undefined) await serve();

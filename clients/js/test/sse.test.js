// The event-stream decoder: any chunking, every line ending, the WHATWG field rules.
import assert from "node:assert/strict";
import { test } from "node:test";

import { SSEDecoder } from "../src/sse.js";

const STREAM =
  'retry: 250\n\n: a comment\nid: 7\nevent: snapshot\ndata: {"a":1}\n\n' +
  "event: event\r\ndata: line one\r\ndata: line two\r\n\r\n" +
  "id: 8\revent: event\rdata:no-space\r\r" +
  "data: message \u6771\u4eac \u{1f600}\n\n";

const EXPECTED = [
  { event: "snapshot", data: '{"a":1}', id: "7", retry: 250 },
  { event: "event", data: "line one\nline two", id: "7", retry: 250 },
  { event: "event", data: "no-space", id: "8", retry: 250 },
  { event: "message", data: "message \u6771\u4eac \u{1f600}", id: "8", retry: 250 },
];

/** @param {(Uint8Array | string)[]} chunks */
function decodeIn(chunks) {
  const decoder = new SSEDecoder();
  return [...chunks.flatMap((chunk) => decoder.feed(chunk)), ...decoder.end()];
}

/** A small seeded generator, so every run cuts the stream at the same places. */
function rand(seed) {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

/**
 * @template {{length: number, slice(a: number, b: number): any}} T
 * @param {T} whole
 * @param {number[]} cuts
 */
function cut(whole, cuts) {
  const bounds = [0, ...cuts.sort((a, b) => a - b), whole.length];
  return bounds.slice(1).map((end, i) => whole.slice(bounds[i], end));
}

test("a whole stream decodes every field and line ending", () => {
  assert.deepEqual(decodeIn([STREAM]), EXPECTED);
  assert.deepEqual(decodeIn([new TextEncoder().encode(STREAM)]), EXPECTED);
});

test("any chunking of the text gives the same events", () => {
  const next = rand(1);
  for (let round = 0; round < 300; round++) {
    const cuts = Array.from({ length: Math.floor(next() * 12) }, () => Math.floor(next() * STREAM.length));
    assert.deepEqual(decodeIn(cut(STREAM, cuts)), EXPECTED, `cuts ${cuts}`);
  }
});

test("any chunking of the bytes, inside a UTF-8 sequence too, gives the same events", () => {
  const bytes = new TextEncoder().encode(STREAM);
  const next = rand(2);
  for (let round = 0; round < 300; round++) {
    const cuts = Array.from({ length: Math.floor(next() * 12) }, () => Math.floor(next() * bytes.length));
    assert.deepEqual(decodeIn(cut(bytes, cuts)), EXPECTED, `cuts ${cuts}`);
  }
});

test("a stream fed one byte at a time decodes exactly", () => {
  const bytes = new TextEncoder().encode(STREAM);
  assert.deepEqual(decodeIn(Array.from(bytes, (_, i) => bytes.subarray(i, i + 1))), EXPECTED);
});

test("a CRLF split across chunks is one line ending", () => {
  assert.deepEqual(decodeIn(["data: x\r", "\n\r", "\n"]), [{ event: "message", data: "x", id: null, retry: null }]);
});

test("a CR that ends a chunk ends its line at once", () => {
  const decoder = new SSEDecoder();
  assert.deepEqual(decoder.feed("data: x\r"), []);
  assert.deepEqual(decoder.feed("\r"), [{ event: "message", data: "x", id: null, retry: null }]);
});

test("one leading BOM is dropped, in bytes or text, and only at the start", () => {
  const bom = new Uint8Array([0xef, 0xbb, 0xbf]);
  const rest = new TextEncoder().encode("data: x\n\n");
  assert.deepEqual(decodeIn([bom.subarray(0, 2), bom.subarray(2), rest]), [
    { event: "message", data: "x", id: null, retry: null },
  ]);
  assert.deepEqual(decodeIn(["\ufeffdata: x\n\n"]), [{ event: "message", data: "x", id: null, retry: null }]);
  // A second BOM is not a BOM any more: it makes the field name "\ufeffdata", which is ignored.
  assert.deepEqual(decodeIn(["\ufeff\ufeffdata: x\n\n"]), []);
  assert.deepEqual(decodeIn(["data: \ufeffx\n\n"]), [{ event: "message", data: "\ufeffx", id: null, retry: null }]);
});

const EDGE_CASES = [
  ["retry only", "retry: 1000\n\n", []],
  ["no data", "event: event\n\n", []],
  ["id with NUL", "id: a\0b\ndata: x\n\n", [{ event: "message", data: "x", id: null, retry: null }]],
  ["bad retry", "retry: soon\ndata: x\n\n", [{ event: "message", data: "x", id: null, retry: null }]],
  ["empty data field", "data\n\n", [{ event: "message", data: "", id: null, retry: null }]],
  ["two empty data lines", "data\ndata\n\n", [{ event: "message", data: "\n", id: null, retry: null }]],
  ["no blank line", "data: unterminated", []],
  ["unknown field", "foo: bar\ndata: x\n\n", [{ event: "message", data: "x", id: null, retry: null }]],
  ["only one space is stripped", "data:  two\n\n", [{ event: "message", data: " two", id: null, retry: null }]],
  ["empty id resets it", "id: 3\ndata: a\n\nid\ndata: b\n\n", [
    { event: "message", data: "a", id: "3", retry: null },
    { event: "message", data: "b", id: "", retry: null },
  ]],
  ["event name resets after dispatch", "event: x\ndata: a\n\ndata: b\n\n", [
    { event: "x", data: "a", id: null, retry: null },
    { event: "message", data: "b", id: null, retry: null },
  ]],
];

for (const [name, stream, expected] of EDGE_CASES) {
  test(`field edge case: ${name}`, () => {
    assert.deepEqual(decodeIn([/** @type {string} */ (stream)]), expected);
  });
}

test("a long line arriving in many pieces is joined once", () => {
  const data = "x".repeat(100_000);
  const pieces = cut(`data: ${data}\n\n`, Array.from({ length: 999 }, (_, i) => (i + 1) * 100));
  assert.deepEqual(decodeIn(pieces), [{ event: "message", data, id: null, retry: null }]);
});

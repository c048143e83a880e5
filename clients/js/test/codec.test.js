// The codec twin against our golden files and the Python codec's own edge-case tables.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  CodecError,
  EventValidationError,
  InvalidJsonError,
  PageContinuityError,
  RecordFormatError,
  RowFormatError,
  SessionIdError,
} from "../src/errors.js";
import {
  MAX_SAFE_INTEGER,
  checkPage,
  checkSessionId,
  decodeFollowSnapshot,
  decodeLiveEvent,
  decodeLiveRecord,
  decodeLiveRecords,
  decodePage,
  decodeStorageLine,
  decodeStorageRecord,
  encodeJson,
  encodeLines,
  encodeRecord,
  eventId,
  expandRecords,
  expandRow,
  formatFloat,
  packChunkRuns,
  parseEventId,
  parseJsonExact,
  readPage,
  validateEvent,
  validateHeader,
} from "../src/codec.js";
import { codecSessions, goldenPages, lines } from "./golden.js";

const T0 = 1_700_000_000_000;

/** @param {string} line @param {number} i */
const exactEvent = (line, i) => validateEvent(parseJsonExact(line), `events[${i}]`);

/** @param {any[]} records */
const kinds = (records) => records.map((record) => record.type);

/**
 * @param {number} seq
 * @param {number} time
 * @param {string} text
 * @param {Record<string, any>} [extra]
 */
function text(seq, time, text, extra = {}) {
  return { type: "assistant/chunk", seq, time, data: { turn: 1, step: 1, chunk: { type: "text-delta", index: 0, text } }, ...extra };
}

/**
 * @param {number} seq
 * @param {string} args
 * @param {string | null} [name] null for a nameless delta
 */
function tool(seq, args, name = "bash") {
  const chunk = name === null
    ? { type: "tool-call-delta", index: 1, id: "c1", argumentsDelta: args }
    : { type: "tool-call-delta", index: 1, id: "c1", name, argumentsDelta: args };
  return { type: "assistant/chunk", seq, time: T0 + seq, data: { turn: 1, step: 1, chunk } };
}

describe("golden codec sessions", () => {
  for (const [name, eventsPath, packedPath] of codecSessions()) {
    const [headerLine, ...eventLines] = lines(eventsPath);
    const [packedHeader, ...packedLines] = lines(packedPath);

    test(`${name}: the events file re-encodes to its own bytes`, () => {
      const header = validateHeader(parseJsonExact(headerLine));
      assert.equal(encodeRecord(header), headerLine);
      assert.deepEqual(eventLines.map((line, i) => encodeRecord(exactEvent(line, i))), eventLines);
    });

    test(`${name}: packChunkRuns gives exactly the packed file's bytes`, () => {
      const events = eventLines.map(exactEvent);
      assert.equal(encodeLines(packChunkRuns(events)), packedLines.map((line) => `${line}\n`).join(""));
      assert.equal(packedHeader, headerLine);
    });

    test(`${name}: the packed file decodes to exactly the events`, () => {
      const records = packedLines.map((line) => decodeStorageLine(line));
      assert.deepEqual(expandRecords(records).map(encodeRecord), eventLines);
    });

    test(`${name}: JSON.parse values decode to the same events by value`, () => {
      const decoded = packedLines.flatMap((line) => decodeStorageRecord(JSON.parse(line)));
      assert.deepEqual(decoded, eventLines.map((line) => JSON.parse(line)));
    });
  }
});

describe("golden service pages", () => {
  const pages = goldenPages();
  /** @type {Map<string, Map<number, string>>} */
  const seen = new Map();

  test("there are golden pages to read", () => {
    assert.ok(pages.length >= 20, `only ${pages.length} inline golden pages`);
  });

  for (const golden of pages) {
    test(`${golden.file} ${golden.path}`, () => {
      const cursor = { through: golden.through, before: golden.before };
      const page = readPage(golden.body, cursor);
      assert.equal(checkPage(decodePage(JSON.parse(golden.body)), cursor).toSeq, page.toSeq);
      const events = page.events();
      assert.deepEqual(events.map((event) => event.seq), range(page.fromSeq, page.toSeq));

      const exact = readPage(golden.body, { ...cursor, exact: true });
      const exactEvents = exact.events();
      assert.deepEqual(exactEvents.map((event) => JSON.parse(encodeRecord(event))), events);
      // A page's records are exactly what packing its slice gives (§4.2).
      const body = JSON.parse(golden.body);
      const repacked = packChunkRuns(exactEvents).map((record) => (record.type in ROWS ? { chunks: record } : { event: record }));
      assert.equal(`[${repacked.map(encodeRecord).join(",")}]`, recordsText(golden.body, body.records.length));
      assert.deepEqual(page.events({ after: page.fromSeq + 1 }), events.slice(2));

      const bySeq = seen.get(golden.session) ?? new Map();
      seen.set(golden.session, bySeq);
      for (const event of exactEvents) {
        const bytes = encodeRecord(event);
        assert.equal(bySeq.get(event.seq) ?? bytes, bytes, `seq ${event.seq} differs between pages`);
        bySeq.set(event.seq, bytes);
      }
    });
  }
});

const ROWS = { "text-chunks": 1, "reasoning-chunks": 1, "tool-call-chunks": 1 };

/** @param {number} from @param {number} to */
function range(from, to) {
  return Array.from({ length: to - from }, (_, k) => from + k);
}

/**
 * The records array of a page body, as text.
 * @param {string} body
 * @param {number} count
 */
function recordsText(body, count) {
  assert.ok(body.startsWith('{"records":['));
  const end = body.lastIndexOf('],"hasMore":');
  return count === 0 ? "[]" : body.slice('{"records":'.length, end + 1);
}

describe("packing", () => {
  test("five text deltas become one row with dense dt", () => {
    const events = ["a", "b", "c", "d", "e"].map((value, k) => text(10 + k, T0 + 10 * k, value));
    const [row] = packChunkRuns(events);
    assert.equal(
      encodeRecord(row),
      `{"type":"text-chunks","seq0":10,"time0":${T0},"data":{"turn":1,"step":1,"index":0,"dt":[10,10,10,10],"texts":["a","b","c","d","e"]}}`,
    );
    assert.deepEqual(expandRecords([row]), events);
  });

  test("runs shorter than three stay verbatim", () => {
    for (const length of [1, 2]) {
      const events = range(0, length).map((k) => text(k, T0, "x"));
      assert.deepEqual(packChunkRuns(events), events);
    }
  });

  test("a tool-call row keeps name only when every member has the same one", () => {
    const named = packChunkRuns([tool(0, "a"), tool(1, "b"), tool(2, "c")]);
    assert.equal(named.length, 1);
    assert.ok(encodeRecord(named[0]).includes('"id":"c1","name":"bash","args":["a","b","c"]'));
    const nameless = packChunkRuns([tool(0, "a", null), tool(1, "b", null), tool(2, "c", null)]);
    assert.ok(encodeRecord(nameless[0]).includes('"id":"c1","args":'));
    assert.deepEqual(expandRecords(nameless).map((event) => "name" in event.data.chunk), [false, false, false]);
    const mixed = [tool(0, "a"), tool(1, "b", null), tool(2, "c"), tool(3, "d", "read")];
    assert.deepEqual(packChunkRuns(mixed), mixed);
  });

  test("1 and 1.0 (and 0.0 and -0.0) are different blocks, and each keeps its spelling", () => {
    const spellings = ["1", "1", "1", "1.0", "1.0", "1.0", "0.0", "0.0", "-0.0", "-0.0", "-0.0"];
    const eventLines = spellings.map(
      (turn, seq) =>
        `{"type":"assistant/chunk","seq":${seq},"time":${T0},"data":{"turn":${turn},"step":1,"chunk":{"type":"text-delta","index":0,"text":"t"}}}`,
    );
    const records = packChunkRuns(eventLines.map(exactEvent));
    assert.deepEqual(kinds(records), ["text-chunks", "text-chunks", "assistant/chunk", "assistant/chunk", "text-chunks"]);
    assert.ok(encodeRecord(records[1]).includes('"turn":1.0'));
    assert.ok(encodeRecord(records[4]).includes('"turn":-0.0'));
    assert.deepEqual(expandRecords(records).map(encodeRecord), eventLines);
  });

  test("negative dt round trips", () => {
    const events = [text(0, T0, "a"), text(1, T0 - 5, "b"), text(2, T0 - 5, "c"), text(3, T0 + 100, "d")];
    const [row] = packChunkRuns(events);
    assert.deepEqual(row.data.dt, [-5, 0, 105]);
    assert.deepEqual(expandRecords([decodeStorageLine(encodeRecord(row))]), events);
  });

  test("a time gap beyond the safe range splits the run", () => {
    const low = [0, 1, 2].map((k) => text(k, -MAX_SAFE_INTEGER, "a"));
    const high = [3, 4, 5].map((k) => text(k, MAX_SAFE_INTEGER - 1, "b"));
    const records = packChunkRuns([...low, ...high]);
    assert.deepEqual(kinds(records), ["text-chunks", "text-chunks"]);
    assert.deepEqual(expandRecords(records.map((record) => decodeStorageLine(encodeRecord(record)))), [...low, ...high]);
  });

  test("a delta in another key order packs and expands canonically", () => {
    const events = range(0, 3).map((k) => ({
      type: "assistant/chunk",
      seq: k,
      time: T0,
      data: { step: 1, turn: 1, chunk: { text: "a", index: 0, type: "text-delta" } },
    }));
    assert.deepEqual(expandRecords(packChunkRuns(events)), range(0, 3).map((k) => text(k, T0, "a")));
  });

  const offWhitelist = {
    "extra-envelope-key": (/** @type {number} */ seq) => text(seq, T0, "x", { surfaceOp: "append" }),
    ignorable: (/** @type {number} */ seq) => text(seq, T0, "x", { ignorable: true }),
    "non-string-text": (/** @type {number} */ seq) => ({ ...text(seq, T0, "x"), data: { turn: 1, step: 1, chunk: { type: "text-delta", index: 0, text: 5 } } }),
    "fractional-time": (/** @type {number} */ seq) => text(seq, T0 + 0.5, "x"),
    "negative-seq": () => text(-1, T0, "x"),
    "data-not-object": (/** @type {number} */ seq) => ({ type: "assistant/chunk", seq, time: T0, data: ["not", "an", "object"] }),
    "extra-data-key": (/** @type {number} */ seq) => ({ ...text(seq, T0, "x"), data: { ...text(seq, T0, "x").data, x: 1 } }),
    "bool-turn": (/** @type {number} */ seq) => ({ ...text(seq, T0, "x"), data: { ...text(seq, T0, "x").data, turn: true } }),
    "non-number-index": (/** @type {number} */ seq) => ({ ...text(seq, T0, "x"), data: { turn: 1, step: 1, chunk: { type: "text-delta", index: "0", text: "x" } } }),
    "extra-chunk-key": (/** @type {number} */ seq) => ({ ...text(seq, T0, "x"), data: { turn: 1, step: 1, chunk: { type: "text-delta", index: 0, text: "x", extra: 1 } } }),
    "non-string-name": (/** @type {number} */ seq) => ({ ...tool(seq, "x"), data: { turn: 1, step: 1, chunk: { type: "tool-call-delta", index: 1, id: "c", name: null, argumentsDelta: "x" } } }),
    "unknown-chunk-type": (/** @type {number} */ seq) => ({ ...text(seq, T0, "x"), data: { turn: 1, step: 1, chunk: { type: "image-delta", index: 1, data: "x" } } }),
    "inherited-chunk-type": (/** @type {number} */ seq) => ({ ...text(seq, T0, "x"), data: { turn: 1, step: 1, chunk: { type: "toString", index: 1, text: "x" } } }),
    "other-event-type": (/** @type {number} */ seq) => ({ ...text(seq, T0, "x"), type: "assistant/chunks" }),
  };
  for (const [id, make] of Object.entries(offWhitelist)) {
    test(`off-whitelist event stays verbatim and breaks the run: ${id}`, () => {
      const odd = make(3);
      const events = [...[0, 1, 2].map((k) => text(k, T0, "a")), odd, ...[4, 5, 6].map((k) => text(k, T0, "b"))];
      const records = packChunkRuns(events);
      assert.deepEqual(kinds(records), ["text-chunks", odd.type, "text-chunks"]);
      assert.equal(records[1], odd);
      const three = [0, 1, 2].map((k) => make(k));
      assert.deepEqual(packChunkRuns(three), three);
    });
  }
});

const GOOD_TEXT_ROW = {
  type: "text-chunks",
  seq0: 4,
  time0: T0,
  data: { turn: 1, step: 1, index: 0, dt: [1, 1], texts: ["a", "b", "c"] },
};
const GOOD_TOOL_ROW = {
  type: "tool-call-chunks",
  seq0: 4,
  time0: T0,
  data: { turn: 1, step: 1, index: 0, dt: [1, 1], id: "c1", name: "bash", args: ["a", "b", "c"] },
};
const DELETE = Symbol("delete");

/**
 * @param {Record<string, any>} base
 * @param {string[]} path
 * @param {unknown} value
 */
function mutate(base, path, value) {
  const out = { ...base, data: { ...base.data } };
  /** @type {Record<string, any>} */
  let target = out;
  for (const key of path.slice(0, -1)) target = target[key];
  if (value === DELETE) delete target[path[path.length - 1]];
  else target[path[path.length - 1]] = value;
  return out;
}

// The table of tests/codec/test_chunk_rows.py REJECTIONS, with its ids.
const REJECTIONS = {
  "data-not-object": mutate(GOOD_TEXT_ROW, ["data"], [1, 2]),
  "extra-envelope-key": mutate(GOOD_TEXT_ROW, ["extra"], 1),
  "seq-instead-of-seq0": mutate(GOOD_TEXT_ROW, ["seq"], 4),
  "negative-seq0": mutate(GOOD_TEXT_ROW, ["seq0"], -1),
  "unsafe-seq0": mutate(GOOD_TEXT_ROW, ["seq0"], 2 ** 53),
  "infinite-time0": mutate(GOOD_TEXT_ROW, ["time0"], Infinity),
  "nan-time0": mutate(GOOD_TEXT_ROW, ["time0"], NaN),
  "fractional-time0": mutate(GOOD_TEXT_ROW, ["time0"], 1.5),
  "unsafe-time0": mutate(GOOD_TEXT_ROW, ["time0"], 2 ** 53),
  "missing-seq0": mutate(GOOD_TEXT_ROW, ["seq0"], DELETE),
  "args-in-text-row": { ...GOOD_TEXT_ROW, data: { turn: 1, step: 1, index: 0, dt: [1, 1], args: ["a", "b", "c"] } },
  "non-string-member": mutate(GOOD_TEXT_ROW, ["data", "texts"], ["a", 1, "c"]),
  "empty-members": mutate(GOOD_TEXT_ROW, ["data", "texts"], []),
  "members-not-a-list": mutate(GOOD_TEXT_ROW, ["data", "texts"], "abc"),
  "dt-too-short": mutate(GOOD_TEXT_ROW, ["data", "dt"], [1]),
  "dt-too-long": mutate(GOOD_TEXT_ROW, ["data", "dt"], [1, 1, 1]),
  "nan-dt": mutate(GOOD_TEXT_ROW, ["data", "dt"], [1, NaN]),
  "fractional-dt": mutate(GOOD_TEXT_ROW, ["data", "dt"], [1, 0.5]),
  "unsafe-dt": mutate(GOOD_TEXT_ROW, ["data", "dt"], [1, 2 ** 53]),
  "non-number-turn": mutate(GOOD_TEXT_ROW, ["data", "turn"], "1"),
  "null-index": mutate(GOOD_TEXT_ROW, ["data", "index"], null),
  "extra-data-key": mutate(GOOD_TEXT_ROW, ["data", "extra"], 1),
  "member-seq-overflow": mutate(GOOD_TEXT_ROW, ["seq0"], MAX_SAFE_INTEGER),
  "member-time-overflow": mutate(GOOD_TEXT_ROW, ["time0"], MAX_SAFE_INTEGER - 1),
  "member-time-underflow": { ...GOOD_TEXT_ROW, time0: -MAX_SAFE_INTEGER, data: { ...GOOD_TEXT_ROW.data, dt: [-1, 5] } },
  "tool-row-without-id": mutate(GOOD_TOOL_ROW, ["data", "id"], DELETE),
  "tool-row-non-string-id": mutate(GOOD_TOOL_ROW, ["data", "id"], 1),
  "tool-row-non-string-name": mutate(GOOD_TOOL_ROW, ["data", "name"], 1),
  "tool-row-null-name": mutate(GOOD_TOOL_ROW, ["data", "name"], null),
  "texts-in-tool-row": { ...GOOD_TOOL_ROW, data: { ...GOOD_TEXT_ROW.data } },
};

// The messages Python gives for the same rows, where they are worth pinning.
const MESSAGES = {
  "data-not-object": "malformed text-chunks row: row.data: expected `object`, got `array`",
  "extra-envelope-key": "malformed text-chunks row: row: object contains unknown field `extra`",
  "unsafe-seq0": "malformed text-chunks row: row.seq0: expected `int` <= 9007199254740991",
  "nan-time0": "malformed text-chunks row: row.time0: expected `int`, got `float`",
  "missing-seq0": "malformed text-chunks row: row: object missing required field `seq0`",
  "non-string-member": "malformed text-chunks row: row.data.texts[1]: expected `str`, got `int`",
  "empty-members": "malformed text-chunks row: row.data.texts: expected `array` of length >= 1",
  "dt-too-short": "malformed text-chunks row: dt has 1 entries for 3 members, expected 2",
  "fractional-dt": "malformed text-chunks row: row.data.dt[1]: expected `int`, got `float`",
  "non-number-turn": "malformed text-chunks row: row.data.turn: expected `int | float`, got `str`",
  "member-seq-overflow": "malformed text-chunks row: member seq 9007199254740991 + 2 exceeds 2^53-1",
  "member-time-overflow": "malformed text-chunks row: running time of member 2 exceeds 2^53-1",
  "member-time-underflow": "malformed text-chunks row: running time of member 1 exceeds 2^53-1",
  "tool-row-null-name": "malformed tool-call-chunks row: row.data.name: expected `str`, got `null`",
};

describe("strict row decoding", () => {
  for (const [id, value] of Object.entries(REJECTIONS)) {
    test(`rejects ${id}`, () => {
      const pattern = new RegExp(`^malformed ${value.type} row: `);
      assert.throws(() => decodeStorageRecord(value), (error) => error instanceof RowFormatError && pattern.test(error.message));
      const message = MESSAGES[/** @type {keyof MESSAGES} */ (id)];
      if (message !== undefined) assert.throws(() => decodeStorageRecord(value), { name: "RowFormatError", message });
      if (!id.startsWith("nan") && !id.startsWith("infinite")) {
        assert.throws(() => decodeStorageLine(encodeJson(value)), (error) => error instanceof RowFormatError && pattern.test(error.message));
      }
    });
  }

  test("a float spelling is not an integer where the row needs one", () => {
    for (const line of [
      '{"type":"text-chunks","seq0":4.0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}',
      '{"type":"text-chunks","seq0":4,"time0":1e3,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}',
      '{"type":"text-chunks","seq0":4,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1,2.0],"texts":["a","b","c"]}}',
    ]) {
      assert.throws(() => decodeStorageLine(line), { name: "RowFormatError", message: /expected `int`, got `float`/ });
    }
  });

  test("non-finite numbers are not JSON", () => {
    for (const line of ['{"type":"text-chunks","seq0":0,"time0":NaN}', '{"type":"text-chunks","seq0":0,"time0":1e400}']) {
      assert.throws(() => decodeStorageLine(line), InvalidJsonError);
    }
  });

  test("good rows decode", () => {
    assert.equal(decodeStorageRecord(GOOD_TEXT_ROW).length, 3);
    assert.deepEqual(decodeStorageRecord(GOOD_TOOL_ROW).map((event) => /** @type {any} */ (event).data.chunk.name), ["bash", "bash", "bash"]);
    const last = /** @type {any} */ (decodeStorageRecord(mutate(GOOD_TEXT_ROW, ["seq0"], MAX_SAFE_INTEGER - 2)).at(-1));
    assert.equal(last.seq, MAX_SAFE_INTEGER);
    const solo = { ...GOOD_TEXT_ROW, data: { ...GOOD_TEXT_ROW.data, dt: [], texts: ["solo"] } };
    assert.deepEqual(decodeStorageRecord(solo).map((event) => /** @type {any} */ (event).seq), [4]);
  });

  test("values that are not rows decode to themselves", () => {
    for (const value of ["junk", null, 7, [1, 2], { type: "user/message", data: {} }, { type: 5 }, { no: "type" }]) {
      assert.deepEqual(decodeStorageRecord(value), [value]);
    }
  });

  test("expanded events have the canonical key order", () => {
    const events = expandRow(/** @type {any} */ (decodeStorageLine(encodeJson(GOOD_TOOL_ROW))));
    assert.equal(
      encodeRecord(events[0]),
      `{"type":"assistant/chunk","seq":4,"time":${T0},"data":{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":0,"id":"c1","name":"bash","argumentsDelta":"a"}}}`,
    );
  });
});

describe("event validation", () => {
  const base = { type: "x", seq: 0, time: 0, data: 1 };
  const cases = {
    "not an object": [[1], "event: expected `object`, got `array`"],
    "missing data": [{ type: "x", seq: 0, time: 0 }, "event: object missing required field `data`"],
    "unknown field": [{ ...base, z: 1 }, "event: object contains unknown field `z`"],
    "empty type": [{ ...base, type: "" }, "event.type: expected `str` of length >= 1"],
    "long type": [{ ...base, type: "x".repeat(129) }, "event.type: expected `str` of length <= 128"],
    "negative seq": [{ ...base, seq: -1 }, "event.seq: expected `int` >= 0"],
    "unsafe seq": [{ ...base, seq: 2 ** 53 }, "event.seq: expected `int` <= 9007199254740991"],
    "bool seq": [{ ...base, seq: true }, "event.seq: expected `int`, got `bool`"],
    "unsafe time": [{ ...base, time: -(2 ** 53) }, "event.time: expected `int` >= -9007199254740991"],
    "false ignorable": [{ ...base, ignorable: false }, "event.ignorable: invalid enum value False"],
    "negative source seq": [{ ...base, sourceEventSeqs: [1, -1] }, "event.sourceEventSeqs[1]: expected `int` >= 0"],
    "other surfaceOp": [{ ...base, surfaceOp: "prepend" }, `event.surfaceOp: expected "append" or {op,start,end} (invalid enum value 'prepend')`],
    "inverted op": [{ ...base, surfaceOp: { op: "replace", start: 3, end: 1 } }, `event.surfaceOp: expected "append" or {op,start,end} (end 1 is before start 3)`],
    "other op": [{ ...base, conversationOp: { op: "x", start: 1, end: 1 } }, `event.conversationOp: expected {op:"replace",start,end} (invalid value 'x')`],
    "op with extra key": [{ ...base, conversationOp: { op: "replace", start: 1, end: 2, q: 1 } }, 'event.conversationOp: expected {op:"replace",start,end} (object contains unknown field `q`)'],
    "string conversationOp": [{ ...base, conversationOp: "append" }, 'event.conversationOp: expected {op:"replace",start,end} (expected `object`, got `str`)'],
    "null surfaceOp": [{ ...base, surfaceOp: null }, 'event.surfaceOp: expected "append" or {op,start,end} (expected `str | object`, got `null`)'],
    "reserved type": [{ ...base, type: "session" }, "event.type: 'session' is reserved for storage lines"],
  };
  for (const [name, [value, message]] of Object.entries(cases)) {
    test(`rejects ${name}`, () => {
      assert.throws(() => validateEvent(value), { name: "EventValidationError", message });
    });
  }

  test("data nests at most 64 levels", () => {
    /** @param {number} depth */
    const nest = (depth) => {
      /** @type {unknown} */
      let value = 1;
      for (let k = 0; k < depth; k++) value = k % 2 ? { a: value } : [value];
      return value;
    };
    validateEvent({ ...base, data: nest(64) });
    assert.throws(() => validateEvent({ ...base, data: nest(65) }), {
      name: "EventValidationError",
      message: "event.data: nests deeper than 64 levels of arrays and objects",
    });
  });

  test("a valid event comes back in canonical form", () => {
    const canonical = { ...base, ignorable: true };
    assert.equal(validateEvent(canonical), canonical);
    const shuffled = {
      conversationOp: { end: 2, start: 1, op: "replace" },
      data: { b: 1, a: 2 },
      time: 5,
      seq: 1,
      type: "user/message",
    };
    assert.equal(
      encodeRecord(validateEvent(shuffled)),
      '{"type":"user/message","seq":1,"time":5,"data":{"b":1,"a":2},"conversationOp":{"op":"replace","start":1,"end":2}}',
    );
    assert.deepEqual(Object.keys(validateEvent(shuffled)), ["type", "seq", "time", "data", "conversationOp"]);
  });

  test("a replace object needs its op, as §2.1 lists exactly op, start and end", () => {
    assert.throws(() => validateEvent({ ...base, conversationOp: { start: 1, end: 2 } }), {
      name: "EventValidationError",
      message: 'event.conversationOp: expected {op:"replace",start,end} (object missing required field `op`)',
    });
  });

  test("a float spelling is not an integer seq", () => {
    assert.throws(() => validateEvent(parseJsonExact('{"type":"x","seq":1.0,"time":0,"data":1}')), {
      message: "event.seq: expected `int`, got `float`",
    });
  });

  test("session ids follow §2.4", () => {
    for (const id of ["s1", "{{sessionId}}", "a.b_c:d@e~f-g", "x".repeat(200)]) assert.equal(checkSessionId(id), id);
    for (const id of ["", ".", "..", "a/b", "a b", "é", "x".repeat(201), 5]) assert.throws(() => checkSessionId(id), SessionIdError);
    assert.ok(new SessionIdError("x") instanceof EventValidationError);
  });

  test("headers are strict and canonical", () => {
    const header = validateHeader({ createdAt: 1, id: "s1", meta: { a: 1 }, origin: "subagent", parentSession: "s0" });
    assert.equal(encodeRecord(header), '{"type":"session","version":0,"id":"s1","createdAt":1,"parentSession":"s0","origin":"subagent","meta":{"a":1}}');
    assert.throws(() => validateHeader({ id: "s1", createdAt: 1, owner: "me" }), EventValidationError);
    assert.throws(() => validateHeader({ id: "s1", createdAt: 1, version: 1 }), EventValidationError);
  });

  test("a closed session's header keeps closedAt, last, as a safe integer", () => {
    const header = validateHeader({ closedAt: 1_700_000_009_000, meta: {}, createdAt: 1, id: "s1" });
    assert.equal(encodeRecord(header), '{"type":"session","version":0,"id":"s1","createdAt":1,"meta":{},"closedAt":1700000009000}');
    for (const closedAt of ["1", 1.5, 2 ** 53, null]) {
      assert.throws(() => validateHeader({ id: "s1", createdAt: 1, closedAt }), EventValidationError, String(closedAt));
    }
  });

  test("a header keeps its expiresAt between meta and closedAt, as a safe integer", () => {
    const sent = { closedAt: 9, expiresAt: 1_800_000_000_000, meta: {}, createdAt: 1, id: "s1" };
    // Byte for byte what codec/event_json.py decode_header and encode give for the same header.
    const canonical = '{"type":"session","version":0,"id":"s1","createdAt":1,"meta":{},"expiresAt":1800000000000,"closedAt":9}';
    assert.equal(encodeRecord(validateHeader(sent)), canonical);
    for (const expiresAt of ["1", 1.5, 2 ** 53, null]) {
      assert.throws(() => validateHeader({ id: "s1", createdAt: 1, expiresAt }), EventValidationError, String(expiresAt));
    }
  });

  test("a header keeps the incarnation the service sets, last, in canonical order", () => {
    const sent = { incarnation: "0af", closedAt: 9, meta: {}, createdAt: 1, id: "s1" };
    // Byte for byte what codec/event_json.py decode_header and encode give for the same header.
    const canonical = '{"type":"session","version":0,"id":"s1","createdAt":1,"meta":{},"closedAt":9,"incarnation":"0af"}';
    assert.equal(encodeRecord(validateHeader(sent)), canonical);
    assert.equal(encodeRecord(validateHeader(parseJsonExact(canonical))), canonical);
    const served = { type: "session", version: 0, id: "s1", createdAt: 0, incarnation: "5d0c1e9a7b22" };
    assert.deepEqual(validateHeader(served), served);
    assert.equal(validateHeader({ id: "s1", createdAt: 0, incarnation: "z".repeat(32) }).incarnation, "z".repeat(32));
  });

  // The messages are the Python codec's for the same headers.
  const BAD_HEADERS = [
    [{ incarnation: "AB" }, "header.incarnation: expected `str` matching regex '^[0-9a-z]{1,32}$'"],
    [{ incarnation: "" }, "header.incarnation: expected `str` matching regex '^[0-9a-z]{1,32}$'"],
    [{ incarnation: "x".repeat(33) }, "header.incarnation: expected `str` matching regex '^[0-9a-z]{1,32}$'"],
    [{ incarnation: "a-b" }, "header.incarnation: expected `str` matching regex '^[0-9a-z]{1,32}$'"],
    [{ incarnation: 5 }, "header.incarnation: expected `str`, got `int`"],
    [{ ttlMs: 1 }, "header: object contains unknown field `ttlMs`"],
    [{ expiresAt: "5" }, "header.expiresAt: expected `int`, got `str`"],
    [{ expiresAt: 1.5 }, "header.expiresAt: expected `int`, got `float`"],
    [{ owner: "me" }, "header: object contains unknown field `owner`"],
    [{ incarnation: "0af", generation: 1 }, "header: object contains unknown field `generation`"],
  ];
  for (const [fields, message] of BAD_HEADERS) {
    test(`a header is refused as Python refuses it: ${JSON.stringify(fields).slice(0, 60)}`, () => {
      assert.throws(() => validateHeader({ id: "s", createdAt: 0, ...fields }), (error) => {
        assert.ok(error instanceof EventValidationError);
        assert.equal(/** @type {Error} */ (error).message, message);
        return true;
      });
    });
  }
});

describe("SSE ids", () => {
  // As codec/incarnation.py parse_event_id reads them; tests/clients_js/test_shared_rules.py holds the two together.
  const IDS = [
    ["5d0c1e9a7b22:41", { incarnation: "5d0c1e9a7b22", seq: 41 }],
    ["0:-1", { incarnation: "0", seq: -1 }],
    ["41", { incarnation: null, seq: 41 }],
    ["-1", { incarnation: null, seq: -1 }],
    ["-0", { incarnation: null, seq: 0 }],
    [`${"z".repeat(32)}:9007199254740991`, { incarnation: "z".repeat(32), seq: 9007199254740991 }],
    ["", null],
    [":5", null],
    ["abc:", null],
    ["ABC:5", null],
    ["a:b:5", null],
    [`${"z".repeat(33)}:5`, null],
    ["a:1.5", null],
    ["a: 5", null],
    [`a:${"9".repeat(17)}`, null],
  ];
  for (const [text, parsed] of IDS) {
    test(`parseEventId(${JSON.stringify(text).slice(0, 50)})`, () => {
      assert.deepEqual(parseEventId(/** @type {string} */ (text)), parsed);
    });
  }

  test("eventId writes what parseEventId reads, and a bare seq when the incarnation is unknown", () => {
    assert.equal(eventId("5d0c1e9a7b22", 41), "5d0c1e9a7b22:41");
    assert.equal(eventId(null, 41), "41");
    assert.deepEqual(parseEventId(eventId("0af", -1)), { incarnation: "0af", seq: -1 });
  });
});

describe("pages", () => {
  const event = (/** @type {number} */ seq) => ({ event: { type: "x", seq, time: 0, data: null } });
  const row = (/** @type {number} */ seq0, /** @type {number} */ members) => ({
    chunks: { type: "text-chunks", seq0, time0: 0, data: { turn: 1, step: 1, index: 0, dt: new Array(members - 1).fill(0), texts: new Array(members).fill("t") } },
  });
  const body = (/** @type {any[]} */ records, /** @type {number} */ fromSeq, /** @type {number} */ toSeq, hasMore = fromSeq > 0) =>
    JSON.stringify({ records, hasMore, fromSeq, toSeq });

  test("a tiling page reads, and its events come after the checks", () => {
    const page = readPage(body([event(5), row(6, 3), event(9)], 5, 10), { through: 9 });
    assert.deepEqual(page.events().map((e) => e.seq), [5, 6, 7, 8, 9]);
    assert.deepEqual(page.events({ after: 7 }).map((e) => e.seq), [8, 9]);
    assert.deepEqual(readPage(body([], 0, 0), { before: 0 }).events(), []);
  });

  const broken = {
    gap: [body([event(5), event(7)], 5, 8), {}, /leaves a gap/],
    overlap: [body([event(5), row(5, 3)], 5, 8), {}, /overlaps the previous record/],
    "short of toSeq": [body([event(5)], 5, 7), {}, /records end before seq 6, but the page ends at toSeq 7/],
    "wrong hasMore": [body([event(0)], 0, 1, true), {}, /hasMore is true but fromSeq is 0/],
    inverted: [body([], 5, 4), {}, /inverted page range/],
    "not at through": [body([event(5)], 5, 6), { through: 6 }, /toSeq 6, expected 7/],
    "past before": [body([event(5)], 5, 6), { before: 5 }, /past before=5|expected/],
  };
  for (const [name, [text, cursor, message]] of Object.entries(broken)) {
    test(`rejects a page: ${name}`, () => {
      assert.throws(() => readPage(/** @type {string} */ (text), /** @type {any} */ (cursor)), (error) => error instanceof PageContinuityError && error instanceof CodecError && /** @type {RegExp} */ (message).test(error.message));
    });
  }

  const malformed = {
    "two keys": [body([{ ...event(0), ...row(1, 3) }], 0, 4), RecordFormatError, "records[0]: expected exactly one of 'event' or 'chunks'"],
    "no key": [body([{}], 0, 1), RecordFormatError, "records[0]: expected exactly one of 'event' or 'chunks'"],
    "other key": [body([{ evnt: {} }], 0, 1), RecordFormatError, "records[0]: object contains unknown field `evnt`"],
    "bad row": [body([row(0, 3), { chunks: { ...row(3, 3).chunks, seq0: -1 } }], 0, 6), RowFormatError, "records[1].chunks: malformed text-chunks row: row.seq0: expected `int` >= 0"],
    "bad event": [body([{ event: { type: "x", seq: 0, time: 0 } }], 0, 1), EventValidationError, "records[0].event: object missing required field `data`"],
    "extra body key": [JSON.stringify({ records: [], hasMore: false, fromSeq: 0, toSeq: 0, more: 1 }), RecordFormatError, "page: object contains unknown field `more`"],
    "missing toSeq": [JSON.stringify({ records: [], hasMore: false, fromSeq: 0 }), RecordFormatError, "page: object missing required field `toSeq`"],
  };
  for (const [name, [text, Kind, message]] of Object.entries(malformed)) {
    test(`rejects a record or body: ${name}`, () => {
      assert.throws(() => readPage(/** @type {string} */ (text)), (error) => error instanceof /** @type {any} */ (Kind) && error.message === message);
    });
  }

  test("text that is not JSON is an InvalidJsonError, in either mode", () => {
    assert.throws(() => readPage('{"records":['), InvalidJsonError);
    assert.throws(() => readPage('{"records":[', { exact: true }), InvalidJsonError);
  });

  test("a follow snapshot is the page at through = cursor", () => {
    const header = { type: "session", version: 0, id: "s1", createdAt: 0 };
    const frame = { header, cursor: 9, ...JSON.parse(body([event(5), row(6, 3), event(9)], 5, 10)) };
    const snapshot = decodeFollowSnapshot(frame);
    assert.equal(snapshot.cursor, 9);
    assert.deepEqual(snapshot.header, header);
    assert.deepEqual(snapshot.events().map((e) => e.seq), [5, 6, 7, 8, 9]);
    assert.throws(() => decodeFollowSnapshot({ ...frame, cursor: 10 }), PageContinuityError);
    assert.throws(() => decodeFollowSnapshot({ ...frame, header: { id: "s1" } }), EventValidationError);
    const empty = decodeFollowSnapshot({ header, cursor: -1, records: [], hasMore: false, fromSeq: 0, toSeq: 0 });
    assert.deepEqual(empty.events(), []);
  });

  test("a records frame is the page records of [fromSeq, toSeq), checked as a page is", () => {
    const frame = { records: [event(5), row(6, 3), event(9)], fromSeq: 5, toSeq: 10 };
    const live = decodeLiveRecords(frame);
    assert.deepEqual([live.fromSeq, live.toSeq], [5, 10]);
    assert.deepEqual(live.events().map((e) => e.seq), [5, 6, 7, 8, 9]);
    assert.throws(() => decodeLiveRecords({ ...frame, toSeq: 11 }), PageContinuityError);
    assert.throws(() => decodeLiveRecords({ ...frame, fromSeq: 4 }), /records\[0\] starts at seq 5, expected 4/);
    assert.throws(() => decodeLiveRecords({ records: [], fromSeq: 5, toSeq: 5 }), /empty but ends after seq 0/);
    assert.throws(() => decodeLiveRecords({ ...frame, hasMore: true }), { name: "RecordFormatError", message: "records: object contains unknown field `hasMore`" });
    assert.throws(() => decodeLiveRecords({ records: [], fromSeq: 5 }), { name: "RecordFormatError", message: "records: object missing required field `toSeq`" });
    assert.throws(() => decodeLiveRecords({ ...frame, records: [event(5), { evnt: {} }] }), RecordFormatError);
  });

  test("a live event is one valid event", () => {
    const live = { type: "turn/end", seq: 42, time: 1, data: { turn: 3 } };
    assert.deepEqual(decodeLiveEvent(live), live);
    assert.deepEqual(decodeLiveEvent({ event: live }), live);
    assert.throws(() => decodeLiveEvent({ ...live, seq: -1 }), { name: "EventValidationError", message: "live event.seq: expected `int` >= 0" });
    assert.throws(() => decodeLiveEvent(row(1, 3)), RecordFormatError);
    assert.deepEqual(expandRecords([decodeLiveRecord(row(1, 3))]).map((e) => e.seq), [1, 2, 3]);
  });
});

describe("exact JSON", () => {
  const roundTrips = {
    "1": "1",
    "-0": "0",
    "3.0": "3.0",
    "-0.0": "-0.0",
    "1e2": "100.0",
    "1E2": "100.0",
    "1.50": "1.5",
    "1e300": "1e300",
    "1e-400": "0.0",
    "0.00001": "0.00001",
    "1e-6": "1e-6",
    "1e16": "1e16",
    "1e15": "1000000000000000.0",
    "9007199254740993": "9007199254740993",
    "123456789012345678901234567890": "123456789012345678901234567890",
    "-123456789012345678901234567890.5": "-1.2345678901234568e29",
    '{"b":1,"2":2,"a":[1.0,2,{"10":0,"9":1}]}': '{"b":1,"2":2,"a":[1.0,2,{"10":0,"9":1}]}',
    '{"a":3.0,"a":3}': '{"a":3}',
    '{"a":1,"b":2,"a":3.0}': '{"a":3.0,"b":2}',
    '{"__proto__":{"x":1}}': '{"__proto__":{"x":1}}',
    '"\\ud83d\\ude00 \\u00e9\\/\\b"': '"😀 é/\\b"',
    ' [ true , false , null ] ': "[true,false,null]",
  };
  // A spelling is kept by the container that holds the number, so bare numbers go in an array.
  for (const [text, canonical] of Object.entries(roundTrips)) {
    test(`${text} is written back as ${canonical}`, () => {
      assert.equal(encodeJson(parseJsonExact(`[${text}]`)), `[${canonical}]`);
    });
  }

  test("parsed values read as plain JSON values", () => {
    const value = parseJsonExact('{"b":1,"2":2.0,"c":[3.0]}');
    assert.deepEqual(value, { b: 1, 2: 2, c: [3] });
    assert.deepEqual(Object.keys(/** @type {object} */ (value)), ["2", "b", "c"]);
  });

  test("a changed member is written from its new value", () => {
    const value = /** @type {any} */ (parseJsonExact('{"a":3.0,"b":[1.0]}'));
    value.a = 4;
    value.b[0] = 1.5;
    assert.equal(encodeJson(value), '{"a":4,"b":[1.5]}');
  });

  for (const bad of ['{"a":1,}', "[1 2]", '"\\ud800"', '"\\udc00x"', "01", "1.", "-", '"a\nb"', "1e400", "tru", "[1]x", "{'a':1}", '"\\x"']) {
    test(`rejects ${JSON.stringify(bad)}`, () => {
      assert.throws(() => parseJsonExact(bad), InvalidJsonError);
    });
  }

  test("floats are written as msgspec writes them", () => {
    const expected = [
      [1.0, "1.0"], [100.0, "100.0"], [1.5, "1.5"], [-0.0, "-0.0"], [1e300, "1e300"], [1e16, "1e16"],
      [1e15, "1000000000000000.0"], [123456789012345.6, "123456789012345.6"], [1e21, "1e21"], [1e-4, "0.0001"],
      [1e-5, "0.00001"], [1e-7, "1e-7"], [5e-324, "5e-324"], [1.7976931348623157e308, "1.7976931348623157e308"],
      [0.1, "0.1"], [1 / 3, "0.3333333333333333"], [2 ** 53, "9007199254740992.0"], [1.2345e-10, "1.2345e-10"],
      [12345678901234567890.0, "1.2345678901234567e19"], [1.5e-6, "1.5e-6"], [1.5e-5, "0.000015"],
      [1234567890123456.7, "1234567890123456.8"], [-1.5e17, "-1.5e17"], [0.00015000000000000001, "0.00015000000000000001"],
    ];
    for (const [value, text] of expected) assert.equal(formatFloat(/** @type {number} */ (value)), text);
  });
});

/**
 * Lossless chunk rows (docs/protocol.md §3): packing, strict decoding and exact expansion,
 * the twin of codec/chunk_rows.py.
 *
 * A run of at least `MIN_RUN` consecutive delta `assistant/chunk` events of one block
 * becomes one row:
 *
 *     {"type":"text-chunks","seq0":10,"time0":1700000000000,
 *      "data":{"turn":2,"step":1,"index":1,"dt":[3,0,-1],"texts":["Hel","lo",""," world"]}}
 *
 * Member k has `seq = seq0 + k` and `time = time0 + dt[0] + ... + dt[k-1]`. A tool-call
 * row carries `name` only when every member carried the same `name`. Anything that does
 * not fit a row stays a verbatim event.
 */

import { RowFormatError } from "./errors.js";
import { CHUNK_EVENT_TYPE, MAX_SAFE_INTEGER, checkInt, fail, isObject, wrongKind } from "./events.js";
import { SPELLINGS, kindAt, kindOf, withSpellings } from "./json.js";

export const MIN_RUN = 3;
export const ROW_TAGS = new Set(["text-chunks", "reasoning-chunks", "tool-call-chunks"]);

/**
 * @typedef {import("./events.js").Event} Event
 * @typedef {{turn: number, step: number, index: number, dt: number[], texts: string[]}} TextRowData
 * @typedef {{turn: number, step: number, index: number, dt: number[], id: string, name?: string, args: string[]}} ToolCallRowData
 * @typedef {{type: "text-chunks" | "reasoning-chunks", seq0: number, time0: number, data: TextRowData}} TextRow
 * @typedef {{type: "tool-call-chunks", seq0: number, time0: number, data: ToolCallRowData}} ToolCallRow
 * @typedef {TextRow | ToolCallRow} ChunkRow
 * @typedef {Event | ChunkRow} StorageRecord
 */

const DELTA_KINDS = /** @type {const} */ ({
  "text-delta": "text-chunks",
  "reasoning-delta": "reasoning-chunks",
  "tool-call-delta": "tool-call-chunks",
});

/**
 * The number of logical events a row stands for.
 * @param {ChunkRow} row
 */
export function memberCount(row) {
  return row.type === "tool-call-chunks" ? row.data.args.length : row.data.texts.length;
}

/**
 * The inclusive `[first, last]` seq range of a storage record.
 * @param {StorageRecord} record
 * @returns {[number, number]}
 */
export function recordRange(record) {
  if (ROW_TAGS.has(record.type)) {
    const row = /** @type {ChunkRow} */ (record);
    return [row.seq0, row.seq0 + memberCount(row) - 1];
  }
  const seq = /** @type {Event} */ (record).seq;
  return [seq, seq];
}

/**
 * A number at `container[key]` as a block key part: its kept spelling when it has one
 * (so `3.0` and `3` differ, §3.3 rule 5), else the number, which compares by value
 * exactly as its canonical text would.
 * @param {any} container
 * @param {string} key
 * @returns {number | string}
 */
function blockPart(container, key) {
  const value = container[key];
  const table = container[SPELLINGS];
  if (table === undefined) return value;
  const spelt = table[key];
  return spelt !== undefined && Object.is(Number(spelt), value) ? spelt : value;
}

/**
 * @typedef {{
 *   tag: "text-chunks" | "reasoning-chunks" | "tool-call-chunks",
 *   turn: number | string, step: number | string, index: number | string,
 *   id: string | undefined, name: string | undefined, hasName: boolean,
 *   piece: string, data: any, chunk: any
 * }} Member
 */

/**
 * The delta payload of `event` if it may join a row (§3.3 rule 1: exact keys, a packable
 * delta, a safe seq and time), else `null`. This is the per-event half of the run rule;
 * `continuesRun` is the other.
 * @param {any} event
 * @returns {Member | null}
 */
export function deltaMember(event) {
  if (event.type !== CHUNK_EVENT_TYPE) return null;
  let count = 0;
  for (const key in event) {
    if (key !== "type" && key !== "seq" && key !== "time" && key !== "data") return null;
    count++;
  }
  const { seq, time, data } = event;
  if (count !== 4 || !Number.isSafeInteger(seq) || seq < 0 || !Number.isSafeInteger(time)) return null;
  if (kindAt(event, "seq") !== "int" || kindAt(event, "time") !== "int") return null;
  if (!isObject(data) || !hasExactly(data, ["turn", "step", "chunk"])) return null;
  const chunk = data.chunk;
  if (typeof data.turn !== "number" || typeof data.step !== "number" || !isObject(chunk)) return null;
  const tag = DELTA_KINDS[/** @type {keyof DELTA_KINDS} */ (chunk.type)];
  if (tag === undefined || typeof chunk.index !== "number" || !Object.hasOwn(DELTA_KINDS, chunk.type)) return null;
  let piece;
  let id;
  let name;
  let hasName = false;
  if (tag === "tool-call-chunks") {
    hasName = Object.hasOwn(chunk, "name");
    const keys = hasName ? ["type", "index", "id", "name", "argumentsDelta"] : ["type", "index", "id", "argumentsDelta"];
    if (!hasExactly(chunk, keys) || typeof chunk.id !== "string" || typeof chunk.argumentsDelta !== "string") return null;
    if (hasName && typeof chunk.name !== "string") return null;
    piece = chunk.argumentsDelta;
    id = chunk.id;
    name = chunk.name;
  } else {
    if (!hasExactly(chunk, ["type", "index", "text"]) || typeof chunk.text !== "string") return null;
    piece = chunk.text;
  }
  const turn = blockPart(data, "turn");
  const step = blockPart(data, "step");
  const index = blockPart(chunk, "index");
  return { tag, turn, step, index, id, name, hasName, piece, data, chunk };
}

/**
 * @param {Record<string, unknown>} object
 * @param {string[]} keys
 */
function hasExactly(object, keys) {
  let count = 0;
  for (const key in object) {
    if (!keys.includes(key)) return false;
    count++;
  }
  return count === keys.length;
}

/**
 * Whether two members belong to one block: the same delta kind and the same canonical
 * `turn, step, index` (and `id`, and presence and value of `name`).
 * @param {Member} a
 * @param {Member} b
 */
export function sameBlock(a, b) {
  return (
    a.tag === b.tag &&
    a.turn === b.turn &&
    a.step === b.step &&
    a.index === b.index &&
    a.id === b.id &&
    a.hasName === b.hasName &&
    a.name === b.name
  );
}

/**
 * Whether a delta at `seq`/`time` may follow a run that ends at `lastSeq`/`lastTime`, once
 * both are of one block: the next seq, and a gap that is a safe integer.
 * @param {number} lastSeq
 * @param {number} lastTime
 * @param {number} seq
 * @param {number} time
 */
export function continuesRun(lastSeq, lastTime, seq, time) {
  const gap = time - lastTime;
  return seq === lastSeq + 1 && gap >= -MAX_SAFE_INTEGER && gap <= MAX_SAFE_INTEGER;
}

/**
 * Pack logical events into storage records: verbatim events and chunk rows, as
 * codec/chunk_rows.py `pack` does (§3.3). Runs are taken greedily from the first event;
 * events that do not join a row are returned as they are.
 * @param {Iterable<Event>} events
 * @returns {StorageRecord[]}
 */
export function packChunkRuns(events) {
  /** @type {StorageRecord[]} */
  const out = [];
  /** @type {Event[]} */
  let run = [];
  /** @type {Member[]} */
  let members = [];
  for (const event of events) {
    const member = deltaMember(event);
    if (member === null) {
      if (run.length) flush(run, members, out);
      run = [];
      members = [];
      out.push(event);
      continue;
    }
    if (run.length) {
      const last = run[run.length - 1];
      if (!sameBlock(members[members.length - 1], member) || !continuesRun(last.seq, last.time, event.seq, event.time)) {
        flush(run, members, out);
        run = [];
        members = [];
      }
    }
    run.push(event);
    members.push(member);
  }
  if (run.length) flush(run, members, out);
  return out;
}

/**
 * @param {Event[]} run
 * @param {Member[]} members
 * @param {StorageRecord[]} out
 */
function flush(run, members, out) {
  if (run.length < MIN_RUN) {
    for (const event of run) out.push(event);
    return;
  }
  const first = members[0];
  const dt = new Array(run.length - 1);
  for (let k = 1; k < run.length; k++) dt[k - 1] = run[k].time - run[k - 1].time;
  const pieces = members.map((member) => member.piece);
  const { turn, step } = first.data;
  const index = first.chunk.index;
  /** @type {TextRowData | ToolCallRowData} */
  let data;
  if (first.tag === "tool-call-chunks") {
    data = first.hasName
      ? { turn, step, index, dt, id: /** @type {string} */ (first.id), name: first.name, args: pieces }
      : { turn, step, index, dt, id: /** @type {string} */ (first.id), args: pieces };
  } else {
    data = { turn, step, index, dt, texts: pieces };
  }
  const spellings = rowSpellings(first);
  if (spellings !== undefined) withSpellings(data, spellings);
  out.push(/** @type {ChunkRow} */ ({ type: first.tag, seq0: run[0].seq, time0: run[0].time, data }));
}

/**
 * The spellings a row's data keeps for its members' `turn`, `step` and `index`.
 * @param {Member} member
 * @returns {Record<string, string> | undefined}
 */
function rowSpellings(member) {
  /** @type {Record<string, string> | undefined} */
  let table;
  for (const key of /** @type {const} */ (["turn", "step", "index"])) {
    const part = member[key];
    if (typeof part === "string") {
      table ??= {};
      table[key] = part;
    }
  }
  return table;
}

const TEXT_ROW_KEYS = ["turn", "step", "index", "dt", "texts"];
const TOOL_ROW_KEYS = ["turn", "step", "index", "dt", "id", "name", "args"];

/**
 * Validate a parsed JSON object whose `type` is a row tag, strictly (§3.4), and return the
 * row in canonical form; a violation raises `RowFormatError` ("malformed <tag> row: <why>").
 * @param {Record<string, any>} value
 * @returns {ChunkRow}
 */
export function rowFromValue(value) {
  const tag = value.type;
  const at = `malformed ${String(tag)} row: row`;
  if (!ROW_TAGS.has(tag)) {
    fail(RowFormatError, `${at}.type`, typeof tag === "string" ? `invalid value '${tag}'` : wrongKind("str", value, "type"));
  }
  for (const key in value) {
    if (key === "seq0") checkInt(RowFormatError, value, key, 0, MAX_SAFE_INTEGER, `${at}.seq0`);
    else if (key === "time0") checkInt(RowFormatError, value, key, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER, `${at}.time0`);
    else if (key === "data") {
      if (!isObject(value.data)) fail(RowFormatError, `${at}.data`, wrongKind("object", value, key));
    } else if (key !== "type") fail(RowFormatError, at, `object contains unknown field \`${key}\``);
  }
  for (const key of ["seq0", "time0", "data"]) {
    if (value[key] === undefined) fail(RowFormatError, at, `object missing required field \`${key}\``);
  }
  const source = value.data;
  const tool = tag === "tool-call-chunks";
  const allowed = tool ? TOOL_ROW_KEYS : TEXT_ROW_KEYS;
  let widest = 0;
  for (const key in source) {
    const where = `${at}.data.${key}`;
    if (!allowed.includes(key)) fail(RowFormatError, `${at}.data`, `object contains unknown field \`${key}\``);
    if (key === "turn" || key === "step" || key === "index") {
      if (typeof source[key] !== "number") fail(RowFormatError, where, `expected \`int | float\`, got \`${kindAt(source, key)}\``);
    } else if (key === "dt") {
      widest = checkDt(source, where);
    } else if (key === "id" || key === "name") {
      if (typeof source[key] !== "string") fail(RowFormatError, where, wrongKind("str", source, key));
    } else {
      checkMembers(source, key, where);
    }
  }
  for (const key of allowed) {
    if (key !== "name" && source[key] === undefined) fail(RowFormatError, `${at}.data`, `object missing required field \`${key}\``);
  }
  const { turn, step, index, dt } = source;
  /** @type {any} */
  let data;
  if (!tool) data = { turn, step, index, dt, texts: source.texts };
  else if (source.name === undefined) data = { turn, step, index, dt, id: source.id, args: source.args };
  else data = { turn, step, index, dt, id: source.id, name: source.name, args: source.args };
  const table = source[SPELLINGS];
  if (table !== undefined) withSpellings(data, table);
  return checkRow({ type: tag, seq0: value.seq0, time0: value.time0, data }, widest);
}

/**
 * Check `dt` entries are safe integers; return the widest `|dt[k]|`.
 * @param {Record<string, any>} source
 * @param {string} where
 */
function checkDt(source, where) {
  const dt = source.dt;
  if (!Array.isArray(dt)) return fail(RowFormatError, where, wrongKind("array", source, "dt"));
  const spelt = /** @type {any} */ (dt)[SPELLINGS] !== undefined;
  let widest = 0;
  for (let k = 0; k < dt.length; k++) {
    const gap = dt[k];
    if (!Number.isSafeInteger(gap) || spelt) {
      checkInt(RowFormatError, dt, k, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER, `${where}[${k}]`);
    }
    const size = gap < 0 ? -gap : gap;
    if (size > widest) widest = size;
  }
  return widest;
}

/**
 * @param {Record<string, any>} source
 * @param {string} key
 * @param {string} where
 */
function checkMembers(source, key, where) {
  const members = source[key];
  if (!Array.isArray(members)) return fail(RowFormatError, where, wrongKind("array", source, key));
  if (members.length === 0) fail(RowFormatError, where, "expected `array` of length >= 1");
  for (let k = 0; k < members.length; k++) {
    if (typeof members[k] !== "string") fail(RowFormatError, `${where}[${k}]`, `expected \`str\`, got \`${kindOf(members[k])}\``);
  }
}

/**
 * Check the rules a row's shape cannot express (§3.4): `dt` has exactly `members - 1`
 * entries, and the last member's seq and every running time are safe integers. `widest`
 * bounds every `|dt[k]|` (found when not given); the exact prefix scan runs only for
 * rows that could leave the range.
 * @template {ChunkRow} R
 * @param {R} row
 * @param {number} [widest]
 * @returns {R}
 */
export function checkRow(row, widest) {
  const members = memberCount(row);
  const dt = row.data.dt;
  if (widest === undefined) widest = dt.reduce((most, gap) => Math.max(most, Math.abs(gap)), 0);
  const prefix = `malformed ${row.type} row: `;
  if (members === 0) throw new RowFormatError(`${prefix}it has no members`);
  if (dt.length !== members - 1) {
    throw new RowFormatError(`${prefix}dt has ${dt.length} entries for ${members} members, expected ${members - 1}`);
  }
  if (members - 1 > MAX_SAFE_INTEGER - row.seq0) {
    throw new RowFormatError(`${prefix}member seq ${row.seq0} + ${members - 1} exceeds 2^53-1`);
  }
  // Past 2^53 a sum is inexact, but the scan stops at the first running time beyond the
  // safe range, and every time before it, and each step, is exact.
  if (dt.length && Math.abs(row.time0) + widest * dt.length > MAX_SAFE_INTEGER) {
    let time = row.time0;
    for (let k = 0; k < dt.length; k++) {
      time += dt[k];
      if (time < -MAX_SAFE_INTEGER || time > MAX_SAFE_INTEGER) {
        throw new RowFormatError(`${prefix}running time of member ${k + 1} exceeds 2^53-1`);
      }
    }
  }
  return row;
}

/**
 * The exact logical events of a row, in seq order, in canonical form (§3.2).
 * @param {ChunkRow} row
 * @returns {Event[]}
 */
export function expandRow(row) {
  return expandRowInto(row, []);
}

/**
 * Append the events of `row` to `out`; return `out`.
 * @param {ChunkRow} row
 * @param {Event[]} out
 * @returns {Event[]}
 */
function expandRowInto(row, out) {
  const data = row.data;
  const { turn, step, index, dt } = data;
  const seq0 = row.seq0;
  const start = out.length;
  let time = row.time0;
  if (row.type === "tool-call-chunks") {
    const { id, name, args } = /** @type {ToolCallRowData} */ (data);
    const named = name !== undefined;
    for (let k = 0; k < args.length; k++) {
      if (k) time += dt[k - 1];
      const chunk = named
        ? { type: "tool-call-delta", index, id, name, argumentsDelta: args[k] }
        : { type: "tool-call-delta", index, id, argumentsDelta: args[k] };
      out.push({ type: CHUNK_EVENT_TYPE, seq: seq0 + k, time, data: { turn, step, chunk } });
    }
  } else {
    const kind = row.type === "text-chunks" ? "text-delta" : "reasoning-delta";
    const texts = /** @type {TextRowData} */ (data).texts;
    for (let k = 0; k < texts.length; k++) {
      if (k) time += dt[k - 1];
      out.push({
        type: CHUNK_EVENT_TYPE,
        seq: seq0 + k,
        time,
        data: { turn, step, chunk: { type: kind, index, text: texts[k] } },
      });
    }
  }
  const table = /** @type {any} */ (data)[SPELLINGS];
  if (table !== undefined) respell(out, start, table);
  return out;
}

/**
 * Give expanded members the spellings of their row's `turn`, `step` and `index`.
 * @param {Event[]} events
 * @param {number} start the first of them to respell
 * @param {Record<string, string>} table
 */
function respell(events, start, table) {
  /** @type {Record<string, string>} */
  const outer = {};
  if (table.turn !== undefined) outer.turn = table.turn;
  if (table.step !== undefined) outer.step = table.step;
  const inner = table.index === undefined ? undefined : { index: table.index };
  const hasOuter = outer.turn !== undefined || outer.step !== undefined;
  for (let k = start; k < events.length; k++) {
    const data = events[k].data;
    if (hasOuter) withSpellings(data, outer);
    if (inner !== undefined) withSpellings(data.chunk, inner);
  }
}

/**
 * Expand storage records (events and rows) or page records (`{event}` and `{chunks}`)
 * into their logical events, in order. The records must already be validated.
 * @param {Iterable<any>} records
 * @returns {Event[]}
 */
export function expandRecords(records) {
  /** @type {Event[]} */
  const events = [];
  for (const record of records) {
    const type = record.type;
    if (type === undefined) {
      if (record.chunks !== undefined) expandRowInto(record.chunks, events);
      else events.push(record.event);
    } else if (ROW_TAGS.has(type)) {
      expandRowInto(record, events);
    } else {
      events.push(record);
    }
  }
  return events;
}

/**
 * Decode one storage record value into its logical events, as codec/chunk_rows.py
 * `decode_storage_record` does: an object whose `type` is a row tag is checked strictly
 * and expanded; any other value is not a row and decodes to itself, `[value]`.
 * @param {unknown} value
 * @returns {unknown[]}
 */
export function decodeStorageRecord(value) {
  if (isObject(value) && typeof value.type === "string" && ROW_TAGS.has(value.type)) {
    return expandRow(rowFromValue(value));
  }
  return [value];
}

/**
 * The page and follow wire formats (docs/protocol.md §4-§5), decoded strictly, the twin of
 * codec/pages.py and history_client/pages.py.
 *
 * A page record is `{"event": Event}` or `{"chunks": ChunkRow}`: exactly one key. A page
 * body `{records, hasMore, fromSeq, toSeq}` covers `[fromSeq, toSeq)`, and a page is
 * checked whole (every record valid, the records tiling the interval, the page ending at
 * the requested cursor) before any of its events is returned.
 */

import { InvalidJsonError, PageContinuityError, RecordFormatError, RowFormatError } from "./errors.js";
import { MAX_SAFE_INTEGER, checkInt, fail, isObject, validateEvent, validateHeader, wrongKind } from "./events.js";
import { ROW_TAGS, expandRecords, expandRow, memberCount, rowFromValue } from "./chunk-rows.js";
import { kindOf, parseJsonExact } from "./json.js";

/**
 * @typedef {import("./events.js").Event} Event
 * @typedef {import("./events.js").SessionHeader} SessionHeader
 * @typedef {import("./chunk-rows.js").ChunkRow} ChunkRow
 * @typedef {{event: Event, chunks?: undefined} | {chunks: ChunkRow, event?: undefined}} PageRecord
 * @typedef {{records: PageRecord[], hasMore: boolean, fromSeq: number, toSeq: number}} Page
 * @typedef {{through?: number | null, before?: number | null}} Cursor
 * @typedef {Page & {events: (options?: {after?: number}) => Event[]}} ReadPage
 * @typedef {ReadPage & {header: SessionHeader, cursor: number}} FollowSnapshot
 * @typedef {{records: PageRecord[], fromSeq: number, toSeq: number, events: (options?: {after?: number}) => Event[]}} LiveRecords
 */

const PAGE_KEYS = ["records", "hasMore", "fromSeq", "toSeq"];
const SNAPSHOT_KEYS = ["header", "cursor", ...PAGE_KEYS];
const LIVE_RECORDS_KEYS = ["records", "fromSeq", "toSeq"];

/**
 * Decode and validate one page record: exactly one key, `event` (a valid event) or
 * `chunks` (a valid row). Returns it in canonical form.
 * @param {unknown} record
 * @param {number} [index]
 * @returns {PageRecord}
 */
export function decodePageRecord(record, index = 0) {
  if (!isObject(record)) return fail(RecordFormatError, `records[${index}]`, `expected \`object\`, got \`${kindOf(record)}\``);
  let event;
  let chunks;
  let count = 0;
  for (const key in record) {
    if (key === "event") event = record.event;
    else if (key === "chunks") chunks = record.chunks;
    else fail(RecordFormatError, `records[${index}]`, `object contains unknown field \`${key}\``);
    count++;
  }
  if (count !== 1 || (event === undefined) === (chunks === undefined)) {
    fail(RecordFormatError, `records[${index}]`, "expected exactly one of 'event' or 'chunks'");
  }
  if (chunks === undefined) {
    const canonical = validateEvent(event, `records[${index}].event`);
    return canonical === event ? /** @type {PageRecord} */ (record) : { event: canonical };
  }
  if (!isObject(chunks)) fail(RecordFormatError, `records[${index}].chunks`, wrongKind("object", record, "chunks"));
  try {
    return { chunks: rowFromValue(chunks) };
  } catch (error) {
    if (error instanceof RowFormatError) throw new RowFormatError(`records[${index}].chunks: ${error.message}`);
    throw error;
  }
}

/**
 * Decode and validate a parsed `session.page` body (§4.2): exactly the keys `records,
 * hasMore, fromSeq, toSeq`, and every record valid. Coverage is `checkPage`'s.
 * @param {unknown} body
 * @param {string} [where]
 * @returns {Page}
 */
export function decodePage(body, where = "page") {
  return decodeFrame(body, PAGE_KEYS, where);
}

/**
 * @param {unknown} body
 * @param {string[]} keys the frame's keys; `hasMore` is checked only where it is one
 * @param {string} where
 * @returns {Page & Record<string, any>}
 */
function decodeFrame(body, keys, where) {
  if (!isObject(body)) return fail(RecordFormatError, where, `expected \`object\`, got \`${kindOf(body)}\``);
  for (const key in body) {
    if (!keys.includes(key)) fail(RecordFormatError, where, `object contains unknown field \`${key}\``);
  }
  for (const key of keys) {
    if (body[key] === undefined) fail(RecordFormatError, where, `object missing required field \`${key}\``);
  }
  const source = body.records;
  if (!Array.isArray(source)) return fail(RecordFormatError, `${where}.records`, wrongKind("array", body, "records"));
  if (keys.includes("hasMore") && typeof body.hasMore !== "boolean") fail(RecordFormatError, `${where}.hasMore`, wrongKind("bool", body, "hasMore"));
  const fromSeq = checkInt(RecordFormatError, body, "fromSeq", 0, MAX_SAFE_INTEGER, `${where}.fromSeq`);
  const toSeq = checkInt(RecordFormatError, body, "toSeq", 0, MAX_SAFE_INTEGER, `${where}.toSeq`);
  const records = new Array(source.length);
  for (let i = 0; i < source.length; i++) records[i] = decodePageRecord(source[i], i);
  return { records, hasMore: body.hasMore, fromSeq, toSeq };
}

/**
 * The `toSeq` a page request pins, or `null` when it depends on the head (§4.2).
 * @param {Cursor} [cursor]
 * @returns {number | null}
 */
export function expectedToSeq({ through = null, before = null } = {}) {
  if (through === null) return null;
  return before === null ? through + 1 : Math.min(through + 1, before);
}

/**
 * The inclusive `[first, last]` seq range of a decoded page record.
 * @param {PageRecord} record
 * @returns {[number, number]}
 */
export function recordSeqRange(record) {
  const row = record.chunks;
  if (row === undefined) return [record.event.seq, record.event.seq];
  return [row.seq0, row.seq0 + memberCount(row) - 1];
}

/**
 * Check that a decoded page's records tile `[fromSeq, toSeq)` with no gap or overlap,
 * that `hasMore == (fromSeq > 0)`, that only a page ending at seq 0 is empty, and that
 * the page ends where the request pins it:
 * `toSeq == min(through + 1, before)` when `through` was given, and never past `before`.
 * Raises `PageContinuityError` naming the first record at fault; returns the page.
 * @template {Page} P
 * @param {P} page
 * @param {Cursor} [cursor]
 * @returns {P}
 */
export function checkPage(page, cursor = {}) {
  const { fromSeq, toSeq, hasMore } = page;
  if (fromSeq > toSeq) throw new PageContinuityError(`inverted page range: fromSeq ${fromSeq} > toSeq ${toSeq}`);
  // Only a page ending at seq 0 may be empty (§4.2); a reader paging backwards from an
  // empty page further on would ask for the same page forever.
  if (fromSeq === toSeq && toSeq > 0) {
    throw new PageContinuityError(`page [${fromSeq}, ${toSeq}) is empty but ends after seq 0`);
  }
  const expected = expectedToSeq(cursor);
  if (expected !== null && toSeq !== expected) {
    throw new PageContinuityError(`page did not end at its requested cursor: toSeq ${toSeq}, expected ${expected}`);
  }
  const before = cursor.before ?? null;
  if (before !== null && toSeq > before) throw new PageContinuityError(`page ends at toSeq ${toSeq}, past before=${before}`);
  if (hasMore !== fromSeq > 0) throw new PageContinuityError(`hasMore is ${hasMore} but fromSeq is ${fromSeq}`);
  let next = fromSeq;
  const records = page.records;
  for (let i = 0; i < records.length; i++) {
    const [first, last] = recordSeqRange(records[i]);
    if (first > last) throw new PageContinuityError(`records[${i}] has an inverted cursor range: ${first} > ${last}`);
    if (first !== next) {
      const kind = first < next ? "overlaps the previous record" : "leaves a gap";
      throw new PageContinuityError(
        `page contains discontinuous entries: records[${i}] starts at seq ${first}, expected ${next}: it ${kind}`,
      );
    }
    next = last + 1;
  }
  if (next !== toSeq) {
    throw new PageContinuityError(
      `page did not end at its cursor: records end before seq ${next}, but the page ends at toSeq ${toSeq}`,
    );
  }
  return page;
}

/**
 * Parse JSON text: `JSON.parse`, or `parseJsonExact` to keep number spellings and key order.
 * @param {string} text
 * @param {string} where
 * @param {boolean} exact
 */
function parse(text, where, exact) {
  if (exact) {
    try {
      return parseJsonExact(text);
    } catch (error) {
      if (error instanceof InvalidJsonError) throw new InvalidJsonError(`${where}: ${error.message}`);
      throw error;
    }
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new InvalidJsonError(`${where}: invalid JSON: ${/** @type {Error} */ (error).message}`, { cause: error });
  }
}

/**
 * The exact events of validated page records with seq > `after`, in order.
 * @param {PageRecord[]} records
 * @param {number} after
 * @returns {Event[]}
 */
export function pageEvents(records, after = -1) {
  if (after < 0) return expandRecords(records);
  /** @type {Event[]} */
  const out = [];
  for (const record of records) {
    const [first, last] = recordSeqRange(record);
    if (last <= after) continue;
    if (record.chunks === undefined) out.push(record.event);
    else {
      const events = expandRow(record.chunks);
      for (let k = first > after ? 0 : after - first + 1; k < events.length; k++) out.push(events[k]);
    }
  }
  return out;
}

/**
 * Yield the exact events of validated page records with seq > `after`, expanding one row
 * at a time, so the page never exists as one array of events.
 * @param {PageRecord[]} records
 * @param {number} [after]
 * @returns {Generator<Event, void, undefined>}
 */
export function* iterPageEvents(records, after = -1) {
  for (const record of records) {
    if (record.chunks === undefined) {
      if (record.event.seq > after) yield record.event;
      continue;
    }
    const [first, last] = recordSeqRange(record);
    if (last <= after) continue;
    const events = expandRow(record.chunks);
    for (let k = first > after ? 0 : after - first + 1; k < events.length; k++) yield events[k];
  }
}

/**
 * @template {{records: PageRecord[]}} P
 * @param {P} page
 * @returns {P & {events: (options?: {after?: number}) => Event[]}}
 */
function withEvents(page) {
  const records = page.records;
  return Object.assign(page, { events: ({ after = -1 } = {}) => pageEvents(records, after) });
}

/**
 * Decode, validate and check a `session.page` body (§4.2); the request's cursor pins `toSeq`.
 *
 * Nothing is returned until the whole page has passed: every record is valid and the
 * records tile `[fromSeq, toSeq)`. `events()` then expands them exactly (events with
 * seq > `after` when given); `iterPageEvents(page.records)` streams them a row at a time. With `exact`, numbers keep their spellings (`parseJsonExact`);
 * otherwise the body goes through `JSON.parse`.
 * @param {string} body
 * @param {Cursor & {exact?: boolean}} [options]
 * @returns {ReadPage}
 */
export function readPage(body, { through = null, before = null, exact = false } = {}) {
  const page = decodePage(parse(body, "page", exact));
  return withEvents(checkPage(page, { through, before }));
}

/**
 * Decode a follow `snapshot` frame's data (§5.1): the session header, the cursor (the
 * last seq, or -1) and the tail page at `through = cursor`, validated and checked as
 * `readPage` does. Takes the parsed `data:` value.
 * @param {unknown} frame
 * @returns {FollowSnapshot}
 */
export function decodeFollowSnapshot(frame) {
  const body = decodeFrame(frame, SNAPSHOT_KEYS, "snapshot");
  const source = /** @type {Record<string, any>} */ (frame);
  const cursor = checkInt(RecordFormatError, source, "cursor", -1, MAX_SAFE_INTEGER, "snapshot.cursor");
  const header = validateHeader(source.header, "snapshot.header");
  const page = checkPage({ header, cursor, ...body }, { through: cursor });
  return withEvents(page);
}

/**
 * Decode a packed follow stream's `records` frame data (§5.5), the twin of codec/pages.py
 * `decode_live_records`: exactly the keys `records, fromSeq, toSeq`, every record valid, and
 * the records tiling `[fromSeq, toSeq)` as a page's do (`checkPage`, with `hasMore` as
 * `fromSeq > 0`), all before any event is returned. Takes the parsed `data:` value.
 * @param {unknown} frame
 * @returns {LiveRecords}
 */
export function decodeLiveRecords(frame) {
  const { records, fromSeq, toSeq } = decodeFrame(frame, LIVE_RECORDS_KEYS, "records");
  checkPage({ records, hasMore: fromSeq > 0, fromSeq, toSeq }, { through: toSeq - 1 });
  return withEvents({ records, fromSeq, toSeq });
}

/**
 * Decode a follow `event` frame's data (§5.1): one logical event, unpacked. A
 * `{"event": …}` wrapper is tolerated, as it is lossless.
 * @param {unknown} frame
 * @returns {Event}
 */
export function decodeLiveEvent(frame) {
  if (isObject(frame) && frame.type === undefined && (frame.event !== undefined || frame.chunks !== undefined)) {
    const record = decodePageRecord(frame);
    if (record.event === undefined) fail(RecordFormatError, "live event", "a chunk row where one logical event was expected");
    return record.event;
  }
  return validateEvent(frame, "live event");
}

/**
 * Decode a live record as codec/pages.py `decode_live_record` does: a bare event, or (tolerated)
 * a wrapped page record, `{"event"}` or `{"chunks"}`.
 * @param {unknown} frame
 * @returns {PageRecord}
 */
export function decodeLiveRecord(frame) {
  if (isObject(frame) && frame.type === undefined && (frame.event !== undefined || frame.chunks !== undefined)) {
    return decodePageRecord(frame);
  }
  return { event: validateEvent(frame, "live event") };
}

/**
 * Decode one storage line (JSON text) as codec/stored.py `decode_storage_line` does: a
 * chunk row, checked strictly, or a logical event. Numbers keep their spellings.
 * @param {string} line
 * @param {string} [where]
 * @returns {import("./chunk-rows.js").StorageRecord}
 */
export function decodeStorageLine(line, where = "record") {
  const value = parse(line, where, true);
  if (!isObject(value)) return fail(RecordFormatError, where, `not a JSON object: expected \`object\`, got \`${kindOf(value)}\``);
  const tag = value.type;
  if (typeof tag === "string" && ROW_TAGS.has(tag)) return rowFromValue(value);
  if (tag === "session") fail(RecordFormatError, where, "a session header where a storage record was expected");
  return validateEvent(value, where);
}

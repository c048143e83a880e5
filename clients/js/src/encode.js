/**
 * Records in the service's canonical bytes (docs/protocol.md §1.2): what codec/event_json.py
 * `encode` writes for an event, a chunk row, a session header or a page record.
 */

import { ROW_TAGS } from "./chunk-rows.js";
import { HEADER_FIELDS } from "./events.js";
import { encodeJson, spellNumber } from "./json.js";

const EVENT_KEYS = ["type", "seq", "time", "data", "ignorable", "sourceEventSeqs", "surfaceOp", "conversationOp"];
const ROW_DATA_KEYS = ["turn", "step", "index", "dt", "texts", "id", "name", "args"];

/**
 * Encode a storage record, page record or session header as compact canonical JSON: the
 * envelope keys in the order of §2.1, §2.3 or §3.1 whatever order the object has, replace
 * ops as `{op, start, end}`, and everything inside `data` and `meta` by `encodeJson`.
 * @param {any} record
 * @returns {string}
 */
export function encodeRecord(record) {
  const type = record.type;
  if (type === undefined) {
    if (record.chunks !== undefined) return `{"chunks":${encodeRecord(record.chunks)}}`;
    if (record.event !== undefined) return `{"event":${encodeRecord(record.event)}}`;
    return encodeJson(record);
  }
  if (ROW_TAGS.has(type)) {
    const data = record.data;
    let inner = "";
    for (const key of ROW_DATA_KEYS) {
      const value = data[key];
      if (value === undefined) continue;
      const text = typeof value === "number" ? spellNumber(data, key, value) : encodeJson(value);
      inner += `${inner ? "," : ""}"${key}":${text}`;
    }
    return `{"type":${JSON.stringify(type)},"seq0":${record.seq0},"time0":${record.time0},"data":{${inner}}}`;
  }
  return encodeFields(record, type === "session" ? HEADER_FIELDS : EVENT_KEYS);
}

/**
 * @param {Record<string, any>} record
 * @param {string[]} keys
 */
function encodeFields(record, keys) {
  let out = "";
  for (const key of keys) {
    let value = record[key];
    if (value === undefined) continue;
    if ((key === "surfaceOp" || key === "conversationOp") && typeof value === "object" && value !== null) {
      value = { op: "replace", start: value.start, end: value.end };
    }
    const text = typeof value === "number" ? spellNumber(record, key, value) : encodeJson(value);
    out += `${out ? "," : ""}"${key}":${text}`;
  }
  return `{${out}}`;
}

/**
 * Encode records as JSON lines, each ending in a newline, as `encode_lines` does.
 * @param {Iterable<any>} records
 * @returns {string}
 */
export function encodeLines(records) {
  let out = "";
  for (const record of records) out += `${encodeRecord(record)}\n`;
  return out;
}

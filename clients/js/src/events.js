/**
 * The logical event, the session header and session ids (docs/protocol.md §2), strictly.
 *
 * Validators take parsed JSON values and return them in canonical form: the envelope keys
 * in the order of §2.1 (or of the header's fields), a replace op as `{op, start, end}`;
 * `data` and `meta` are kept as they are. Messages say where and why in the words of
 * codec/event_json.py, e.g. `events[3].surfaceOp: expected "append" or {op,start,end} (...)`.
 */

import { EventValidationError, SessionIdError } from "./errors.js";
import { INCARNATION_PATTERN, isIncarnation } from "./incarnation.js";
import { kindAt, kindOf, spellingAt } from "./json.js";

export const MAX_SAFE_INTEGER = Number.MAX_SAFE_INTEGER;
export const CHUNK_EVENT_TYPE = "assistant/chunk";
export const RESERVED_TYPES = new Set(["session", "text-chunks", "reasoning-chunks", "tool-call-chunks"]);
export const MAX_SESSION_ID = 200;
export const MAX_DEPTH = 64;
const MAX_TYPE_LENGTH = 128;
const MAX_HEADER_ID = 256;
const SESSION_ID = /^[A-Za-z0-9._:@~{}-]{1,200}$/;

/**
 * @typedef {{op: "replace", start: number, end: number}} ReplaceOp
 * @typedef {{
 *   type: string, seq: number, time: number, data: any,
 *   ignorable?: true, sourceEventSeqs?: number[], surfaceOp?: "append" | ReplaceOp, conversationOp?: ReplaceOp
 * }} Event
 * @typedef {{
 *   type: "session", version: 0, id: string, createdAt: number, cwd?: string, parentSession?: string,
 *   seedLength?: number, origin?: string, delegationDepth?: number, agentPreset?: string, meta?: Record<string, any>,
 *   expiresAt?: number, closedAt?: number, incarnation?: string
 * }} SessionHeader
 */

const OP_REASONS = {
  surfaceOp: 'expected "append" or {op,start,end}',
  conversationOp: 'expected {op:"replace",start,end}',
};

/**
 * Fail with the error class `Kind` at `where`.
 * @param {new (message: string) => Error} Kind
 * @param {string} where
 * @param {string} why
 * @returns {never}
 */
export function fail(Kind, where, why) {
  throw new Kind(`${where}: ${why}`);
}

/**
 * The msgspec message for a value of the wrong JSON kind.
 * @param {string} expected
 * @param {any} container
 * @param {string | number} key
 */
export function wrongKind(expected, container, key) {
  return `expected \`${expected}\`, got \`${kindName(container, key)}\``;
}

const INT64_MIN = -(2n ** 63n);
const UINT64_MAX = 2n ** 64n - 1n;

/**
 * The kind msgspec names in a "got" message: an integer outside the 64-bit range is `float`.
 * @param {any} container
 * @param {string | number} key
 */
function kindName(container, key) {
  const kind = kindAt(container, key);
  if (kind !== "int") return kind;
  const value = container[key];
  if (typeof value === "bigint") return value < INT64_MIN || value > UINT64_MAX ? "float" : kind;
  const spelt = spellingAt(container, key);
  const exact = spelt !== undefined ? BigInt(spelt) : Number.isSafeInteger(value) ? null : BigInt(value);
  return exact !== null && (exact < INT64_MIN || exact > UINT64_MAX) ? "float" : kind;
}

/**
 * Check that `container[key]` is an integer in [min, max], as msgspec checks `int` fields.
 * A float spelling (`4.0` read by `parseJsonExact`) is not an integer.
 * @param {new (message: string) => Error} Kind
 * @param {any} container
 * @param {string | number} key
 * @param {number} min
 * @param {number} max
 * @param {string} where
 * @returns {number}
 */
export function checkInt(Kind, container, key, min, max, where) {
  const value = container[key];
  if (typeof value !== "number" || !Number.isInteger(value) || kindAt(container, key) !== "int") {
    fail(Kind, where, wrongKind("int", container, key));
  }
  if (value < min) fail(Kind, where, `expected \`int\` >= ${min}`);
  if (value > max) fail(Kind, where, `expected \`int\` <= ${max}`);
  return value;
}

/**
 * @param {unknown} value
 * @returns {value is Record<string, any>}
 */
export function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The number of code points of `text`, as Python counts a `str`'s length.
 * @param {string} text
 */
function codePoints(text) {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0xd800 || c > 0xdbff || i + 1 >= text.length) count++;
    else {
      const d = text.charCodeAt(i + 1);
      count++;
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
  }
  return count;
}

/**
 * @param {new (message: string) => Error} Kind
 * @param {any} container
 * @param {string} key
 * @param {number} min
 * @param {number} max
 * @param {string} where
 * @returns {string}
 */
function checkString(Kind, container, key, min, max, where) {
  const value = container[key];
  if (typeof value !== "string") fail(Kind, where, wrongKind("str", container, key));
  const length = value.length > max ? codePoints(value) : value.length;
  if (length < min) fail(Kind, where, `expected \`str\` of length >= ${min}`);
  if (length > max) fail(Kind, where, `expected \`str\` of length <= ${max}`);
  return value;
}

/**
 * Check that `value` nests arrays and objects at most `limit` levels deep (§2.1).
 * A scalar has depth 0 and a container one more than its deepest member.
 * @param {unknown} value
 * @param {string} where
 * @param {number} [limit]
 */
export function checkDepth(value, where, limit = MAX_DEPTH) {
  if (typeof value === "object" && value !== null && !fits(value, limit - 1)) {
    fail(EventValidationError, where, `nests deeper than ${limit} levels of arrays and objects`);
  }
}

/**
 * Whether every member of `container` nests at most `room` more levels.
 * @param {object} container
 * @param {number} room
 * @returns {boolean}
 */
function fits(container, room) {
  if (Array.isArray(container)) {
    for (let i = 0; i < container.length; i++) {
      const member = container[i];
      if (typeof member === "object" && member !== null && (room === 0 || !fits(member, room - 1))) return false;
    }
    return true;
  }
  for (const key in container) {
    const member = /** @type {any} */ (container)[key];
    if (typeof member === "object" && member !== null && (room === 0 || !fits(member, room - 1))) return false;
  }
  return true;
}

/**
 * Validate a parsed JSON value as one event (§2.1) and return it in canonical form.
 *
 * The result is `value` itself when it already is canonical (keys in order, replace ops as
 * `{op, start, end}`), else a new object sharing `data`. Raises `EventValidationError`.
 * @param {unknown} value
 * @param {string} [where]
 * @returns {Event}
 */
export function validateEvent(value, where = "event") {
  if (!isObject(value)) return fail(EventValidationError, where, `expected \`object\`, got \`${kindOf(value)}\``);
  let rank = 0;
  let canonical = true;
  let count = 0;
  for (const key in value) {
    let at;
    switch (key) {
      case "type":
        at = 0;
        checkString(EventValidationError, value, key, 1, MAX_TYPE_LENGTH, `${where}.type`);
        break;
      case "seq":
        at = 1;
        checkInt(EventValidationError, value, key, 0, MAX_SAFE_INTEGER, `${where}.seq`);
        break;
      case "time":
        at = 2;
        checkInt(EventValidationError, value, key, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER, `${where}.time`);
        break;
      case "data":
        at = 3;
        break;
      case "ignorable":
        at = 4;
        if (value.ignorable !== true) {
          const why = typeof value.ignorable === "boolean" ? "invalid enum value False" : wrongKind("bool", value, key);
          fail(EventValidationError, `${where}.ignorable`, why);
        }
        break;
      case "sourceEventSeqs":
        at = 5;
        checkSeqs(value.sourceEventSeqs, `${where}.sourceEventSeqs`, value);
        break;
      case "surfaceOp":
        at = 6;
        if (value.surfaceOp !== "append") canonical = checkOp(value, key, where) && canonical;
        break;
      case "conversationOp":
        at = 7;
        canonical = checkOp(value, key, where) && canonical;
        break;
      default:
        return fail(EventValidationError, where, `object contains unknown field \`${key}\``);
    }
    if (at < rank) canonical = false;
    rank = at;
    count++;
  }
  for (const key of ["type", "seq", "time", "data"]) {
    if (value[key] === undefined) fail(EventValidationError, where, `object missing required field \`${key}\``);
  }
  if (RESERVED_TYPES.has(value.type)) {
    fail(EventValidationError, `${where}.type`, `'${value.type}' is reserved for storage lines`);
  }
  const data = value.data;
  if (typeof data === "object" && data !== null) checkDepth(data, `${where}.data`);
  if (canonical && count === Object.keys(value).length) return /** @type {Event} */ (value);
  return canonicalEvent(value);
}

/**
 * @param {Record<string, any>} value
 * @returns {Event}
 */
function canonicalEvent(value) {
  /** @type {Event} */
  const event = { type: value.type, seq: value.seq, time: value.time, data: value.data };
  if (value.ignorable !== undefined) event.ignorable = true;
  if (value.sourceEventSeqs !== undefined) event.sourceEventSeqs = value.sourceEventSeqs;
  if (value.surfaceOp !== undefined) event.surfaceOp = value.surfaceOp === "append" ? "append" : replaceOp(value.surfaceOp);
  if (value.conversationOp !== undefined) event.conversationOp = replaceOp(value.conversationOp);
  return event;
}

/**
 * @param {any} op
 * @returns {ReplaceOp}
 */
function replaceOp(op) {
  return { op: "replace", start: op.start, end: op.end };
}

/**
 * @param {unknown} seqs
 * @param {string} where
 * @param {Record<string, any>} container
 */
function checkSeqs(seqs, where, container) {
  if (!Array.isArray(seqs)) return fail(EventValidationError, where, wrongKind("array", container, "sourceEventSeqs"));
  for (let i = 0; i < seqs.length; i++) checkInt(EventValidationError, seqs, i, 0, MAX_SAFE_INTEGER, `${where}[${i}]`);
}

/**
 * Check a replace op at `value[key]`; return whether it already is `{op, start, end}` in order.
 * @param {Record<string, any>} value
 * @param {"surfaceOp" | "conversationOp"} key
 * @param {string} where
 * @returns {boolean}
 */
function checkOp(value, key, where) {
  const op = value[key];
  const at = `${where}.${key}`;
  /** @param {string} why @returns {never} */
  const bad = (why) => fail(EventValidationError, at, `${OP_REASONS[key]} (${why})`);
  if (!isObject(op)) {
    if (key === "surfaceOp") {
      if (typeof op === "string") bad(`invalid enum value '${op}'`);
      bad(`expected \`str | object\`, got \`${kindName(value, key)}\``);
    }
    bad(wrongKind("object", value, key));
  }
  const keys = Object.keys(op);
  for (const name of keys) {
    if (name === "op") {
      if (op.op !== "replace") bad(typeof op.op === "string" ? `invalid value '${op.op}'` : "expected `str`");
    } else if (name === "start" || name === "end") {
      try {
        checkInt(EventValidationError, op, name, 0, MAX_SAFE_INTEGER, name);
      } catch (error) {
        bad(/** @type {Error} */ (error).message.slice(name.length + 2));
      }
    } else {
      bad(`object contains unknown field \`${name}\``);
    }
  }
  for (const name of ["op", "start", "end"]) if (op[name] === undefined) bad(`object missing required field \`${name}\``);
  if (op.end < op.start) bad(`end ${op.end} is before start ${op.start}`);
  return keys.length === 3 && keys[0] === "op" && keys[1] === "start" && keys[2] === "end";
}

/**
 * Return `value` if it is a valid session id (§2.4), else raise `SessionIdError`.
 *
 * An id is 1 to 200 characters, each an ASCII letter or digit or one of `. _ : @ ~ { } -`,
 * and is neither `.` nor `..`.
 * @param {unknown} value
 * @param {string} [where]
 * @returns {string}
 */
export function checkSessionId(value, where = "session id") {
  if (typeof value !== "string" || !SESSION_ID.test(value) || value === "." || value === "..") {
    const shown = typeof value === "string" ? `'${value.slice(0, 40)}'` : String(value);
    throw new SessionIdError(
      `${where} ${shown} is not a session id: use 1-${MAX_SESSION_ID} of A-Z a-z 0-9 . _ : @ ~ { } -, not '.' or '..'`,
    );
  }
  return value;
}

/** A session header's keys, in canonical order (§2.3). */
export const HEADER_FIELDS = [
  "type",
  "version",
  "id",
  "createdAt",
  "cwd",
  "parentSession",
  "seedLength",
  "origin",
  "delegationDepth",
  "agentPreset",
  "meta",
  "expiresAt",
  "closedAt",
  "incarnation",
];

/**
 * Validate a parsed session header (§2.3) and return it in canonical form, with `type`
 * and `version` filled in. Raises `EventValidationError`.
 * @param {unknown} value
 * @param {string} [where]
 * @returns {SessionHeader}
 */
export function validateHeader(value, where = "header") {
  if (!isObject(value)) return fail(EventValidationError, where, `expected \`object\`, got \`${kindOf(value)}\``);
  for (const key of Object.keys(value)) {
    const at = `${where}.${key}`;
    switch (key) {
      case "type":
        if (value.type !== "session") {
          fail(EventValidationError, at, typeof value.type === "string" ? `invalid value '${value.type}'` : wrongKind("str", value, key));
        }
        break;
      case "version":
        if (value.version !== 0 || kindAt(value, key) !== "int") {
          fail(EventValidationError, at, typeof value.version === "number" ? `invalid enum value ${spellingAt(value, key) ?? value.version}` : wrongKind("int", value, key));
        }
        break;
      case "id":
      case "parentSession":
        checkString(EventValidationError, value, key, 1, MAX_HEADER_ID, at);
        break;
      case "createdAt":
      case "expiresAt":
      case "closedAt":
        checkInt(EventValidationError, value, key, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER, at);
        break;
      case "incarnation":
        if (typeof value.incarnation !== "string") fail(EventValidationError, at, wrongKind("str", value, key));
        if (!isIncarnation(value.incarnation)) fail(EventValidationError, at, `expected \`str\` matching regex '${INCARNATION_PATTERN}'`);
        break;
      case "seedLength":
      case "delegationDepth":
        checkInt(EventValidationError, value, key, 0, MAX_SAFE_INTEGER, at);
        break;
      case "cwd":
      case "origin":
      case "agentPreset":
        if (typeof value[key] !== "string") fail(EventValidationError, at, wrongKind("str", value, key));
        break;
      case "meta":
        if (!isObject(value.meta)) fail(EventValidationError, at, wrongKind("object", value, key));
        break;
      default:
        fail(EventValidationError, where, `object contains unknown field \`${key}\``);
    }
  }
  for (const key of ["id", "createdAt"]) {
    if (value[key] === undefined) fail(EventValidationError, where, `object missing required field \`${key}\``);
  }
  if (value.meta !== undefined) checkDepth(value.meta, `${where}.meta`);
  /** @type {Record<string, any>} */
  const header = { type: "session", version: 0 };
  for (const key of HEADER_FIELDS.slice(2)) if (value[key] !== undefined) header[key] = value[key];
  return /** @type {SessionHeader} */ (header);
}

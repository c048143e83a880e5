/**
 * JSON text in the service's canonical encoding (docs/protocol.md §1.2), value for value.
 *
 * The service compares and writes JSON values, not JavaScript numbers: `3` is an integer
 * and `3.0` a float, and a chunk row keeps each spelling (§3.3 rule 5). `JSON.parse`
 * merges them, so `parseJsonExact` keeps what it would lose on the containers that hold
 * it, out of sight of ordinary code:
 *
 * - `SPELLINGS`: per object or array, the canonical text of each member number whose
 *   canonical text is not the one `formatNumber` gives its JavaScript value: floats with
 *   an integral value (`3.0`, `-0.0`, `1e300`) and integers beyond 2^53.
 * - `KEY_ORDER`: per object that has integer-like keys ("2"), its keys in received
 *   order, since JavaScript objects list those keys first.
 *
 * Both are non-enumerable symbol properties: the values read, compare and copy as plain
 * JSON values, and `encodeJson` uses the side tables only while they still describe the
 * value (a changed member is encoded from its new value).
 */

import { InvalidJsonError } from "./errors.js";

/** Symbol of the per-container table of number spellings (see the module comment). */
export const SPELLINGS = Symbol("history-transport.spellings");
/** Symbol of the per-object received key order, kept when the object has integer-like keys. */
export const KEY_ORDER = Symbol("history-transport.keyOrder");

/** @typedef {Record<string, string>} SpellingTable */

/**
 * The canonical spelling of a float, as msgspec writes it: the shortest round-trip
 * digits, positional for decimal exponents -5 to 15 (with `.0` when integral), else
 * `<digits>e<exp>` with no `+` and no padding.
 * @param {number} x
 * @returns {string}
 */
export function formatFloat(x) {
  if (!Number.isFinite(x)) return "null";
  const abs = Math.abs(x);
  if (abs >= 1e-5 && abs < 1e16) return Number.isInteger(x) ? `${x}.0` : `${x}`;
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const text = x.toExponential();
  const at = text.indexOf("e");
  const exponent = Number(text.slice(at + 1));
  let mantissa = text.slice(0, at);
  let sign = "";
  if (mantissa[0] === "-") {
    sign = "-";
    mantissa = mantissa.slice(1);
  }
  const digits = mantissa.length > 1 ? mantissa[0] + mantissa.slice(2) : mantissa;
  // Only exponents below -5 or from 16 on get here: the range test above took the rest.
  return `${sign}${digits.length === 1 ? digits : `${digits[0]}.${digits.slice(1)}`}e${exponent}`;
}

/**
 * The canonical text of a JavaScript number: an integral value is an integer (exact
 * digits beyond 2^53), any other a float; NaN and infinities are `null`, as msgspec writes them.
 * @param {number} value
 * @returns {string}
 */
export function formatNumber(value) {
  if (Number.isSafeInteger(value)) return `${value}`;
  if (Number.isInteger(value)) return BigInt(value).toString();
  return formatFloat(value);
}

/**
 * The canonical text of the number `container[key]`: its kept spelling while that still
 * names the same value, else `formatNumber`.
 * @param {object} container
 * @param {string | number} key
 * @param {number} value
 * @returns {string}
 */
export function spellNumber(container, key, value) {
  const table = /** @type {SpellingTable | undefined} */ (/** @type {any} */ (container)[SPELLINGS]);
  if (table !== undefined) {
    const spelt = table[key];
    if (spelt !== undefined && Object.is(Number(spelt), value)) return spelt;
  }
  return formatNumber(value);
}

/**
 * The JSON kind of `container[key]`, as msgspec names it in messages: `int`, `float`,
 * `str`, `bool`, `null`, `array` or `object`. A number is `float` when it was spelt as
 * one (an integral `3.0` read by `parseJsonExact`) or is not integral.
 * @param {any} container
 * @param {string | number} key
 * @returns {string}
 */
export function kindAt(container, key) {
  return kindOf(container[key], spellingAt(container, key));
}

/**
 * @param {any} container
 * @param {string | number} key
 * @returns {string | undefined}
 */
export function spellingAt(container, key) {
  const table = container[SPELLINGS];
  return table === undefined ? undefined : table[key];
}

/**
 * @param {unknown} value
 * @param {string} [spelt]
 * @returns {string}
 */
export function kindOf(value, spelt) {
  switch (typeof value) {
    case "number":
      if (spelt !== undefined) return /[.e]/.test(spelt) ? "float" : "int";
      return Number.isInteger(value) ? "int" : "float";
    case "bigint":
      return "int";
    case "string":
      return "str";
    case "boolean":
      return "bool";
    case "object":
      return value === null ? "null" : Array.isArray(value) ? "array" : "object";
    default:
      return typeof value;
  }
}

/**
 * Attach a spelling table to a container (a fresh object made by the codec).
 * @template {object} T
 * @param {T} container
 * @param {SpellingTable} table
 * @returns {T}
 */
export function withSpellings(container, table) {
  Object.defineProperty(container, SPELLINGS, { value: table, writable: true, configurable: true });
  return container;
}

/**
 * Encode a JSON value compactly in the canonical encoding: object keys in their order
 * (the received order when `KEY_ORDER` still matches), numbers by `spellNumber`, strings
 * with only the escapes JSON requires. `undefined` members are left out; a `bigint` is
 * an integer.
 * @param {unknown} value
 * @returns {string}
 */
export function encodeJson(value) {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "number":
      return formatNumber(value);
    case "boolean":
      return value ? "true" : "false";
    case "bigint":
      return value.toString();
    case "object":
      if (value === null) return "null";
      return Array.isArray(value) ? encodeArray(value) : encodeObject(/** @type {Record<string, unknown>} */ (value));
    default:
      throw new TypeError(`cannot encode a ${typeof value} as JSON`);
  }
}

/**
 * @param {unknown[]} array
 * @returns {string}
 */
function encodeArray(array) {
  const table = /** @type {any} */ (array)[SPELLINGS];
  let out = "[";
  for (let i = 0; i < array.length; i++) {
    if (i) out += ",";
    const item = array[i];
    out += table !== undefined && typeof item === "number" ? spellNumber(array, i, item) : encodeJson(item);
  }
  return `${out}]`;
}

/**
 * @param {Record<string, unknown>} object
 * @returns {string}
 */
function encodeObject(object) {
  const table = /** @type {any} */ (object)[SPELLINGS];
  let out = "{";
  let first = true;
  for (const key of keysOf(object)) {
    const item = object[key];
    if (item === undefined) continue;
    out += first ? JSON.stringify(key) : `,${JSON.stringify(key)}`;
    out += ":";
    out += table !== undefined && typeof item === "number" ? spellNumber(object, key, item) : encodeJson(item);
    first = false;
  }
  return `${out}}`;
}

/**
 * An object's keys in received order when a kept `KEY_ORDER` still lists exactly its keys.
 * @param {Record<string, unknown>} object
 * @returns {string[]}
 */
export function keysOf(object) {
  const keys = Object.keys(object);
  const order = /** @type {string[] | undefined} */ (/** @type {any} */ (object)[KEY_ORDER]);
  if (order === undefined || order.length !== keys.length) return keys;
  for (const key of order) if (!Object.hasOwn(object, key)) return keys;
  return order;
}

const INDEX_KEY = /^(?:0|[1-9][0-9]{0,9})$/;

/**
 * Parse JSON text keeping what `encodeJson` needs to write it back byte for byte:
 * number spellings and the order of integer-like keys (see the module comment).
 *
 * It accepts exactly what msgspec accepts: RFC 8259 JSON, no lone surrogate escapes, no
 * number that overflows a float. Duplicate keys keep the last value at the first
 * position, as Python does. Failures raise `InvalidJsonError`.
 * @param {string} text
 * @returns {unknown}
 */
export function parseJsonExact(text) {
  const parser = new ExactParser(text);
  try {
    parser.space();
    const value = parser.value();
    parser.space();
    if (parser.at < text.length) parser.fail("trailing characters");
    return value;
  } catch (error) {
    if (error instanceof RangeError) throw new InvalidJsonError("invalid JSON: nesting is too deep", { cause: error });
    throw error;
  }
}

class ExactParser {
  /** @param {string} text */
  constructor(text) {
    this.text = text;
    this.at = 0;
  }

  /**
   * @param {string} why
   * @returns {never}
   */
  fail(why) {
    throw new InvalidJsonError(`invalid JSON: ${why} at character ${this.at}`);
  }

  space() {
    const text = this.text;
    let at = this.at;
    for (;;) {
      const c = text.charCodeAt(at);
      if (c !== 32 && c !== 10 && c !== 13 && c !== 9) break;
      at++;
    }
    this.at = at;
  }

  /** @returns {unknown} */
  value() {
    const c = this.text.charCodeAt(this.at);
    if (c === 34) return this.string();
    if (c === 123) return this.object();
    if (c === 91) return this.array();
    if (c === 45 || (c >= 48 && c <= 57)) return this.number()[0];
    if (this.text.startsWith("true", this.at)) return this.literal(4, true);
    if (this.text.startsWith("false", this.at)) return this.literal(5, false);
    if (this.text.startsWith("null", this.at)) return this.literal(4, null);
    return this.fail(this.at >= this.text.length ? "unexpected end of text" : "unexpected character");
  }

  /**
   * @param {number} length
   * @param {boolean | null} value
   */
  literal(length, value) {
    this.at += length;
    return value;
  }

  /** @returns {[number, string | undefined]} the value and its spelling, when it needs one */
  number() {
    const text = this.text;
    const start = this.at;
    let at = start;
    let float = false;
    if (text.charCodeAt(at) === 45) at++;
    const lead = text.charCodeAt(at);
    if (lead === 48) at++;
    else if (lead >= 49 && lead <= 57) at = this.digits(at);
    else this.fail("invalid number");
    if (text.charCodeAt(at) === 46) {
      float = true;
      const end = this.digits(at + 1);
      if (end === at + 1) this.fail("invalid number");
      at = end;
    }
    const e = text.charCodeAt(at);
    if (e === 101 || e === 69) {
      float = true;
      at++;
      const s = text.charCodeAt(at);
      if (s === 43 || s === 45) at++;
      const end = this.digits(at);
      if (end === at) this.fail("invalid number");
      at = end;
    }
    this.at = at;
    const literal = text.slice(start, at);
    const value = Number(literal);
    if (float) {
      if (!Number.isFinite(value)) this.fail("number out of range");
      const canonical = formatFloat(value);
      return [value, canonical === formatNumber(value) ? undefined : canonical];
    }
    if (literal.length < 16) return [value, undefined];
    const canonical = literal === "-0" ? "0" : literal;
    return [value, canonical === formatNumber(value) ? undefined : canonical];
  }

  /** @param {number} at */
  digits(at) {
    const text = this.text;
    for (;;) {
      const c = text.charCodeAt(at);
      if (!(c >= 48 && c <= 57)) return at;
      at++;
    }
  }

  /** @returns {string} */
  string() {
    const text = this.text;
    const start = ++this.at;
    let at = start;
    for (;;) {
      const c = text.charCodeAt(at);
      if (c === 34) {
        this.at = at + 1;
        return text.slice(start, at);
      }
      if (c === 92) break;
      if (c < 32 || Number.isNaN(c)) {
        this.at = at;
        this.fail(Number.isNaN(c) ? "unterminated string" : "control character in string");
      }
      at++;
    }
    let out = text.slice(start, at);
    for (;;) {
      const c = text.charCodeAt(at);
      if (c === 34) {
        this.at = at + 1;
        return out;
      }
      if (c < 32 || Number.isNaN(c)) {
        this.at = at;
        this.fail(Number.isNaN(c) ? "unterminated string" : "control character in string");
      }
      if (c !== 92) {
        out += text[at++];
        continue;
      }
      const escape = text[at + 1];
      at += 2;
      switch (escape) {
        case '"':
        case "\\":
        case "/":
          out += escape;
          break;
        case "b":
          out += "\b";
          break;
        case "f":
          out += "\f";
          break;
        case "n":
          out += "\n";
          break;
        case "r":
          out += "\r";
          break;
        case "t":
          out += "\t";
          break;
        case "u": {
          const unit = this.hex(at);
          at += 4;
          if (unit >= 0xd800 && unit <= 0xdbff) {
            const low = text.startsWith("\\u", at) ? this.hex(at + 2) : -1;
            if (low < 0xdc00 || low > 0xdfff) {
              this.at = at;
              this.fail("lone surrogate escape in string");
            }
            at += 6;
            out += String.fromCharCode(unit, low);
          } else if (unit >= 0xdc00 && unit <= 0xdfff) {
            this.at = at;
            this.fail("lone surrogate escape in string");
          } else {
            out += String.fromCharCode(unit);
          }
          break;
        }
        default:
          this.at = at - 1;
          this.fail("invalid escape in string");
      }
    }
  }

  /** @param {number} at */
  hex(at) {
    const digits = this.text.slice(at, at + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(digits)) {
      this.at = at;
      this.fail("invalid \\u escape in string");
    }
    return parseInt(digits, 16);
  }

  /** @returns {unknown[]} */
  array() {
    this.at++;
    /** @type {unknown[]} */
    const array = [];
    /** @type {SpellingTable | undefined} */
    let table;
    this.space();
    if (this.text.charCodeAt(this.at) === 93) {
      this.at++;
      return array;
    }
    for (;;) {
      const c = this.text.charCodeAt(this.at);
      if (c === 45 || (c >= 48 && c <= 57)) {
        const [value, spelt] = this.number();
        if (spelt !== undefined) {
          table ??= {};
          table[array.length] = spelt;
        }
        array.push(value);
      } else {
        array.push(this.value());
      }
      this.space();
      const next = this.text.charCodeAt(this.at++);
      if (next === 93) break;
      if (next !== 44) {
        this.at--;
        this.fail("expected ',' or ']'");
      }
      this.space();
    }
    return table === undefined ? array : withSpellings(array, table);
  }

  /** @returns {Record<string, unknown>} */
  object() {
    this.at++;
    /** @type {Record<string, unknown>} */
    const object = {};
    /** @type {SpellingTable | undefined} */
    let table;
    /** @type {string[] | undefined} */
    let order;
    /** @type {string[]} */
    const keys = [];
    this.space();
    if (this.text.charCodeAt(this.at) === 125) {
      this.at++;
      return object;
    }
    for (;;) {
      if (this.text.charCodeAt(this.at) !== 34) this.fail("expected a string key");
      const key = this.string();
      this.space();
      if (this.text.charCodeAt(this.at) !== 58) this.fail("expected ':'");
      this.at++;
      this.space();
      const c = this.text.charCodeAt(this.at);
      /** @type {unknown} */
      let value;
      /** @type {string | undefined} */
      let spelt;
      if (c === 45 || (c >= 48 && c <= 57)) [value, spelt] = this.number();
      else value = this.value();
      const seen = Object.hasOwn(object, key);
      if (!seen) keys.push(key);
      if (key === "__proto__") Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
      else object[key] = value;
      if (spelt !== undefined) {
        table ??= {};
        table[key] = spelt;
      } else if (seen && table !== undefined) {
        delete table[key];
      }
      if (order === undefined && INDEX_KEY.test(key) && Number(key) < 4294967295) order = keys;
      this.space();
      const next = this.text.charCodeAt(this.at++);
      if (next === 125) break;
      if (next !== 44) {
        this.at--;
        this.fail("expected ',' or '}'");
      }
      this.space();
    }
    if (table !== undefined) withSpellings(object, table);
    if (order !== undefined) Object.defineProperty(object, KEY_ORDER, { value: order, writable: true, configurable: true });
    return object;
  }
}

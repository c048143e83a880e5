/**
 * The follow rules of `HistoryClient.follow`, the twin of history_client/follow.py: the
 * reconnect `Backoff`, the journal that moves the delivered cursor (resume, duplicate,
 * overlap and gap rules), the frames of one open stream and the errors a stream reports.
 * client.js drives them: it opens the streams, waits and retries.
 */

import { decodeFollowSnapshot, decodeLiveRecord, expandRow, parseJsonExact, recordSeqRange } from "./codec.js";
import {
  CursorAheadError,
  ProtocolError,
  ResumeBehindError,
  StreamOverlapError,
  TransportError,
  describe,
} from "./client-errors.js";
import { InvalidJsonError } from "./errors.js";
import { SSEDecoder } from "./sse.js";

/** @typedef {import("./codec.js").Event} Event */
/** @typedef {import("./codec.js").ReadPage} Page */
/** @typedef {import("./sse.js").ServerSentEvent} ServerSentEvent */

export const DEFAULT_MAX_RETRIES = 10;
export const DEFAULT_MAX_DELAY_MS = 30_000;

/**
 * Reconnect delays: exponential from `baseMs` up to `capMs`, each drawn from its upper half.
 *
 * `baseMs` `null` follows the server's `retry` field (1 s until one arrives).
 * `maxRetries` counts reconnects in a row that deliver nothing; `null` never gives up.
 */
export class Backoff {
  /**
   * @param {{baseMs?: number | null, capMs?: number, maxRetries?: number | null, random?: () => number}} [options]
   */
  constructor({ baseMs = null, capMs = DEFAULT_MAX_DELAY_MS, maxRetries = DEFAULT_MAX_RETRIES, random = Math.random } = {}) {
    this.baseMs = baseMs;
    this.capMs = capMs;
    this.maxRetries = maxRetries;
    this.random = random;
  }

  /**
   * @param {number} failures the failures in a row, from 1
   * @param {number | null} serverRetryMs the stream's last `retry`
   * @returns {number} milliseconds
   */
  delay(failures, serverRetryMs) {
    const base = this.baseMs ?? (serverRetryMs || 1000);
    const ceiling = Math.min(this.capMs, base * 2 ** (failures - 1));
    return ceiling * (0.5 + 0.5 * this.random());
  }
}

/** Raised inside `follow` when the stream broke or ended; follow reconnects. */
export class Disconnected extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "Disconnected";
  }
}

/**
 * Parse a frame's JSON as `readPage` parses a body: `JSON.parse`, or with `exact` the
 * codec's `parseJsonExact`, which keeps number spellings. Either fails with `InvalidJsonError`.
 *
 * @param {string} data
 * @param {string} where
 * @param {boolean} exact
 * @returns {unknown}
 */
function parseFrame(data, where, exact) {
  try {
    return exact ? parseJsonExact(data) : JSON.parse(data);
  } catch (caught) {
    if (caught instanceof InvalidJsonError) throw new InvalidJsonError(`${where}: ${caught.message}`);
    throw new InvalidJsonError(`${where}: invalid JSON: ${describe(caught)}`, { cause: caught });
  }
}

/**
 * @param {string} data
 * @param {number | null} cursor
 * @returns {Error}
 */
export function streamError(data, cursor) {
  /** @type {unknown} */
  let value;
  try {
    value = JSON.parse(data);
  } catch (caught) {
    return new ProtocolError(`malformed error frame: ${describe(caught)}`, { cause: caught });
  }
  if (isObject(value) && value.code === "cursor_ahead" && Number.isSafeInteger(value.headSeq)) {
    return new CursorAheadError(cursor ?? -1, /** @type {number} */ (value.headSeq));
  }
  // The service failed after the stream opened (§5.1): resume, as after a cut.
  if (isObject(value) && typeof value.code === "string") return new Disconnected(`the stream ended with ${value.code}`);
  return new ProtocolError(`the stream reported an error: ${data.slice(0, 200)}`);
}

/**
 * @param {unknown} value
 * @returns {value is Record<string, unknown>}
 */
function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The delivered cursor and the rules that move it (the journal of history_client/follow.py).
 *
 * - The cursor is the last delivered seq. A snapshot must end exactly at its own cursor,
 *   and a reconnected stream must not open behind the delivered cursor.
 * - A live record that ends at or before the cursor is a complete duplicate and is
 *   dropped; one that starts at or before the cursor but ends after it is a partial
 *   overlap and fails.
 * - A record that starts after `cursor + 1` leaves a gap, repaired from pages before
 *   going on.
 *
 * `open` and `live` return the events to deliver, every page they need already checked;
 * `delivered` moves the cursor once the caller has taken them all.
 */
export class Journal {
  /**
   * @param {number | null} after
   * @param {(through: number) => Promise<Page>} fetchPage
   * @param {boolean} exact
   */
  constructor(after, fetchPage, exact) {
    /** @type {number | null} */
    this.cursor = after;
    /** @type {number | null} the cursor once the events last returned are delivered */
    this.next = after;
    /** @type {number | null} */
    this.retryMs = null;
    this._fetchPage = fetchPage;
    this._exact = exact;
  }

  delivered() {
    this.cursor = this.next;
  }

  /**
   * @param {string} data
   * @returns {Promise<Event[]>}
   */
  async open(data) {
    // The codec checks that the snapshot's records tile its page and that it ends at its own cursor.
    const snapshot = decodeFollowSnapshot(parseFrame(data, "snapshot", this._exact));
    const cursor = this.cursor;
    this.next = cursor;
    if (cursor !== null && snapshot.cursor < cursor) {
      throw new ResumeBehindError(`resumed at a cursor behind the last applied entry: ${snapshot.cursor} < ${cursor}`);
    }
    /** @type {Event[]} */
    let repaired = [];
    if (cursor !== null && snapshot.fromSeq > cursor + 1) repaired = await this._repair(cursor, snapshot.fromSeq - 1);
    const after = cursor === null ? -1 : Math.max(cursor, snapshot.fromSeq - 1);
    this.next = snapshot.cursor;
    return repaired.concat(snapshot.events({ after }));
  }

  /**
   * @param {string} data
   * @returns {Promise<Event[]>}
   */
  async live(data) {
    const record = decodeLiveRecord(parseFrame(data, "live event", this._exact));
    const [first, last] = recordSeqRange(record);
    const cursor = this.cursor ?? -1;
    this.next = this.cursor;
    if (last <= cursor) return [];
    if (first <= cursor) {
      throw new StreamOverlapError(`the stream emitted a partially overlapping entry: [${first}, ${last}] after ${cursor}`);
    }
    /** @type {Event[]} */
    let repaired = [];
    if (first > cursor + 1) repaired = await this._repair(cursor, first - 1);
    this.next = last;
    return repaired.concat(record.chunks === undefined ? [record.event] : expandRow(record.chunks));
  }

  /**
   * The `end` frame (§5.1): the session was closed at `headSeq`, so nothing follows. The
   * service sends it after every event up to that head; any it skipped are repaired from
   * pages like a gap, so the follow still ends with every event delivered.
   *
   * @param {string} data
   * @returns {Promise<{code: string, headSeq: number, events: Event[]}>}
   */
  async end(data) {
    const value = parseFrame(data, "end", false);
    if (!isObject(value) || typeof value.code !== "string" || !Number.isSafeInteger(value.headSeq)) {
      throw new ProtocolError(`malformed end frame: ${data.slice(0, 200)}`);
    }
    const headSeq = /** @type {number} */ (value.headSeq);
    const cursor = this.cursor ?? -1;
    this.next = this.cursor;
    if (headSeq < cursor) throw new ProtocolError(`the stream ended at seq ${headSeq}, behind the delivered seq ${cursor}`);
    const events = headSeq > cursor ? await this._repair(cursor, headSeq) : [];
    this.next = Math.max(cursor, headSeq);
    return { code: value.code, headSeq, events };
  }

  /**
   * The events `(cursor, target]` from pages, newest fetched first, returned oldest first.
   *
   * @param {number} cursor
   * @param {number} target
   * @returns {Promise<Event[]>}
   */
  async _repair(cursor, target) {
    /** @type {Page[]} */
    const pages = [];
    let through = target;
    while (through > cursor) {
      const page = await this._fetchPage(through);
      pages.push(page);
      through = page.fromSeq - 1;
    }
    return pages.reverse().flatMap((page) => page.events({ after: cursor }));
  }
}

/** The frames of one open follow stream, with a read timeout per read. */
export class Frames {
  /**
   * @param {Response} response
   * @param {number} readTimeoutMs
   * @param {() => void} onClose
   */
  constructor(response, readTimeoutMs, onClose) {
    this._reader = response.body?.getReader() ?? null;
    this._readTimeoutMs = readTimeoutMs;
    this._onClose = onClose;
    this._decoder = new SSEDecoder();
    /** @type {ServerSentEvent[]} */
    this._ready = [];
    this._head = 0;
    this._closed = false;
  }

  /** @returns {Promise<ServerSentEvent | null>} the next frame, or `null` when the stream ended */
  async next() {
    while (this._head === this._ready.length) {
      const chunk = await this._read();
      if (chunk === null) return null;
      this._ready = this._decoder.feed(chunk);
      this._head = 0;
    }
    return this._ready[this._head++];
  }

  /** @returns {Promise<Uint8Array | null>} */
  async _read() {
    if (this._reader === null || this._closed) return null;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer;
    /** @type {Promise<never>} */
    const silence = new Promise((_, reject) => {
      timer = setTimeout(
        () => reject(new Disconnected(`no data for ${this._readTimeoutMs / 1000} s`)),
        this._readTimeoutMs,
      );
    });
    try {
      const { done, value } = await Promise.race([this._reader.read(), silence]);
      return done ? null : value;
    } catch (caught) {
      if (caught instanceof Disconnected) throw caught;
      throw new TransportError(describe(caught), { cause: caught });
    } finally {
      clearTimeout(timer);
    }
  }

  close() {
    if (this._closed) return;
    this._closed = true;
    this._onClose();
    this._reader?.cancel().catch(() => {});
  }
}

/**
 * The follow rules of `HistoryClient.follow`, the twin of history_client/follow.py: the
 * reconnect `Backoff`, the journal that moves the delivered cursor (resume, duplicate,
 * overlap and gap rules) and keeps the incarnation followed, the frames of one open stream
 * and the errors a stream reports. client.js drives them: it opens the streams, waits and
 * retries.
 */

import { decodeFollowSnapshot, decodeLiveRecord, decodeLiveRecords, expandRow, parseJsonExact, recordSeqRange } from "./codec.js";
import {
  CursorAheadError,
  ProtocolError,
  ResumeBehindError,
  SessionDeletedError,
  StreamOverlapError,
  TransportError,
  describe,
} from "./client-errors.js";
import { InvalidJsonError } from "./errors.js";
import { parseEventId } from "./incarnation.js";
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
 * What an `error` frame means (§5.1): `cursor_ahead` and `session_deleted` end the follow,
 * any other code is a failure to resume from.
 *
 * @param {string} data
 * @param {{cursor: number | null, session: string, incarnation: string | null}} state
 * @returns {Error}
 */
export function streamError(data, { cursor, session, incarnation }) {
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
  if (isObject(value) && value.code === "session_deleted") return new SessionDeletedError(session, incarnation);
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
 * - A live record, or a packed stream's `records` frame taken whole (§5.5), that ends at
 *   or before the cursor is a complete duplicate and is dropped; one that starts at or
 *   before the cursor but ends after it is a partial overlap and fails.
 * - One that starts after `cursor + 1` leaves a gap, repaired from pages before going on.
 * - The incarnation (§2.5) is the one the first frame's `id` (`<incarnation>:<seq>`) or the
 *   snapshot's header names, unless the follow started with one. A frame of another one is
 *   of a session created again after a delete: `SessionDeletedError`.
 *
 * `open`, `live` and `records` return the events to deliver, every page they need already checked;
 * `delivered` moves the cursor once the caller has taken them all.
 */
export class Journal {
  /**
   * @param {number | null} after
   * @param {{
   *   session: string,
   *   incarnation: string | null,
   *   exact: boolean,
   *   fetchPage: (through: number) => Promise<Page>,
   * }} options `session` is the id followed, for errors; `fetchPage` reads a repair page
   */
  constructor(after, { session, incarnation, exact, fetchPage }) {
    /** @type {number | null} */
    this.cursor = after;
    /** @type {number | null} the cursor once the events last returned are delivered */
    this.next = after;
    /** @type {string | null} the incarnation followed, once known */
    this.incarnation = incarnation;
    this.session = session;
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
   * @param {string | null} id the frame's `id`
   * @returns {Promise<Event[]>}
   */
  async open(data, id) {
    // The codec checks that the snapshot's records tile its page and that it ends at its own cursor.
    const snapshot = decodeFollowSnapshot(parseFrame(data, "snapshot", this._exact));
    const named = this._id(id, "snapshot")?.incarnation ?? null;
    const held = snapshot.header.incarnation;
    if (named !== null && held !== undefined && held !== named) {
      throw new ProtocolError(`the snapshot's header is of incarnation ${held}, its id names ${named}`);
    }
    this._learn(named ?? held ?? null);
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
   * @param {string | null} id the frame's `id`
   * @returns {Promise<Event[]>}
   */
  async live(data, id) {
    const record = decodeLiveRecord(parseFrame(data, "live event", this._exact));
    this._learn(this._id(id, "live event")?.incarnation ?? null);
    const [first, last] = recordSeqRange(record);
    return this._continue(first, last, () => (record.chunks === undefined ? [record.event] : expandRow(record.chunks)));
  }

  /**
   * A packed stream's `records` frame (§5.5): the page records of `[fromSeq, toSeq)`, checked
   * whole as a page is, then taken by the rules of `live` as one interval. Its `id` names
   * `toSeq - 1`.
   *
   * @param {string} data
   * @param {string | null} id the frame's `id`
   * @returns {Promise<Event[]>}
   */
  async records(data, id) {
    const frame = decodeLiveRecords(parseFrame(data, "records", this._exact));
    const named = this._id(id, "records");
    this._learn(named?.incarnation ?? null);
    const [first, last] = [frame.fromSeq, frame.toSeq - 1];
    if (named !== null && named.seq !== last) {
      throw new ProtocolError(`a records frame of [${first}, ${last}] has the id of seq ${named.seq}`);
    }
    return this._continue(first, last, () => frame.events());
  }

  /**
   * The events of `[first, last]`, taken after the cursor: `[]` for a duplicate, a
   * `StreamOverlapError` for a partial overlap, and a gap repaired from pages first.
   *
   * @param {number} first
   * @param {number} last
   * @param {() => Event[]} expand the interval's own events
   * @returns {Promise<Event[]>}
   */
  async _continue(first, last, expand) {
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
    return repaired.concat(expand());
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
   * The error an `error` frame reports (`streamError`), for this follow.
   *
   * @param {string} data
   * @returns {Error}
   */
  error(data) {
    return streamError(data, this);
  }

  /**
   * What a frame's `id` names: `null` when it has no id (or an empty one, which resets it);
   * its `incarnation` is `null` for a bare seq (a server before incarnations).
   *
   * @param {string | null} id
   * @param {string} where
   * @returns {{incarnation: string | null, seq: number} | null}
   */
  _id(id, where) {
    if (id === null || id === "") return null;
    const parsed = parseEventId(id);
    if (parsed === null) throw new ProtocolError(`${where}: malformed id ${JSON.stringify(id.slice(0, 80))}`);
    return parsed;
  }

  /**
   * Keep the incarnation a frame named; another than the one followed means the session
   * was deleted and its id created again.
   *
   * @param {string | null} incarnation
   */
  _learn(incarnation) {
    if (incarnation === null) return;
    if (this.incarnation === null) this.incarnation = incarnation;
    else if (incarnation !== this.incarnation) {
      throw new SessionDeletedError(this.session, this.incarnation, {
        cause: new ProtocolError(`the stream sent a frame of incarnation ${incarnation}`),
      });
    }
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

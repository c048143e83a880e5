// A scripted service behind a mock `fetch`, and the wire bytes it speaks: the twin of
// testing/mock_service.py and testing/wire.py.
import { ROW_TAGS, encodeRecord, packChunkRuns, parseEventId } from "../src/codec.js";
import { Backoff, HistoryClient } from "../src/client.js";

/** @typedef {import("../src/codec.js").Event} Event */

/** The incarnation (§2.5) of the scripted session, in every frame id, header and page it sends. */
export const INCARNATION = "5d0c1e9a7b22";

/** A user message every 40 seqs, then text and reasoning delta runs (so pages carry rows), as testing/events.py. */
export function makeEvents(count, start = 0) {
  /** @type {Event[]} */
  const events = [];
  for (let seq = start; seq < start + count; seq++) {
    const phase = seq % 40;
    const time = 1000 + seq;
    if (phase === 0) {
      events.push({ type: "user/message", seq, time, data: { text: `q${seq}` }, surfaceOp: "append" });
    } else if (phase < 25) {
      const chunk = { type: "text-delta", index: 0, text: ` t${seq}` };
      events.push({ type: "assistant/chunk", seq, time, data: { turn: 1, step: 1, chunk } });
    } else if (phase < 38) {
      const chunk = { type: "reasoning-delta", index: 1, text: `r${seq}` };
      events.push({ type: "assistant/chunk", seq, time, data: { turn: 1, step: 1, chunk } });
    } else {
      events.push({ type: "tool/result", seq, time, data: { ok: true, seq } });
    }
  }
  return events;
}

/** The packed page records of `events` as plain JSON values, ready to edit into a broken page. */
export function recordsOf(events) {
  return packChunkRuns(events).map((record) =>
    JSON.parse(encodeRecord(ROW_TAGS.has(record.type) ? { chunks: record } : { event: record })),
  );
}

/**
 * @param {Event[]} events
 * @param {{fromSeq?: number, toSeq?: number, records?: any[], hasMore?: boolean}} [options]
 */
export function pageBody(events, options = {}) {
  const fromSeq = options.fromSeq ?? (events.length ? events[0].seq : 0);
  const toSeq = options.toSeq ?? (events.length ? events[events.length - 1].seq + 1 : fromSeq);
  const records = options.records ?? recordsOf(events);
  const hasMore = options.hasMore ?? fromSeq > 0;
  return `{"records":[${records.map(encodeRecord).join(",")}],"hasMore":${hasMore},"fromSeq":${fromSeq},"toSeq":${toSeq}}`;
}

/**
 * A frame; a number `id` is sent as `<INCARNATION>:<id>`, as the service sends it (§5.1), a string as it is.
 *
 * @param {string} event
 * @param {string} data
 * @param {number | string} [id]
 */
export function sse(event, data, id) {
  const named = typeof id === "number" ? `${INCARNATION}:${id}` : id;
  return `${named === undefined ? "" : `id: ${named}\n`}event: ${event}\ndata: ${data}\n\n`;
}

/** @param {Event} event */
export function eventFrame(event) {
  return sse("event", encodeRecord(event), event.seq);
}

/**
 * A packed stream's `records` frame (§5.5): the page records of `events`, whose `id` names the
 * last seq, as the service's does, unless `id` says otherwise.
 *
 * @param {Event[]} events
 * @param {number | string} [id]
 */
export function recordsFrame(events, id) {
  const [fromSeq, toSeq] = [events[0].seq, events[events.length - 1].seq + 1];
  const records = recordsOf(events).map(encodeRecord).join(",");
  return sse("records", `{"records":[${records}],"fromSeq":${fromSeq},"toSeq":${toSeq}}`, id ?? toSeq - 1);
}

/**
 * A session header as the service sends it; `closedAt` once it is closed.
 *
 * @param {number | null} [closedAt]
 * @param {string} [incarnation]
 */
export function headerOf(session = "s", closedAt = null, incarnation = INCARNATION) {
  const closed = closedAt === null ? "" : `,"closedAt":${closedAt}`;
  return `{"type":"session","version":0,"id":"${session}","createdAt":0${closed},"incarnation":"${incarnation}"}`;
}

/**
 * @param {Event[]} events
 * @param {number} cursor
 * @param {number | null} [closedAt]
 * @param {string} [incarnation]
 */
export function snapshotFrame(events, cursor, session = "s", closedAt = null, incarnation = INCARNATION) {
  const page = pageBody(events, { toSeq: cursor + 1 });
  const data = `{"header":${headerOf(session, closedAt, incarnation)},"cursor":${cursor},${page.slice(1)}`;
  return sse("snapshot", data, `${incarnation}:${cursor}`);
}

/** The last frame of a deleted session's follow stream (§5.1, §6.4): no `id`. */
export function deletedFrame() {
  return sse("error", '{"code":"session_deleted"}');
}

/** The last frame of a closed session's follow stream (§5.1): no `id`. @param {number} headSeq */
export function endFrame(headSeq) {
  return sse("end", `{"code":"session_closed","headSeq":${headSeq}}`);
}

/** Stream content that sends its chunks and then breaks the connection, as undici reports a reset. */
export class Broken {
  /** @param {string[]} chunks */
  constructor(...chunks) {
    this.chunks = chunks;
  }
}

/** Stream content that sends its chunks and then stays open, silent, until the request is aborted. */
export class Hang {
  /** @param {string[]} chunks */
  constructor(...chunks) {
    this.chunks = chunks;
  }
}

/** A JSON error response, as the service sends it, with the code's extra fields (`headSeq`). */
export function errorResponse(status, code, message, extra = {}) {
  return new Response(JSON.stringify({ error: { code, message, ...extra } }), {
    status,
    headers: { "content-type": "application/json" },
  });
}

const encoder = new TextEncoder();

/**
 * @param {string[]} chunks
 * @param {"end" | "break" | "hang"} how
 * @param {AbortSignal | undefined} signal
 */
function streamOf(chunks, how, signal) {
  let i = 0;
  return new ReadableStream({
    start(controller) {
      signal?.addEventListener("abort", () => controller.error(signal.reason), { once: true });
    },
    pull(controller) {
      if (i < chunks.length) {
        controller.enqueue(encoder.encode(chunks[i++]));
      } else if (how === "end") {
        controller.close();
      } else if (how === "break") {
        controller.error(new TypeError("terminated", { cause: new Error("other side closed") }));
      } else {
        return new Promise(() => {});
      }
      return undefined;
    },
  });
}

const SESSION_PATH = /^\/v1\/sessions\/[^/]+(\/subagents\/[^/]+)?$/;

/** @param {unknown} value */
function jsonResponse(value, status = 200) {
  return new Response(JSON.stringify(value), { status, headers: { "content-type": "application/json" } });
}

/**
 * A scripted service: follow connections answer in turn from `streams`; pages come from `log`, 10 events at most.
 *
 * Its session has `incarnation` (§2.5): pages name it in `Session-Incarnation`, and a page or
 * follow that names another one (`incarnation=`, or `Last-Event-ID: <incarnation>:<seq>`) gets
 * 404 `session_not_found`, as one of a deleted session does. `DELETE /v1/sessions/{id}`
 * deletes it (204): from then on every request gets that 404, until `recreate()` makes the
 * id a new incarnation.
 *
 * It closes as §6.3 says: `POST .../close` sets `closedAt` (at `clock`, once) and answers the
 * head; the header (`GET /v1/sessions/{id}`) then carries it; an append that is not an exact
 * re-send of `log` is refused with `session_closed`; and once the scripted streams run out, a
 * follow gets the opening (the snapshot of the tail, or the events after `Last-Event-ID`)
 * and then the end frame.
 */
export class MockService {
  /**
   * @param {Event[]} log
   * @param {(string | Broken | Hang | Response | (() => Response))[]} [streams]
   * @param {{closedAt?: number | null, clock?: number}} [options]
   */
  constructor(log, streams = [], { closedAt = null, clock = 1_700_000_009_000 } = {}) {
    this.log = log;
    this.incarnation = INCARNATION;
    this.deleted = false;
    this.streams = [...streams];
    /** @type {number | null} */
    this.closedAt = closedAt;
    this.clock = clock;
    /** @type {{url: URL, headers: Headers, signal?: AbortSignal}[]} */
    this.follows = [];
    /** @type {{url: URL, headers: Headers}[]} */
    this.pages = [];
    /** @type {{url: URL, headers: Headers, body: unknown}[]} */
    this.writes = [];
    /** @type {Map<string, string | Response>} page answers by `through`, instead of the log's */
    this.pageOverrides = new Map();
    this.fetch = this.fetch.bind(this);
  }

  /**
   * @param {string | URL | Request} input
   * @param {RequestInit} [init]
   * @returns {Promise<Response>}
   */
  async fetch(input, init = {}) {
    const url = new URL(String(input));
    const headers = new Headers(init.headers);
    const signal = init.signal ?? undefined;
    if (init.method === "DELETE") {
      this.writes.push({ url, headers, body: init.body });
      if (this.deleted) return errorResponse(404, "session_not_found", "no such session");
      this.deleted = true;
      return new Response(null, { status: 204 });
    }
    if (this._gone(url, headers)) {
      if (url.pathname.endsWith("/follow")) this.follows.push({ url, headers, signal });
      else if (url.pathname.endsWith("/page")) this.pages.push({ url, headers });
      return errorResponse(404, "session_not_found", "no such session");
    }
    if (init.method === "POST") {
      this.writes.push({ url, headers, body: init.body });
      if (url.pathname.endsWith("/close")) return this._close();
      if (url.pathname.endsWith("/events")) return this._append(String(init.body));
      return errorResponse(404, "not_found", "no such route");
    }
    if (SESSION_PATH.test(url.pathname)) {
      const id = decodeURIComponent(/** @type {string} */ (url.pathname.split("/").pop()));
      return jsonResponse({ header: JSON.parse(headerOf(id, this.closedAt, this.incarnation)), headSeq: this.log.length - 1 });
    }
    if (url.pathname.endsWith("/follow")) {
      this.follows.push({ url, headers, signal });
      const stream = this.streams.shift() ?? (this.closedAt === null ? undefined : this._closedStream(headers));
      if (stream === undefined) return errorResponse(503, "gone", "no more streams");
      if (stream instanceof Response) return stream;
      if (typeof stream === "function") return stream();
      const [chunks, how] =
        stream instanceof Broken ? [stream.chunks, "break"] : stream instanceof Hang ? [stream.chunks, "hang"] : [[stream], "end"];
      return new Response(streamOf(chunks, /** @type {"end" | "break" | "hang"} */ (how), signal), {
        headers: { "content-type": "text/event-stream; charset=utf-8" },
      });
    }
    this.pages.push({ url, headers });
    const param = url.searchParams.get("through");
    const through = param === null ? this.log.length - 1 : Number(param);
    const override = this.pageOverrides.get(String(param));
    const pageHeaders = { "content-type": "application/json", "session-incarnation": this.incarnation };
    if (override instanceof Response) return override;
    if (override !== undefined) return new Response(override, { headers: pageHeaders });
    const start = Math.max(0, through + 1 - 10);
    const body = pageBody(this.log.slice(start, through + 1), { fromSeq: start, toSeq: through + 1 });
    return new Response(body, { headers: pageHeaders });
  }

  /** The id is created again after a delete (or the delete was never heard of): a new incarnation. */
  recreate(incarnation = "a11ce0ff1ce2") {
    this.incarnation = incarnation;
    this.deleted = false;
  }

  /**
   * Whether a request is for a session that is not there: deleted, or of another incarnation than it names.
   *
   * @param {URL} url
   * @param {Headers} headers
   */
  _gone(url, headers) {
    if (this.deleted) return true;
    const resume = headers.get("last-event-id");
    const named = resume === null ? url.searchParams.get("incarnation") : parseEventId(resume)?.incarnation;
    return named != null && named !== this.incarnation;
  }

  _close() {
    this.closedAt ??= this.clock;
    return jsonResponse({ headSeq: this.log.length - 1, closedAt: this.closedAt });
  }

  /** @param {string} body */
  _append(body) {
    /** @type {Event[]} */
    const events = JSON.parse(body).events;
    const headSeq = this.log.length - 1;
    const first = events[0].seq;
    const stored = events.every((event) => event.seq <= headSeq && encodeRecord(event) === encodeRecord(this.log[event.seq]));
    if (stored) return jsonResponse({ firstSeq: first, headSeq, idempotent: true });
    if (this.closedAt !== null) return errorResponse(409, "session_closed", "the session is closed", { headSeq });
    if (first !== headSeq + 1) return errorResponse(409, "seq_conflict", `expected seq ${headSeq + 1}`, { headSeq });
    this.log = [...this.log, ...events];
    return jsonResponse({ firstSeq: first, headSeq: this.log.length - 1 }, 201);
  }

  /** What a follow of the closed session answers: its opening, then the end frame at once. @param {Headers} headers */
  _closedStream(headers) {
    const headSeq = this.log.length - 1;
    const resume = headers.get("last-event-id");
    const after = resume === null ? null : parseEventId(resume)?.seq;
    if (after != null) {
      const replay = this.log.slice(after + 1).map((event) => sse("event", encodeRecord(event), `${this.incarnation}:${event.seq}`));
      return replay.join("") + endFrame(headSeq);
    }
    const tail = this.log.slice(Math.max(0, headSeq + 1 - 10));
    return snapshotFrame(tail, headSeq, "s", this.closedAt, this.incarnation) + endFrame(headSeq);
  }
}

/**
 * Follow through the scripted service until `limit` events arrive, pushing each into
 * `received`; errors propagate.
 *
 * @param {MockService} service
 * @param {{limit: number, after?: number, packed?: boolean, backoff?: any, onConnection?: any, signal?: AbortSignal, clientOptions?: any}} options
 * @param {Event[]} [received]
 */
export async function collect(service, { limit, after, packed, backoff, onConnection, signal, clientOptions = {} }, received = []) {
  const client = new HistoryClient("http://test", {
    fetch: service.fetch,
    backoff: backoff ?? new Backoff({ baseMs: 1, capMs: 2, maxRetries: 3 }),
    ...clientOptions,
  });
  for await (const event of client.follow("s", { after, packed, onConnection, signal })) {
    received.push(event);
    if (received.length === limit) break;
  }
  return received;
}

/**
 * Follow through the scripted service until the iteration ends by itself: the events, what
 * `follow` returned, and every change `onConnection` heard.
 *
 * @param {MockService} service
 * @param {{after?: number, clientOptions?: any}} [options]
 */
export async function followToEnd(service, { after, clientOptions = {} } = {}) {
  const client = new HistoryClient("http://test", {
    fetch: service.fetch,
    backoff: new Backoff({ baseMs: 1, capMs: 2, maxRetries: 3 }),
    ...clientOptions,
  });
  /** @type {any[]} */
  const changes = [];
  /** @type {Event[]} */
  const events = [];
  const stream = client.follow("s", { after, onConnection: (change) => changes.push(change) });
  for (;;) {
    const next = await stream.next();
    if (next.done) return { events, ended: next.value, changes };
    events.push(next.value);
  }
}

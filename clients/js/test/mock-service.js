// A scripted service behind a mock `fetch`, and the wire bytes it speaks: the twin of
// testing/mock_service.py and testing/wire.py.
import { ROW_TAGS, encodeRecord, packChunkRuns } from "../src/codec.js";
import { Backoff, HistoryClient } from "../src/client.js";

/** @typedef {import("../src/codec.js").Event} Event */

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
 * @param {string} event
 * @param {string} data
 * @param {number} [id]
 */
export function sse(event, data, id) {
  return `${id === undefined ? "" : `id: ${id}\n`}event: ${event}\ndata: ${data}\n\n`;
}

/** @param {Event} event */
export function eventFrame(event) {
  return sse("event", encodeRecord(event), event.seq);
}

/**
 * @param {Event[]} events
 * @param {number} cursor
 */
export function snapshotFrame(events, cursor, session = "s") {
  const page = pageBody(events, { toSeq: cursor + 1 });
  return sse("snapshot", `{"header":{"type":"session","version":0,"id":"${session}","createdAt":0},"cursor":${cursor},${page.slice(1)}`, cursor);
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

/** A JSON error response, as the service sends it. */
export function errorResponse(status, code, message) {
  return new Response(JSON.stringify({ error: { code, message } }), {
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

/** A scripted service: follow connections answer in turn from `streams`; pages come from `log`, 10 events at most. */
export class MockService {
  /**
   * @param {Event[]} log
   * @param {(string | Broken | Hang | Response | (() => Response))[]} [streams]
   */
  constructor(log, streams = []) {
    this.log = log;
    this.streams = [...streams];
    /** @type {{url: URL, headers: Headers, signal?: AbortSignal}[]} */
    this.follows = [];
    /** @type {{url: URL, headers: Headers}[]} */
    this.pages = [];
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
    if (url.pathname.endsWith("/follow")) {
      this.follows.push({ url, headers, signal });
      const stream = this.streams.shift();
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
    if (override instanceof Response) return override;
    if (override !== undefined) return new Response(override, { headers: { "content-type": "application/json" } });
    const start = Math.max(0, through + 1 - 10);
    const body = pageBody(this.log.slice(start, through + 1), { fromSeq: start, toSeq: through + 1 });
    return new Response(body, { headers: { "content-type": "application/json" } });
  }
}

/**
 * Follow through the scripted service until `limit` events arrive, pushing each into
 * `received`; errors propagate.
 *
 * @param {MockService} service
 * @param {{limit: number, after?: number, backoff?: any, onConnection?: any, signal?: AbortSignal, clientOptions?: any}} options
 * @param {Event[]} [received]
 */
export async function collect(service, { limit, after, backoff, onConnection, signal, clientOptions = {} }, received = []) {
  const client = new HistoryClient("http://test", {
    fetch: service.fetch,
    backoff: backoff ?? new Backoff({ baseMs: 1, capMs: 2, maxRetries: 3 }),
    ...clientOptions,
  });
  for await (const event of client.follow("s", { after, onConnection, signal })) {
    received.push(event);
    if (received.length === limit) break;
  }
  return received;
}

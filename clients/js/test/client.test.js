// The client against a scripted fetch: requests, typed errors, refused pages, and the follow rules.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { encodeRecord, packChunkRuns, parseJsonExact } from "../src/codec.js";
import {
  ClientError,
  CursorAheadError,
  ProtocolError,
  ResumeBehindError,
  ServiceError,
  SessionDeletedError,
  StreamOverlapError,
  TransportError,
} from "../src/client-errors.js";
import { Backoff, HistoryClient } from "../src/client.js";
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
  Broken,
  Hang,
  INCARNATION,
  MockService,
  collect,
  deletedFrame,
  endFrame,
  errorResponse,
  eventFrame,
  followToEnd,
  headerOf,
  makeEvents,
  pageBody,
  recordsFrame,
  recordsOf,
  snapshotFrame,
  sse,
} from "./mock-service.js";

const LOG = makeEvents(200);
const RETRY = "retry: 1000\n\n";

/** @param {number} start @param {number} stop */
function live(start, stop) {
  return LOG.slice(start, stop).map(eventFrame).join("");
}

/** @param {(url: URL, init: RequestInit) => Response | Promise<Response>} handler */
function fetchOf(handler) {
  /** @type {{url: URL, headers: Headers, method: string, body: unknown}[]} */
  const seen = [];
  /** @type {typeof globalThis.fetch} */
  const fetch = async (input, init = {}) => {
    const url = new URL(String(input));
    seen.push({ url, headers: new Headers(init.headers), method: init.method ?? "GET", body: init.body });
    return handler(url, init);
  };
  return { fetch, seen };
}

/** @param {string} body */
function json(body, status = 200) {
  return new Response(body, { status, headers: { "content-type": "application/json" } });
}

/** @template T @param {AsyncIterable<T>} iterable @param {T[]} [into] */
async function drain(iterable, into = []) {
  for await (const item of iterable) into.push(item);
  return into;
}

describe("page", () => {
  test("sends its parameters, the credentials and a child's address", async () => {
    const { fetch, seen } = fetchOf(() => json(pageBody(LOG.slice(20, 60))));
    const client = new HistoryClient("http://test/", { token: "t0k", principal: "ann", fetch, maxMessages: 7 });
    const page = await client.page("{{s}}", { child: "c@d:e", through: 59, maxBytes: 1000 });
    const { url, headers } = seen[0];
    assert.equal(
      url.pathname + url.search,
      "/v1/sessions/%7B%7Bs%7D%7D/subagents/c%40d%3Ae/page?through=59&maxMessages=7&maxBytes=1000",
    );
    assert.equal(headers.get("authorization"), "Bearer t0k");
    assert.equal(headers.get("x-principal"), "ann");
    assert.deepEqual(page.events(), LOG.slice(20, 60));
    assert.deepEqual([page.fromSeq, page.toSeq, page.hasMore], [20, 60, true]);
  });

  test("sends no credentials when none are set", async () => {
    const { fetch, seen } = fetchOf(() => json(pageBody(LOG.slice(0, 10))));
    await new HistoryClient("http://test", { fetch }).page("s");
    assert.equal(seen[0].headers.get("authorization"), null);
    assert.equal(seen[0].headers.get("x-principal"), null);
    assert.equal(seen[0].url.search, "");
  });

  const ERRORS = [
    ["404", errorResponse(404, "session_not_found", "no such"), "session_not_found", "no such"],
    ["403", errorResponse(403, "subagent_child", "read it as a child"), "subagent_child", "read it as a child"],
    ["502 html", new Response("<html>bad gateway</html>", { status: 502, statusText: "Bad Gateway" }), "http_502", "Bad Gateway"],
    ["400 odd body", json('{"error":"flat"}', 400), "http_400", "error"],
  ];
  for (const [name, response, code, message] of ERRORS) {
    test(`a non-2xx answer is a ServiceError with its status, code and body: ${name}`, async () => {
      const client = new HistoryClient("http://test", { fetch: async () => /** @type {Response} */ (response).clone() });
      const error = await client.page("s").catch((caught) => caught);
      assert.ok(error instanceof ServiceError);
      assert.deepEqual([error.status, error.code, error.message], [/** @type {Response} */ (response).status, code, message]);
      if (name === "404") assert.deepEqual(error.body, { error: { code, message } });
      if (name === "502 html") assert.equal(error.body, "<html>bad gateway</html>");
    });
  }

  test("a connection failure is a TransportError that names its cause, after one more try", async () => {
    let calls = 0;
    const fetch = async () => {
      calls += 1;
      throw new TypeError("fetch failed", { cause: new Error("connect ECONNREFUSED 127.0.0.1:9") });
    };
    await assert.rejects(new HistoryClient("http://test", { fetch }).page("s"), (error) => {
      assert.ok(error instanceof TransportError);
      assert.match(error.message, /fetch failed: connect ECONNREFUSED/);
      return true;
    });
    assert.equal(calls, 2);
  });

  test("a request that fails before any answer is sent once more, as a stale keep-alive connection needs", async () => {
    let calls = 0;
    const fetch = async () => {
      calls += 1;
      if (calls === 1) throw new TypeError("fetch failed", { cause: new Error("other side closed") });
      return json(pageBody(LOG.slice(0, 10)));
    };
    const page = await new HistoryClient("http://test", { fetch }).page("s");
    assert.deepEqual(page.events(), LOG.slice(0, 10));
    assert.equal(calls, 2);
  });

  test("a request that never answers times out as a TransportError", async () => {
    /** @type {typeof globalThis.fetch} */
    const fetch = (_, init) =>
      new Promise((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal?.reason)));
    const client = new HistoryClient("http://test", { fetch, timeoutMs: 20 });
    await assert.rejects(client.page("s"), (error) => error instanceof TransportError && /timed out/.test(error.message));
  });

  test("the caller's abort is the caller's AbortError, not a TransportError", async () => {
    /** @type {typeof globalThis.fetch} */
    const fetch = (_, init) =>
      new Promise((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal?.reason)));
    const controller = new AbortController();
    const pending = new HistoryClient("http://test", { fetch }).page("s", { signal: controller.signal });
    controller.abort();
    await assert.rejects(pending, (error) => error instanceof Error && error.name === "AbortError");
  });
});

/** A row of LOG[20:60] loses a member while dt still claims it: only the row's own validation can catch it. */
function brokenRowBody() {
  const records = recordsOf(LOG.slice(20, 60));
  records[0].chunks.data.texts.pop();
  return pageBody([], { records, fromSeq: 20, toSeq: 60 });
}

const BROKEN_PAGES = {
  "not at its cursor": [pageBody(LOG.slice(20, 59)), PageContinuityError, /requested cursor/],
  overlap: [
    pageBody(LOG.slice(20, 60), { records: [...recordsOf(LOG.slice(20, 40)), ...recordsOf(LOG.slice(39, 60))] }),
    PageContinuityError,
    /overlaps the previous record/,
  ],
  gap: [
    pageBody(LOG.slice(20, 60), { records: [...recordsOf(LOG.slice(20, 40)), ...recordsOf(LOG.slice(41, 60))] }),
    PageContinuityError,
    /leaves a gap/,
  ],
  "wrong toSeq": [pageBody(LOG.slice(20, 60), { toSeq: 61 }), PageContinuityError, /toSeq 61/],
  "hasMore mismatch": [pageBody(LOG.slice(20, 60), { hasMore: false }), PageContinuityError, /hasMore is false/],
  inverted: [pageBody([], { fromSeq: 61, toSeq: 60 }), PageContinuityError, /inverted page range/],
  "malformed row": [brokenRowBody(), RowFormatError, /dt has/],
  "not JSON": ['{"records":[', InvalidJsonError, /invalid JSON/],
};

describe("a page that breaks the contract", () => {
  for (const [name, [body, Error, message]] of Object.entries(BROKEN_PAGES)) {
    test(`is refused before any event: ${name}`, async () => {
      const client = new HistoryClient("http://test", { fetch: async () => json(/** @type {string} */ (body)) });
      const check = (/** @type {unknown} */ error) => {
        assert.ok(error instanceof /** @type {any} */ (Error), String(error));
        assert.ok(error instanceof CodecError);
        assert.match(/** @type {Error} */ (error).message, /** @type {RegExp} */ (message));
        return true;
      };
      await assert.rejects(client.page("s", { through: 59 }), check);
      /** @type {unknown[]} */
      const received = [];
      await assert.rejects(drain(client.iterHistory("s", { after: 19, through: 59 }), received), check);
      assert.deepEqual(received, []);
    });
  }

  test("anywhere in the walk back means iterHistory yields nothing at all", async () => {
    const service = new MockService(LOG.slice(0, 60));
    const records = [...recordsOf(LOG.slice(20, 25)), ...recordsOf(LOG.slice(26, 30))];
    service.pageOverrides.set("29", pageBody([], { records, fromSeq: 20, toSeq: 30 }));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    /** @type {unknown[]} */
    const received = [];
    await assert.rejects(drain(client.iterHistory("s"), received), PageContinuityError);
    assert.deepEqual(received, []);
    assert.deepEqual(
      service.pages.map(({ url }) => url.searchParams.get("through")),
      [null, "49", "39", "29"],
    );
  });

  test("an empty page after seq 0 is refused rather than walked forever", async () => {
    const service = new MockService(LOG.slice(0, 60));
    service.pageOverrides.set("49", pageBody([], { fromSeq: 50, toSeq: 50 }));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    await assert.rejects(drain(client.iterHistory("s")), PageContinuityError);
  });
});

describe("iterHistory", () => {
  test("joins pages backwards from the head and yields every event oldest first", async () => {
    const service = new MockService(LOG.slice(0, 65));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    assert.deepEqual(await drain(client.iterHistory("s")), LOG.slice(0, 65));
    assert.deepEqual(
      service.pages.map(({ url }) => url.searchParams.get("through")),
      [null, "54", "44", "34", "24", "14", "4"],
    );
  });

  test("stops at after and starts at through", async () => {
    const service = new MockService(LOG.slice(0, 65));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    assert.deepEqual(await drain(client.iterHistory("s", { after: 25 })), LOG.slice(26, 65));
    assert.deepEqual(await drain(client.iterHistory("s", { through: 44 })), LOG.slice(0, 45));
    assert.deepEqual(await drain(client.iterHistory("s", { after: 30, through: 44 })), LOG.slice(31, 45));
    const before = service.pages.length;
    assert.deepEqual(await drain(client.iterHistory("s", { after: 44, through: 44 })), []);
    assert.equal(service.pages.length, before);
  });

  test("an empty session yields nothing", async () => {
    const client = new HistoryClient("http://test", { fetch: async () => json(pageBody([])) });
    assert.deepEqual(await drain(client.iterHistory("s")), []);
  });

  test("reads a child through its parent's address", async () => {
    const service = new MockService(LOG.slice(0, 15));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    assert.deepEqual(await drain(client.iterHistory("p", { child: "p.child-1" })), LOG.slice(0, 15));
    assert.ok(service.pages.every(({ url }) => url.pathname === "/v1/sessions/p/subagents/p.child-1/page"));
  });
});

describe("ids outside the rule", () => {
  for (const [session, child] of [["a/b", undefined], ["s", "c d"], ["..", undefined], ["", undefined]]) {
    test(`are refused before any request: ${JSON.stringify([session, child])}`, async () => {
      const service = new MockService(LOG);
      const client = new HistoryClient("http://test", { fetch: service.fetch });
      await assert.rejects(client.page(/** @type {string} */ (session), { child }), SessionIdError);
      await assert.rejects(drain(client.iterHistory(/** @type {string} */ (session), { child })), SessionIdError);
      await assert.rejects(drain(client.follow(/** @type {string} */ (session), { child })), SessionIdError);
      assert.deepEqual([service.pages.length, service.follows.length], [0, 0]);
    });
  }
});

describe("follow", () => {
  test("a fresh open delivers the snapshot, then live events, with the credentials", async () => {
    const service = new MockService(LOG, [RETRY + snapshotFrame(LOG.slice(40, 100), 99) + live(100, 120)]);
    const clientOptions = { token: "t0k", principal: "ann" };
    assert.deepEqual(await collect(service, { limit: 80, clientOptions }), LOG.slice(40, 120));
    const { url, headers } = service.follows[0];
    assert.equal(url.pathname, "/v1/sessions/s/follow");
    assert.equal(headers.get("last-event-id"), null);
    assert.equal(headers.get("accept"), "text/event-stream");
    assert.equal(headers.get("authorization"), "Bearer t0k");
    assert.equal(headers.get("x-principal"), "ann");
  });

  test("a dropped stream resumes with Last-Event-ID and loses nothing", async () => {
    const streams = [new Broken(snapshotFrame(LOG.slice(0, 50), 49), live(50, 60)), new Broken(live(60, 75)), live(75, 90)];
    const service = new MockService(LOG, streams);
    assert.deepEqual(await collect(service, { limit: 90 }), LOG.slice(0, 90));
    assert.deepEqual(
      service.follows.map(({ headers }) => headers.get("last-event-id")),
      [null, `${INCARNATION}:59`, `${INCARNATION}:74`],
    );
  });

  test("a stream split at every byte still decodes exactly", async () => {
    const body = snapshotFrame(LOG.slice(0, 30), 29) + live(30, 40);
    const service = new MockService(LOG, [new Broken(...body)]);
    assert.deepEqual(await collect(service, { limit: 40 }), LOG.slice(0, 40));
  });

  test("complete duplicates are dropped", async () => {
    const body = snapshotFrame(LOG.slice(0, 20), 19) + live(15, 20) + live(20, 25) + live(22, 25) + live(25, 30);
    assert.deepEqual(await collect(new MockService(LOG, [body]), { limit: 30 }), LOG.slice(0, 30));
  });

  test("a live row that partly overlaps delivered events fails before any of it is delivered", async () => {
    const records = packChunkRuns(LOG.slice(1, 24));
    const row = records[records.length - 1];
    assert.equal(row.type, "text-chunks");
    const body = snapshotFrame(LOG.slice(0, 20), 19) + sse("event", encodeRecord({ chunks: row }), 23) + live(24, 30);
    /** @type {unknown[]} */
    const received = [];
    await assert.rejects(collect(new MockService(LOG, [body]), { limit: 100 }, /** @type {any} */ (received)), (error) => {
      assert.ok(error instanceof StreamOverlapError);
      assert.match(error.message, /partially overlapping/);
      return true;
    });
    assert.deepEqual(received, LOG.slice(0, 20));
  });

  test("a live row that continues the cursor is expanded exactly", async () => {
    const [row] = packChunkRuns(LOG.slice(20, 24));
    const body = snapshotFrame(LOG.slice(0, 20), 19) + sse("event", encodeRecord({ chunks: row }), 23) + live(24, 30);
    assert.deepEqual(await collect(new MockService(LOG, [body]), { limit: 30 }), LOG.slice(0, 30));
  });

  test("a resume behind the delivered cursor fails", async () => {
    const streams = [new Broken(snapshotFrame(LOG.slice(0, 50), 49), live(50, 60)), snapshotFrame(LOG.slice(0, 55), 54)];
    await assert.rejects(collect(new MockService(LOG, streams), { limit: 1000 }), (error) => {
      assert.ok(error instanceof ResumeBehindError);
      assert.match(error.message, /behind the last applied entry/);
      return true;
    });
  });

  test("a resumed snapshot ahead of the cursor delivers only the new suffix", async () => {
    const streams = [new Broken(snapshotFrame(LOG.slice(0, 50), 49)), snapshotFrame(LOG.slice(40, 70), 69) + live(70, 75)];
    assert.deepEqual(await collect(new MockService(LOG, streams), { limit: 75 }), LOG.slice(0, 75));
  });

  test("a gap in live events is repaired from pages", async () => {
    const service = new MockService(LOG, [snapshotFrame(LOG.slice(0, 20), 19) + live(20, 25) + live(61, 70)]);
    assert.deepEqual(await collect(service, { limit: 70 }), LOG.slice(0, 70));
    // Repair pages hold 10 events each here, so the client joined several, through 60.
    assert.deepEqual(
      service.pages.map(({ url }) => url.searchParams.get("through")),
      ["60", "50", "40", "30"],
    );
  });

  test("a gap between a resumed snapshot and the cursor is repaired", async () => {
    const streams = [new Broken(snapshotFrame(LOG.slice(0, 20), 19)), snapshotFrame(LOG.slice(45, 60), 59)];
    assert.deepEqual(await collect(new MockService(LOG, streams), { limit: 60 }), LOG.slice(0, 60));
  });

  test("a broken repair page fails before any repaired event", async () => {
    const service = new MockService(LOG, [snapshotFrame(LOG.slice(0, 20), 19) + live(35, 40)]);
    service.pageOverrides.set("34", pageBody(LOG.slice(25, 34), { toSeq: 35 }));
    /** @type {unknown[]} */
    const received = [];
    await assert.rejects(collect(service, { limit: 100 }, /** @type {any} */ (received)), PageContinuityError);
    assert.deepEqual(received, LOG.slice(0, 20));
  });

  test("starting after a seq gets exactly the suffix", async () => {
    const service = new MockService(LOG, [live(120, 150)]);
    assert.deepEqual(await collect(service, { limit: 30, after: 119 }), LOG.slice(120, 150));
    assert.equal(service.follows[0].headers.get("last-event-id"), "119");
  });

  test("cursor_ahead is a CursorAheadError", async () => {
    const body = RETRY + sse("error", '{"code":"cursor_ahead","headSeq":10}');
    await assert.rejects(collect(new MockService(LOG, [body]), { limit: 5, after: 50 }), (error) => {
      assert.ok(error instanceof CursorAheadError);
      assert.deepEqual([error.after, error.headSeq], [50, 10]);
      return true;
    });
  });

  test("a failure frame after the opening is resumed like a cut", async () => {
    const failed = RETRY + snapshotFrame(LOG.slice(0, 50), 49) + live(50, 60) + sse("error", '{"code":"store_unavailable"}');
    const service = new MockService(LOG, [failed, live(60, 80)]);
    assert.deepEqual(await collect(service, { limit: 80 }), LOG.slice(0, 80));
    assert.deepEqual(
      service.follows.map((request) => request.headers.get("last-event-id")),
      [null, `${INCARNATION}:59`],
    );
  });

  test("a client error status is raised at once", async () => {
    const service = new MockService(LOG, [errorResponse(404, "session_not_found", "no session 's'")]);
    await assert.rejects(collect(service, { limit: 5 }), (error) => {
      assert.ok(error instanceof ServiceError);
      assert.deepEqual([error.status, error.code], [404, "session_not_found"]);
      return true;
    });
    assert.equal(service.follows.length, 1);
  });

  test("unavailable is retried, and then gives up with a TransportError", async () => {
    const service = new MockService(LOG, [errorResponse(503, "unavailable", "draining"), snapshotFrame(LOG.slice(0, 10), 9) + live(10, 12)]);
    assert.deepEqual(await collect(service, { limit: 12 }), LOG.slice(0, 12));
    await assert.rejects(collect(new MockService(LOG), { limit: 5 }), (error) => {
      assert.ok(error instanceof TransportError);
      assert.match(error.message, /gave up after attempt 4 failed: 503 gone: no more streams/);
      return true;
    });
  });

  test("onConnection hears each attempt, each open and each retried failure with its delay", async () => {
    const unavailable = () => errorResponse(503, "unavailable", "draining");
    const streams = [unavailable(), unavailable(), snapshotFrame(LOG.slice(0, 20), 19), new Broken(live(20, 30)), live(30, 40)];
    /** @type {any[]} */
    const changes = [];
    const backoff = new Backoff({ baseMs: 1, capMs: 1.5, maxRetries: 3, random: () => 1 });
    const onConnection = (/** @type {any} */ change) => changes.push(change);
    assert.deepEqual(await collect(new MockService(LOG, streams), { limit: 40, backoff, onConnection }), LOG.slice(0, 40));
    const summary = changes.map((change) =>
      change.type === "retrying"
        ? [change.opened ? "lost" : "failed", change.attempt, change.delayMs, change.reason]
        : [change.type, change.failures, change.after],
    );
    assert.deepEqual(summary, [
      ["connecting", 0, null],
      ["failed", 1, 1, "503 unavailable: draining"],
      ["connecting", 1, null],
      ["failed", 2, 1.5, "503 unavailable: draining"],
      ["connecting", 2, null],
      ["connected", 2, null],
      ["lost", 1, 1, "the stream ended"],
      ["connecting", 1, 19],
      ["connected", 1, 19],
      ["lost", 1, 1, "terminated: other side closed"],
      ["connecting", 1, 29],
      ["connected", 1, 29],
    ]);
    assert.ok(changes.filter((change) => change.type === "retrying").every((change) => change.error instanceof Error));
  });

  test("the failure that exhausts the retries is raised, not reported", async () => {
    /** @type {any[]} */
    const changes = [];
    const onConnection = (/** @type {any} */ change) => changes.push(change);
    await assert.rejects(collect(new MockService(LOG), { limit: 5, onConnection }), /gave up after attempt 4 failed/);
    assert.deepEqual(
      changes.filter((change) => change.type === "retrying").map((change) => change.attempt),
      [1, 2, 3],
    );
  });

  test("a silent stream counts as dead after the read timeout and is resumed", async () => {
    const streams = [new Hang(snapshotFrame(LOG.slice(0, 10), 9), ": ping\n\n"), live(10, 20)];
    const service = new MockService(LOG, streams);
    /** @type {any[]} */
    const changes = [];
    const onConnection = (/** @type {any} */ change) => changes.push(change);
    const events = await collect(service, { limit: 20, onConnection, clientOptions: { followReadTimeoutMs: 500 } });
    assert.deepEqual(events, LOG.slice(0, 20));
    assert.deepEqual(
      changes.filter((change) => change.type === "retrying").map((change) => change.reason),
      ["no data for 0.5 s"],
    );
    assert.equal(service.follows[0].signal?.aborted, true);
  });

  test("an abort ends the iteration quietly and closes the stream", async () => {
    const service = new MockService(LOG, [new Hang(snapshotFrame(LOG.slice(0, 10), 9))]);
    const controller = new AbortController();
    /** @type {unknown[]} */
    const received = [];
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    for await (const event of client.follow("s", { signal: controller.signal })) {
      received.push(event);
      if (received.length === 10) setTimeout(() => controller.abort(), 0);
    }
    assert.deepEqual(received, LOG.slice(0, 10));
    assert.equal(service.follows.length, 1);
    assert.equal(service.follows[0].signal?.aborted, true);
  });

  test("an abort during the backoff ends the iteration quietly", async () => {
    const controller = new AbortController();
    const backoff = new Backoff({ baseMs: 60_000, capMs: 60_000, maxRetries: 3 });
    const onConnection = (/** @type {any} */ change) => {
      if (change.type === "retrying") controller.abort();
    };
    const service = new MockService(LOG, [errorResponse(503, "unavailable", "draining")]);
    assert.deepEqual(await collect(service, { limit: 5, backoff, onConnection, signal: controller.signal }), []);
    assert.equal(service.follows.length, 1);
  });

  test("a malformed row in the snapshot is a codec error before any event", async () => {
    const records = `[{"event":${encodeRecord(LOG[0])}},{"chunks":{"type":"text-chunks","seq0":1,"time0":0}}]`;
    const data = `{"header":{"id":"s","createdAt":0},"cursor":1,"records":${records},"hasMore":false,"fromSeq":0,"toSeq":2}`;
    /** @type {unknown[]} */
    const received = [];
    await assert.rejects(collect(new MockService(LOG, [sse("snapshot", data, 1)]), { limit: 5 }, /** @type {any} */ (received)), CodecError);
    assert.deepEqual(received, []);
  });

  test("a snapshot that does not end at its cursor is a codec error before any event", async () => {
    const body = snapshotFrame(LOG.slice(0, 20), 19).replace('"cursor":19', '"cursor":20');
    await assert.rejects(collect(new MockService(LOG, [body]), { limit: 5 }), PageContinuityError);
  });

  test("an event before the snapshot is a ProtocolError", async () => {
    await assert.rejects(collect(new MockService(LOG, [live(0, 3)]), { limit: 5 }), (error) => {
      assert.ok(error instanceof ProtocolError);
      assert.match(error.message, /before its snapshot/);
      return true;
    });
  });

  test("a second snapshot on one stream is a ProtocolError", async () => {
    const body = snapshotFrame(LOG.slice(0, 10), 9) + snapshotFrame(LOG.slice(0, 12), 11);
    await assert.rejects(collect(new MockService(LOG, [body]), { limit: 50 }), /snapshot after its opening/);
  });

  test("a frame that is not JSON is a codec error", async () => {
    const body = snapshotFrame(LOG.slice(0, 10), 9) + sse("event", "{nope", 10);
    await assert.rejects(collect(new MockService(LOG, [body]), { limit: 50 }), InvalidJsonError);
  });

  test("an answer that is not an event stream is a ProtocolError", async () => {
    const html = new Response("<html>", { headers: { "content-type": "text/html" } });
    await assert.rejects(collect(new MockService(LOG, [html]), { limit: 5 }), (error) => {
      assert.ok(error instanceof ProtocolError);
      assert.match(error.message, /text\/html/);
      return true;
    });
  });

  test("comments, unknown events and the retry field change nothing delivered", async () => {
    const body = "retry: 5\n\n: ping\n\n" + snapshotFrame(LOG.slice(0, 10), 9) + sse("other", "{}") + ": ping\n\n" + live(10, 15);
    assert.deepEqual(await collect(new MockService(LOG, [body]), { limit: 15 }), LOG.slice(0, 15));
  });
});

describe("packed follow", () => {
  /** @param {number} start @param {number} stop @param {number | string} [id] */
  const packed = (start, stop, id) => recordsFrame(LOG.slice(start, stop), id);

  test("asks for records frames by default, fresh and resumed, and for event frames with packed: false", async () => {
    const service = new MockService(LOG, [new Broken(snapshotFrame(LOG.slice(0, 20), 19)), packed(20, 30)]);
    assert.deepEqual(await collect(service, { limit: 30 }), LOG.slice(0, 30));
    assert.deepEqual(
      service.follows.map(({ url, headers }) => [url.searchParams.get("packed"), headers.get("last-event-id")]),
      [["1", null], ["1", `${INCARNATION}:19`]],
    );
    const plain = new MockService(LOG, [snapshotFrame(LOG.slice(0, 20), 19) + live(20, 30)]);
    assert.deepEqual(await collect(plain, { limit: 30, packed: false }), LOG.slice(0, 30));
    assert.equal(plain.follows[0].url.searchParams.get("packed"), null);
  });

  test("a server that predates packed streams is followed in event frames", async () => {
    const old = errorResponse(400, "invalid_parameter", "unknown query parameter(s): packed");
    const service = new MockService(LOG, [old, snapshotFrame(LOG.slice(0, 20), 19) + live(20, 30)]);
    assert.deepEqual(await collect(service, { limit: 30 }), LOG.slice(0, 30));
    assert.deepEqual(service.follows.map(({ url }) => url.searchParams.get("packed")), ["1", null]);
  });

  test("records frames expand exactly, rows and events alike, a run split across frames too", async () => {
    // [20, 30) holds a text row and a reasoning row; [45, 47) two lone deltas; a run continues across 50 and 60.
    const frames = [packed(20, 30), packed(30, 45), packed(45, 47), packed(47, 50), packed(50, 60), packed(60, 90)];
    const service = new MockService(LOG, [snapshotFrame(LOG.slice(0, 20), 19) + frames.join("")]);
    assert.deepEqual(await collect(service, { limit: 90 }), LOG.slice(0, 90));
    assert.equal(service.pages.length, 0);
  });

  test("a dropped packed stream resumes after the last frame's id and loses nothing", async () => {
    const streams = [new Broken(snapshotFrame(LOG.slice(0, 20), 19), packed(20, 33)), packed(33, 50)];
    const service = new MockService(LOG, streams);
    assert.deepEqual(await collect(service, { limit: 50 }), LOG.slice(0, 50));
    assert.equal(service.follows[1].headers.get("last-event-id"), `${INCARNATION}:32`);
  });

  test("a frame that ends at or before the cursor is a duplicate and is dropped", async () => {
    const body = snapshotFrame(LOG.slice(0, 20), 19) + packed(10, 20) + packed(20, 25) + packed(22, 25) + packed(24, 25) + packed(25, 30);
    assert.deepEqual(await collect(new MockService(LOG, [body]), { limit: 30 }), LOG.slice(0, 30));
  });

  test("a frame that starts at or before the cursor and ends after it fails before any of it is delivered", async () => {
    for (const start of [15, 19]) {
      const body = snapshotFrame(LOG.slice(0, 20), 19) + packed(start, 25) + packed(25, 30);
      /** @type {unknown[]} */
      const received = [];
      await assert.rejects(collect(new MockService(LOG, [body]), { limit: 100 }, /** @type {any} */ (received)), (error) => {
        assert.ok(error instanceof StreamOverlapError);
        assert.equal(error.message, `the stream emitted a partially overlapping entry: [${start}, 24] after 19`);
        return true;
      });
      assert.deepEqual(received, LOG.slice(0, 20));
    }
  });

  test("a gap before a frame is repaired from pages, pinned to the incarnation, before the frame's events", async () => {
    const service = new MockService(LOG, [snapshotFrame(LOG.slice(0, 20), 19) + packed(20, 25) + packed(46, 70)]);
    assert.deepEqual(await collect(service, { limit: 70 }), LOG.slice(0, 70));
    assert.deepEqual(
      service.pages.map(({ url }) => [url.searchParams.get("through"), url.searchParams.get("incarnation")]),
      [["45", INCARNATION], ["35", INCARNATION], ["25", INCARNATION]],
    );
  });

  test("a frame whose id does not name its last seq is a ProtocolError before any of it is delivered", async () => {
    for (const id of [23, 25, "23"]) {
      const body = snapshotFrame(LOG.slice(0, 20), 19) + packed(20, 25, id);
      /** @type {unknown[]} */
      const received = [];
      await assert.rejects(collect(new MockService(LOG, [body]), { limit: 100 }, /** @type {any} */ (received)), (error) => {
        assert.ok(error instanceof ProtocolError);
        assert.equal(error.message, `a records frame of [20, 24] has the id of seq ${id}`);
        return true;
      });
      assert.deepEqual(received, LOG.slice(0, 20));
    }
  });

  test("a frame whose records do not tile its interval is a codec error before any of it is delivered", async () => {
    const frame = packed(20, 30).replace('"toSeq":30', '"toSeq":31');
    /** @type {unknown[]} */
    const received = [];
    const body = snapshotFrame(LOG.slice(0, 20), 19) + frame;
    await assert.rejects(collect(new MockService(LOG, [body]), { limit: 100 }, /** @type {any} */ (received)), PageContinuityError);
    assert.deepEqual(received, LOG.slice(0, 20));
  });

  test("records before the snapshot, or of another incarnation, are refused", async () => {
    await assert.rejects(collect(new MockService(LOG, [packed(0, 5)]), { limit: 5 }), /sent records before its snapshot/);
    const other = snapshotFrame(LOG.slice(0, 20), 19) + packed(20, 25, "a11ce0ff1ce2:24");
    await assert.rejects(collect(new MockService(LOG, [other]), { limit: 100 }), SessionDeletedError);
  });
});

test("the backoff grows to its cap, with jitter in the upper half, and follows the server's retry", () => {
  const backoff = new Backoff({ baseMs: 100, capMs: 1000, random: () => 1 });
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((n) => backoff.delay(n, null)), [100, 200, 400, 800, 1000, 1000]);
  assert.equal(new Backoff({ baseMs: 100, random: () => 0 }).delay(1, null), 50);
  const server = new Backoff({ random: () => 1 });
  assert.deepEqual([server.delay(1, null), server.delay(2, 250)], [1000, 500]);
  assert.equal(new Backoff().maxRetries, 10);
});

describe("sessions and session", () => {
  test("sessions passes the cursor back unchanged and returns the page", async () => {
    const body = '{"sessions":[{"id":"s1","createdAt":5,"headSeq":-1,"childCount":0}],"nextCursor":null,"total":1}';
    const { fetch, seen } = fetchOf(() => json(body));
    const client = new HistoryClient("http://h", { fetch });
    const page = await client.sessions({ limit: 50, cursor: "a/b+c=" });
    assert.deepEqual(page, JSON.parse(body));
    assert.equal(seen[0].url.pathname, "/v1/sessions");
    assert.equal(seen[0].url.searchParams.get("cursor"), "a/b+c=");
    assert.equal(seen[0].url.searchParams.get("limit"), "50");
  });

  test("sessions sends the filter and state as given, and returns the titles and the total", async () => {
    const body =
      '{"sessions":[{"id":"s1","createdAt":5,"headSeq":3,"childCount":0,"title":"Fix it","lastEventAt":9,' +
      '"usage":{"inputTokens":4,"outputTokens":2}}],"nextCursor":"n","total":7}';
    const { fetch, seen } = fetchOf(() => json(body));
    const client = new HistoryClient("http://h", { fetch });
    const page = await client.sessions({ limit: 1, state: "open", q: "50% & fix" });
    assert.deepEqual(page, JSON.parse(body));
    assert.equal(page.total, 7);
    assert.deepEqual([...seen[0].url.searchParams], [["limit", "1"], ["state", "open"], ["q", "50% & fix"]]);
    await client.subagents("p", { q: "x" });
    assert.deepEqual([...seen[1].url.searchParams], [["q", "x"]]);
  });

  test("subagents lists a session's children at its own id, paged like sessions", async () => {
    const body = '{"sessions":[{"id":"p.c","createdAt":5,"headSeq":2,"childCount":1}],"nextCursor":"x","total":3}';
    const { fetch, seen } = fetchOf(() => json(body));
    const client = new HistoryClient("http://h", { fetch });
    assert.deepEqual(await client.subagents("p", { limit: 2, cursor: "a/b" }), JSON.parse(body));
    assert.equal(seen[0].url.pathname, "/v1/sessions/p/subagents");
    assert.deepEqual([...seen[0].url.searchParams], [["limit", "2"], ["cursor", "a/b"]]);
    await assert.rejects(client.subagents("a/b"), SessionIdError);
    assert.equal(seen.length, 1);
  });

  test("session reads a child through its parent", async () => {
    const body = '{"header":{"type":"session","version":0,"id":"c","createdAt":1},"headSeq":3}';
    const { fetch, seen } = fetchOf(() => json(body));
    const client = new HistoryClient("http://h", { fetch });
    assert.deepEqual(await client.session("p", { child: "c" }), JSON.parse(body));
    assert.equal(seen[0].url.pathname, "/v1/sessions/p/subagents/c");
    await client.session("p");
    assert.equal(seen[1].url.pathname, "/v1/sessions/p");
  });
});

describe("search", () => {
  const HITS =
    '{"hits":[{"session":"p.c","seq":42,"kind":"tool_result","time":9,"snippet":["the ","rate limit"," is"],' +
    '"rank":3.5,"parent":"p","title":"Fix it"}],"nextCursor":"WzIwLCJhYiJd"}';

  test("search sends q and the filter as given, the cursor unchanged, and returns the hits", async () => {
    const { fetch, seen } = fetchOf(() => json(HITS));
    const client = new HistoryClient("http://h", { fetch, token: "t", principal: "ann" });
    const found = await client.search('"rate limit" 50% & retry*', { limit: 5, state: "closed", since: 0, until: 10 });
    assert.deepEqual(found, JSON.parse(HITS));
    assert.equal(seen[0].url.pathname, "/v1/search");
    assert.deepEqual(
      [...seen[0].url.searchParams],
      [["q", '"rate limit" 50% & retry*'], ["limit", "5"], ["state", "closed"], ["since", "0"], ["until", "10"]],
    );
    assert.equal(seen[0].headers.get("x-principal"), "ann");
    await client.search("x", { cursor: /** @type {string} */ (found.nextCursor) });
    assert.deepEqual([...seen[1].url.searchParams], [["q", "x"], ["cursor", "WzIwLCJhYiJd"]]);
  });

  test("a query the service refuses and a store without an index are ServiceErrors with their message", async () => {
    const refusals = [
      errorResponse(400, "invalid_parameter", "q holds no word to search for: give letters or digits"),
      errorResponse(501, "search_unsupported", "this store keeps no search index"),
    ];
    const client = new HistoryClient("http://h", { fetch: async () => /** @type {Response} */ (refusals.shift()) });
    for (const [status, code] of [[400, "invalid_parameter"], [501, "search_unsupported"]]) {
      const error = await client.search("!!").catch((caught) => caught);
      assert.ok(error instanceof ServiceError, String(error));
      assert.deepEqual([error.status, error.code], [status, code]);
      assert.match(error.message, status === 400 ? /no word to search for/ : /no search index/);
    }
  });

  test("search stops when its signal aborts", async () => {
    const stop = new AbortController();
    /** @type {typeof globalThis.fetch} */
    const fetch = (_input, init) =>
      new Promise((_resolve, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal?.reason)));
    const pending = new HistoryClient("http://h", { fetch }).search("x", { signal: stop.signal });
    stop.abort(new Error("typed again"));
    await assert.rejects(pending, /typed again/);
  });
});

describe("createSession and append", () => {
  /** @param {number} status @param {unknown} body */
  const answer = (status, body) => json(JSON.stringify(body), status);

  test("createSession posts the header's canonical bytes with the credentials and returns the answer", async () => {
    const { fetch, seen } = fetchOf(() => answer(201, { id: "s", headSeq: -1, incarnation: INCARNATION }));
    const client = new HistoryClient("http://test/", { token: "t0k", principal: "ann", fetch });
    const created = await client.createSession({ meta: { k: [1] }, createdAt: 5, id: "s", cwd: "/w" });
    assert.deepEqual(created, { id: "s", headSeq: -1, incarnation: INCARNATION });
    const [{ url, headers, method, body }] = seen;
    assert.deepEqual([method, url.pathname, url.search], ["POST", "/v1/sessions", ""]);
    assert.equal(body, '{"type":"session","version":0,"id":"s","createdAt":5,"cwd":"/w","meta":{"k":[1]}}');
    assert.equal(headers.get("content-type"), "application/json");
    assert.equal(headers.get("accept"), "application/json");
    assert.equal(headers.get("authorization"), "Bearer t0k");
    assert.equal(headers.get("x-principal"), "ann");
  });

  test("append posts the batch's canonical bytes to the session's own address", async () => {
    const { fetch, seen } = fetchOf(() => answer(201, { firstSeq: 0, headSeq: 39 }));
    const client = new HistoryClient("http://test", { fetch });
    const out = { data: { ok: true }, time: 1, seq: 40, type: "tool/result", surfaceOp: { end: 2, op: "replace", start: 1 } };
    assert.deepEqual(await client.append("c@d:e", [...LOG.slice(0, 40), out]), { firstSeq: 0, headSeq: 39 });
    const [{ url, method, body, headers }] = seen;
    assert.deepEqual([method, url.pathname], ["POST", "/v1/sessions/c%40d%3Ae/events"]);
    assert.equal(headers.get("content-type"), "application/json");
    const last = '{"type":"tool/result","seq":40,"time":1,"data":{"ok":true},"surfaceOp":{"op":"replace","start":1,"end":2}}';
    assert.equal(body, `{"events":[${LOG.slice(0, 40).map(encodeRecord).join(",")},${last}]}`);
  });

  test("append keeps the number spellings of events read exactly", async () => {
    const { fetch, seen } = fetchOf(() => answer(201, { firstSeq: 0, headSeq: 0 }));
    const text = '{"type":"note","seq":0,"time":0,"data":{"x":3.0,"big":12345678901234567890,"-0":-0.0}}';
    await new HistoryClient("http://test", { fetch }).append("s", [parseJsonExact(text)]);
    assert.equal(seen[0].body, `{"events":[${text}]}`);
  });

  test("an append whose connection fails before any answer is sent again, whole, and may answer idempotent", async () => {
    /** @type {unknown[]} */
    const bodies = [];
    const fetch = async (/** @type {unknown} */ _, /** @type {RequestInit} */ init) => {
      bodies.push(init.body);
      if (bodies.length === 1) throw new TypeError("fetch failed", { cause: new Error("other side closed") });
      return answer(200, { firstSeq: 0, headSeq: 1, idempotent: true });
    };
    const appended = await new HistoryClient("http://test", { fetch }).append("s", LOG.slice(0, 2));
    assert.deepEqual(appended, { firstSeq: 0, headSeq: 1, idempotent: true });
    assert.equal(bodies.length, 2);
    assert.equal(bodies[1], bodies[0]);
  });

  test("an append that fails twice is a TransportError: the caller sends the same batch again", async () => {
    let calls = 0;
    const fetch = async () => {
      calls += 1;
      throw new TypeError("fetch failed", { cause: new Error("connect ECONNREFUSED 127.0.0.1:9") });
    };
    await assert.rejects(new HistoryClient("http://test", { fetch }).append("s", LOG.slice(0, 2)), (error) => {
      assert.ok(error instanceof TransportError);
      assert.match(error.message, /fetch failed: connect ECONNREFUSED/);
      return true;
    });
    assert.equal(calls, 2);
  });

  test("createSession is not sent again: a lost answer may have created the session", async () => {
    let calls = 0;
    const fetch = async () => {
      calls += 1;
      throw new TypeError("fetch failed", { cause: new Error("other side closed") });
    };
    const created = new HistoryClient("http://test", { fetch }).createSession({ id: "s", createdAt: 0 });
    await assert.rejects(created, TransportError);
    assert.equal(calls, 1);
  });

  test("an append that times out is a TransportError and is not sent again", async () => {
    let calls = 0;
    /** @type {typeof globalThis.fetch} */
    const fetch = (_, init) => {
      calls += 1;
      return new Promise((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal?.reason)));
    };
    const client = new HistoryClient("http://test", { fetch, timeoutMs: 20 });
    await assert.rejects(client.append("s", LOG.slice(0, 1)), (error) => {
      assert.ok(error instanceof TransportError);
      assert.equal(error.message, "POST /v1/sessions/s/events timed out after 20 ms");
      return true;
    });
    assert.equal(calls, 1);
  });

  const REFUSALS = [
    ["seq_conflict", 409, { error: { code: "seq_conflict", message: "expected 5", headSeq: 4 } }],
    ["session_exists", 409, { error: { code: "session_exists", message: "taken" } }],
    ["session_not_found", 404, { error: { code: "session_not_found", message: "no such" } }],
    ["batch_too_large", 413, { error: { code: "batch_too_large", message: "too many" } }],
    ["session_closed", 409, { error: { code: "session_closed", message: "the session is closed", headSeq: 6 } }],
  ];
  for (const [code, status, body] of REFUSALS) {
    test(`a refusal is a ServiceError with its status, code and body: ${code}`, async () => {
      const client = new HistoryClient("http://test", { fetch: async () => answer(status, body) });
      const write = code === "session_exists" ? client.createSession({ id: "s", createdAt: 0 }) : client.append("s", LOG.slice(5, 7));
      const error = await write.catch((caught) => caught);
      assert.ok(error instanceof ServiceError);
      assert.deepEqual([error.status, error.code, error.message, error.body], [status, code, body.error.message, body]);
    });
  }

  test("a 2xx answer that is not JSON is a ProtocolError", async () => {
    const fetch = async () => new Response("<html>ok</html>", { status: 201 });
    await assert.rejects(new HistoryClient("http://test", { fetch }).append("s", LOG.slice(0, 1)), (error) => {
      assert.ok(error instanceof ProtocolError);
      assert.match(error.message, /^\/v1\/sessions\/s\/events: the answer is not JSON/);
      return true;
    });
  });

  const REFUSED_HERE = [
    ["a session id outside the rule", (/** @type {HistoryClient} */ c) => c.append("..", LOG.slice(0, 1)), SessionIdError, /^session id '\.\.'/],
    ["an empty batch", (/** @type {HistoryClient} */ c) => c.append("s", []), RecordFormatError, /^events must not be empty$/],
    ["a batch that is not an array", (/** @type {any} */ c) => c.append("s", LOG[0]), RecordFormatError, /events must be an array/],
    [
      "an event of the wrong shape, by its index",
      (/** @type {HistoryClient} */ c) => c.append("s", [LOG[0], { ...LOG[1], time: "1" }]),
      EventValidationError,
      /^events\[1\]\.time: expected `int`, got `str`$/,
    ],
    [
      "an event with a field the protocol does not have",
      (/** @type {HistoryClient} */ c) => c.append("s", [{ ...LOG[0], sq: 1 }]),
      EventValidationError,
      /^events\[0\]: object contains unknown field `sq`$/,
    ],
    [
      "a header without createdAt",
      (/** @type {any} */ c) => c.createSession({ id: "s" }),
      EventValidationError,
      /^header: object missing required field `createdAt`$/,
    ],
    [
      "a header with closedAt, which only a close sets",
      (/** @type {any} */ c) => c.createSession({ id: "s", createdAt: 0, closedAt: 1 }),
      EventValidationError,
      /^header\.closedAt: set by closing the session/,
    ],
    [
      "a header with an incarnation, which only the service sets",
      (/** @type {any} */ c) => c.createSession({ id: "s", createdAt: 0, incarnation: "0af" }),
      EventValidationError,
      /^header\.incarnation: set by the service when it creates the session \(§2\.5\)/,
    ],
  ];
  for (const [name, write, Kind, message] of REFUSED_HERE) {
    test(`refused before any request: ${name}`, async () => {
      const { fetch, seen } = fetchOf(() => answer(201, {}));
      const client = new HistoryClient("http://test", { fetch });
      await assert.rejects(
        async () => /** @type {any} */ (write)(client),
        (/** @type {any} */ error) => {
          assert.ok(error instanceof /** @type {any} */ (Kind), String(error));
          assert.match(error.message, /** @type {RegExp} */ (message));
          return true;
        },
      );
      assert.equal(seen.length, 0);
    });
  }
});

describe("closing a session", () => {
  const CLOSED_AT = 1_700_000_009_000;

  test("closeSession posts no body to the session's own address, with the credentials, and returns the final head", async () => {
    const { fetch, seen } = fetchOf(() => json(`{"headSeq":41,"closedAt":${CLOSED_AT}}`));
    const client = new HistoryClient("http://test", { token: "t0k", principal: "ann", fetch });
    assert.deepEqual(await client.closeSession("c@d"), { headSeq: 41, closedAt: CLOSED_AT });
    const [{ url, headers, method, body }] = seen;
    assert.deepEqual([method, url.pathname, url.search, body], ["POST", "/v1/sessions/c%40d/close", "", undefined]);
    assert.equal(headers.get("content-type"), null);
    assert.equal(headers.get("accept"), "application/json");
    assert.equal(headers.get("authorization"), "Bearer t0k");
    assert.equal(headers.get("x-principal"), "ann");
    await assert.rejects(client.closeSession("a/b"), SessionIdError);
    assert.equal(seen.length, 1);
  });

  test("a close is idempotent: a repeat answers the first close's time, and the header carries it", async () => {
    const service = new MockService(LOG.slice(0, 30), [], { clock: CLOSED_AT });
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    assert.equal((await client.session("s")).header.closedAt, undefined);
    assert.deepEqual(await client.closeSession("s"), { headSeq: 29, closedAt: CLOSED_AT });
    service.clock = CLOSED_AT + 5000;
    assert.deepEqual(await client.closeSession("s"), { headSeq: 29, closedAt: CLOSED_AT });
    assert.deepEqual(await client.session("s"), { header: { type: "session", version: 0, id: "s", createdAt: 0, closedAt: CLOSED_AT, incarnation: INCARNATION }, headSeq: 29 });
    assert.equal((await client.session("p", { child: "s" })).header.closedAt, CLOSED_AT);
  });

  test("a close whose connection fails before any answer is sent once more, as it is idempotent", async () => {
    let calls = 0;
    const fetch = async () => {
      calls += 1;
      if (calls === 1) throw new TypeError("fetch failed", { cause: new Error("other side closed") });
      return json(`{"headSeq":-1,"closedAt":${CLOSED_AT}}`);
    };
    assert.deepEqual(await new HistoryClient("http://test", { fetch }).closeSession("s"), { headSeq: -1, closedAt: CLOSED_AT });
    assert.equal(calls, 2);
  });

  test("an append after the close is a ServiceError session_closed with the final head; an exact re-send still answers", async () => {
    const service = new MockService(LOG.slice(0, 30));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    await client.closeSession("s");
    const error = await client.append("s", LOG.slice(30, 32)).catch((caught) => caught);
    assert.ok(error instanceof ServiceError, String(error));
    assert.deepEqual([error.status, error.code, /** @type {any} */ (error.body).error.headSeq], [409, "session_closed", 29]);
    assert.deepEqual(await client.append("s", LOG.slice(20, 30)), { firstSeq: 20, headSeq: 29, idempotent: true });
    assert.equal(service.log.length, 30);
  });

  test("follow ends normally at the end frame, after every event, without reconnecting or waiting for the stream to close", async () => {
    const service = new MockService(LOG, [new Hang(snapshotFrame(LOG.slice(0, 10), 9), live(10, 15) + endFrame(14))]);
    const { events, ended, changes } = await followToEnd(service);
    assert.deepEqual(events, LOG.slice(0, 15));
    assert.deepEqual(ended, { type: "ended", code: "session_closed", headSeq: 14 });
    assert.deepEqual(changes.map((change) => change.type), ["connecting", "connected", "ended"]);
    assert.deepEqual(changes[2], ended);
    assert.equal(service.follows.length, 1);
    assert.equal(service.follows[0].signal?.aborted, true);
    assert.equal(service.pages.length, 0);
  });

  test("an end right after the snapshot ends the follow at once", async () => {
    const service = new MockService(LOG, [new Hang(snapshotFrame(LOG.slice(0, 10), 9, "s", CLOSED_AT) + endFrame(9))]);
    const { events, ended, changes } = await followToEnd(service);
    assert.deepEqual(events, LOG.slice(0, 10));
    assert.deepEqual(ended, { type: "ended", code: "session_closed", headSeq: 9 });
    assert.deepEqual(changes.map((change) => change.type), ["connecting", "connected", "ended"]);
    assert.equal(service.follows.length, 1);
  });

  test("an empty closed session ends after its empty snapshot", async () => {
    const service = new MockService([], [snapshotFrame([], -1, "s", CLOSED_AT) + endFrame(-1)]);
    assert.deepEqual(await followToEnd(service).then(({ events, ended }) => [events, ended?.headSeq]), [[], -1]);
  });

  test("an end on a resumed stream, after a break, ends the follow where the break left it", async () => {
    const service = new MockService(LOG, [new Broken(snapshotFrame(LOG.slice(0, 10), 9), live(10, 12)), live(12, 14) + endFrame(13)]);
    const { events, ended, changes } = await followToEnd(service);
    assert.deepEqual(events, LOG.slice(0, 14));
    assert.equal(ended?.headSeq, 13);
    assert.deepEqual(service.follows.map(({ headers }) => headers.get("last-event-id")), [null, `${INCARNATION}:11`]);
    assert.equal(changes.at(-1).type, "ended");
  });

  test("a new follow of a closed session gets its opening and the end at once, fresh or resumed", async () => {
    const fresh = new MockService(LOG.slice(0, 30), [], { closedAt: CLOSED_AT });
    const opened = await followToEnd(fresh);
    assert.deepEqual([opened.events, opened.ended?.headSeq], [LOG.slice(20, 30), 29]);
    const resumed = new MockService(LOG.slice(0, 30), [], { closedAt: CLOSED_AT });
    const after = await followToEnd(resumed, { after: 24 });
    assert.deepEqual([after.events, after.ended?.headSeq], [LOG.slice(25, 30), 29]);
    assert.equal(resumed.follows[0].headers.get("last-event-id"), "24");
    const done = new MockService(LOG.slice(0, 30), [], { closedAt: CLOSED_AT });
    assert.deepEqual(await followToEnd(done, { after: 29 }).then(({ events, ended }) => [events, ended?.headSeq]), [[], 29]);
    assert.deepEqual([fresh, resumed, done].map((service) => service.follows.length), [1, 1, 1]);
  });

  test("an end ahead of the delivered events is repaired from pages before the follow ends", async () => {
    const service = new MockService(LOG, [snapshotFrame(LOG.slice(0, 10), 9) + endFrame(14)]);
    const { events, ended } = await followToEnd(service);
    assert.deepEqual(events, LOG.slice(0, 15));
    assert.equal(ended?.headSeq, 14);
    assert.deepEqual(service.pages.map(({ url }) => url.searchParams.get("through")), ["14"]);
  });

  const BROKEN_ENDS = [
    ["an end before the snapshot", endFrame(3), ProtocolError, /ended before its snapshot/],
    ["an end behind the delivered events", snapshotFrame(LOG.slice(0, 10), 9) + endFrame(5), ProtocolError, /ended at seq 5, behind the delivered seq 9/],
    ["an end without its head", snapshotFrame(LOG.slice(0, 10), 9) + sse("end", '{"code":"session_closed"}'), ProtocolError, /malformed end frame/],
    ["an end that is not JSON", snapshotFrame(LOG.slice(0, 10), 9) + sse("end", "{nope"), InvalidJsonError, /^end: /],
  ];
  for (const [name, body, Kind, message] of BROKEN_ENDS) {
    test(`a broken end frame fails and is not retried: ${name}`, async () => {
      const service = new MockService(LOG, [/** @type {string} */ (body), snapshotFrame(LOG.slice(0, 10), 9)]);
      await assert.rejects(followToEnd(service), (/** @type {any} */ error) => {
        assert.ok(error instanceof /** @type {any} */ (Kind), String(error));
        assert.match(error.message, /** @type {RegExp} */ (message));
        return true;
      });
      assert.equal(service.follows.length, 1);
    });
  }
});

describe("incarnations", () => {
  const OTHER = "a11ce0ff1ce2";

  test("a page names its incarnation, from the Session-Incarnation header", async () => {
    const service = new MockService(LOG.slice(0, 30));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    const page = await client.page("s", { through: 29 });
    assert.equal(page.incarnation, INCARNATION);
    assert.equal(service.pages[0].url.searchParams.get("incarnation"), null);
    const old = await new HistoryClient("http://test", { fetch: async () => json(pageBody(LOG.slice(0, 10))) }).page("s");
    assert.equal(old.incarnation, null, "a server before incarnations names none");
  });

  test("a page pinned to an incarnation sends it, and a 404 for it is a SessionDeletedError", async () => {
    const service = new MockService(LOG.slice(0, 30));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    const pinned = await client.page("s", { through: 19, incarnation: INCARNATION });
    assert.deepEqual(pinned.events(), LOG.slice(10, 20));
    assert.equal(service.pages[0].url.search, `?through=19&incarnation=${INCARNATION}`);
    service.recreate(OTHER);
    const error = await client.page("s", { through: 19, incarnation: INCARNATION }).catch((caught) => caught);
    assert.ok(error instanceof SessionDeletedError, String(error));
    assert.ok(error instanceof ClientError);
    assert.deepEqual([error.session, error.incarnation, error.message], ["s", INCARNATION, `session s (incarnation ${INCARNATION}) was deleted`]);
    assert.ok(error.cause instanceof ServiceError && error.cause.status === 404);
    // Unpinned, the same address reads whichever incarnation holds the id now.
    assert.equal((await client.page("s")).incarnation, OTHER);
    // A child read through its parent is named by its own id.
    const child = await client.page("p", { child: "c", incarnation: INCARNATION }).catch((caught) => caught);
    assert.ok(child instanceof SessionDeletedError && child.session === "c");
  });

  test("an unpinned 404 stays a ServiceError: nothing says which session was meant", async () => {
    const service = new MockService(LOG.slice(0, 30));
    service.deleted = true;
    const error = await new HistoryClient("http://test", { fetch: service.fetch }).page("s").catch((caught) => caught);
    assert.ok(error instanceof ServiceError && !(error instanceof SessionDeletedError));
    assert.deepEqual([error.status, error.code], [404, "session_not_found"]);
  });

  test("a pinned page whose header names another incarnation is a SessionDeletedError", async () => {
    const fetch = async () =>
      new Response(pageBody(LOG.slice(0, 10)), { headers: { "content-type": "application/json", "session-incarnation": OTHER } });
    const error = await new HistoryClient("http://test", { fetch }).page("s", { incarnation: INCARNATION }).catch((caught) => caught);
    assert.ok(error instanceof SessionDeletedError, String(error));
  });

  test("iterHistory names the first page's incarnation on every later page", async () => {
    const service = new MockService(LOG.slice(0, 35));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    assert.deepEqual(await drain(client.iterHistory("s")), LOG.slice(0, 35));
    assert.deepEqual(
      service.pages.map(({ url }) => [url.searchParams.get("through"), url.searchParams.get("incarnation")]),
      [[null, null], ["24", INCARNATION], ["14", INCARNATION], ["4", INCARNATION]],
    );
    await drain(client.iterHistory("s", { incarnation: INCARNATION, through: 9 }));
    assert.equal(service.pages.at(-1)?.url.searchParams.get("incarnation"), INCARNATION);
  });

  test("a delete and re-create during iterHistory is a SessionDeletedError before any event", async () => {
    const service = new MockService(LOG.slice(0, 35));
    /** @type {typeof globalThis.fetch} */
    const fetch = async (input, init) => {
      const answer = await service.fetch(input, init);
      if (service.pages.length === 2) service.recreate(OTHER);
      return answer;
    };
    /** @type {unknown[]} */
    const received = [];
    await assert.rejects(drain(new HistoryClient("http://test", { fetch }).iterHistory("s"), received), SessionDeletedError);
    assert.deepEqual(received, []);
  });

  test("a follow resumes with Last-Event-ID <incarnation>:<seq>, from the ids of its frames", async () => {
    const streams = [new Broken(snapshotFrame(LOG.slice(0, 20), 19), live(20, 25)), live(25, 30)];
    const service = new MockService(LOG, streams);
    assert.deepEqual(await collect(service, { limit: 30 }), LOG.slice(0, 30));
    assert.deepEqual(service.follows.map(({ headers }) => headers.get("last-event-id")), [null, `${INCARNATION}:24`]);
    assert.ok(service.follows.every(({ url }) => url.searchParams.get("incarnation") === null));
  });

  test("a follow given an incarnation names it from the first request: in Last-Event-ID, or in the query of a fresh open", async () => {
    const resumed = new MockService(LOG, [live(120, 130)]);
    const clientOptions = { fetch: resumed.fetch, backoff: new Backoff({ baseMs: 1, capMs: 2, maxRetries: 3 }) };
    const events = [];
    for await (const event of new HistoryClient("http://test", clientOptions).follow("s", { after: 119, incarnation: INCARNATION })) {
      events.push(event);
      if (events.length === 10) break;
    }
    assert.deepEqual(events, LOG.slice(120, 130));
    assert.equal(resumed.follows[0].headers.get("last-event-id"), `${INCARNATION}:119`);
    const fresh = new MockService(LOG, [snapshotFrame(LOG.slice(0, 10), 9)]);
    const client = new HistoryClient("http://test", { fetch: fresh.fetch });
    for await (const event of client.follow("s", { incarnation: INCARNATION })) if (event.seq === 9) break;
    assert.equal(fresh.follows[0].url.searchParams.get("incarnation"), INCARNATION);
    assert.equal(fresh.follows[0].headers.get("last-event-id"), null);
  });

  test("a stream from a server before incarnations, with bare ids, still resumes with the bare seq", async () => {
    const header = '{"type":"session","version":0,"id":"s","createdAt":0}';
    const snapshot = sse("snapshot", `{"header":${header},"cursor":19,${pageBody(LOG.slice(0, 20)).slice(1)}`, "19");
    const bare = (/** @type {number} */ a, /** @type {number} */ b) =>
      LOG.slice(a, b).map((event) => sse("event", encodeRecord(event), String(event.seq))).join("");
    const service = new MockService(LOG, [new Broken(snapshot, bare(20, 25)), bare(25, 30)]);
    assert.deepEqual(await collect(service, { limit: 30 }), LOG.slice(0, 30));
    assert.deepEqual(service.follows.map(({ headers }) => headers.get("last-event-id")), [null, "24"]);
  });

  test("session_deleted ends the follow with a SessionDeletedError, and it does not reconnect", async () => {
    const body = snapshotFrame(LOG.slice(0, 20), 19) + live(20, 25) + deletedFrame();
    const service = new MockService(LOG, [new Hang(body), live(25, 30)]);
    /** @type {any[]} */
    const changes = [];
    /** @type {unknown[]} */
    const received = [];
    const onConnection = (/** @type {any} */ change) => changes.push(change);
    await assert.rejects(collect(service, { limit: 100, onConnection }, /** @type {any} */ (received)), (error) => {
      assert.ok(error instanceof SessionDeletedError, String(error));
      assert.ok(error instanceof ClientError);
      assert.deepEqual([error.session, error.incarnation], ["s", INCARNATION]);
      return true;
    });
    assert.deepEqual(received, LOG.slice(0, 25));
    assert.equal(service.follows.length, 1);
    assert.equal(service.follows[0].signal?.aborted, true);
    assert.deepEqual(changes.map((change) => change.type), ["connecting", "connected"]);
  });

  test("session_deleted right at the opening, before any id, still ends the follow", async () => {
    const service = new MockService(LOG, [RETRY + deletedFrame(), snapshotFrame(LOG.slice(0, 10), 9)]);
    await assert.rejects(collect(service, { limit: 5 }), (error) => error instanceof SessionDeletedError && error.incarnation === null);
    assert.equal(service.follows.length, 1);
  });

  test("a reconnect that finds the incarnation gone (404) is a SessionDeletedError, and the follow stops there", async () => {
    const service = new MockService(LOG, [new Broken(snapshotFrame(LOG.slice(0, 20), 19), live(20, 25)), live(25, 30)]);
    // Deleted and created again while the stream was down, its notice never heard.
    const onConnection = (/** @type {any} */ change) => {
      if (change.type === "retrying") service.recreate(OTHER);
    };
    /** @type {unknown[]} */
    const received = [];
    await assert.rejects(collect(service, { limit: 100, onConnection }, /** @type {any} */ (received)), (error) => {
      assert.ok(error instanceof SessionDeletedError, String(error));
      assert.equal(error.incarnation, INCARNATION);
      assert.ok(error.cause instanceof ServiceError && error.cause.code === "session_not_found");
      return true;
    });
    assert.deepEqual(received, LOG.slice(0, 25));
    assert.deepEqual(service.follows.map(({ headers }) => headers.get("last-event-id")), [null, `${INCARNATION}:24`]);
    // The deleted session on its own: a 404 of a named incarnation ends it the same way.
    const deleted = new MockService(LOG, [new Broken(snapshotFrame(LOG.slice(0, 10), 9))]);
    const ends = (/** @type {any} */ change) => {
      if (change.type === "retrying") deleted.deleted = true;
    };
    await assert.rejects(collect(deleted, { limit: 100, onConnection: ends }), SessionDeletedError);
    assert.equal(deleted.follows.length, 2);
  });

  test("a gap repair names the incarnation followed, and a 404 of it is a SessionDeletedError", async () => {
    const service = new MockService(LOG, [snapshotFrame(LOG.slice(0, 20), 19) + live(20, 25) + live(41, 45)]);
    assert.deepEqual(await collect(service, { limit: 45 }), LOG.slice(0, 45));
    assert.deepEqual(
      service.pages.map(({ url }) => [url.searchParams.get("through"), url.searchParams.get("incarnation")]),
      [["40", INCARNATION], ["30", INCARNATION]],
    );
    const gone = new MockService(LOG);
    gone.streams.push(() => {
      gone.recreate(OTHER);
      return new Response(snapshotFrame(LOG.slice(0, 20), 19) + live(30, 35), { headers: { "content-type": "text/event-stream" } });
    });
    /** @type {unknown[]} */
    const received = [];
    await assert.rejects(collect(gone, { limit: 100 }, /** @type {any} */ (received)), SessionDeletedError);
    assert.deepEqual(received, LOG.slice(0, 20));
    assert.equal(gone.follows.length, 1);
  });

  test("a frame of another incarnation than the one followed is a SessionDeletedError", async () => {
    const other = sse("event", encodeRecord(LOG[20]), `${OTHER}:20`);
    const service = new MockService(LOG, [snapshotFrame(LOG.slice(0, 20), 19) + other, live(20, 30)]);
    /** @type {unknown[]} */
    const received = [];
    await assert.rejects(collect(service, { limit: 100 }, /** @type {any} */ (received)), (error) => {
      assert.ok(error instanceof SessionDeletedError, String(error));
      assert.equal(error.incarnation, INCARNATION);
      return true;
    });
    assert.deepEqual(received, LOG.slice(0, 20));
    assert.equal(service.follows.length, 1);
  });

  const BROKEN_IDS = [
    [
      "a snapshot whose header names another incarnation than its id",
      snapshotFrame(LOG.slice(0, 10), 9).replace(`"incarnation":"${INCARNATION}"`, `"incarnation":"${OTHER}"`),
      /the snapshot's header is of incarnation a11ce0ff1ce2, its id names 5d0c1e9a7b22/,
    ],
    ["an id that is not <incarnation>:<seq>", snapshotFrame(LOG.slice(0, 10), 9) + sse("event", encodeRecord(LOG[10]), "X:10"), /live event: malformed id "X:10"/],
    ["a snapshot id that is not one", sse("snapshot", `{"header":${headerOf()},"cursor":9,${pageBody(LOG.slice(0, 10)).slice(1)}`, "nine"), /snapshot: malformed id/],
  ];
  for (const [name, body, message] of BROKEN_IDS) {
    test(`a frame id that breaks §5.1 is a ProtocolError: ${name}`, async () => {
      const service = new MockService(LOG, [/** @type {string} */ (body), live(10, 20)]);
      await assert.rejects(collect(service, { limit: 100 }), (/** @type {any} */ error) => {
        assert.ok(error instanceof ProtocolError, String(error));
        assert.match(error.message, /** @type {RegExp} */ (message));
        return true;
      });
      assert.equal(service.follows.length, 1);
    });
  }
});

describe("deleting a session", () => {
  test("deleteSession sends DELETE to the session's own address, with the credentials and no body, and answers nothing", async () => {
    const { fetch, seen } = fetchOf(() => new Response(null, { status: 204 }));
    const client = new HistoryClient("http://test", { token: "t0k", principal: "ann", fetch });
    assert.equal(await client.deleteSession("c@d"), undefined);
    const [{ url, headers, method, body }] = seen;
    assert.deepEqual([method, url.pathname, url.search, body], ["DELETE", "/v1/sessions/c%40d", "", undefined]);
    assert.equal(headers.get("content-type"), null);
    assert.equal(headers.get("authorization"), "Bearer t0k");
    assert.equal(headers.get("x-principal"), "ann");
    await assert.rejects(client.deleteSession("a/b"), SessionIdError);
    assert.equal(seen.length, 1);
  });

  test("an unknown session is a ServiceError 404 session_not_found", async () => {
    const service = new MockService(LOG.slice(0, 10));
    const client = new HistoryClient("http://test", { fetch: service.fetch });
    await client.deleteSession("s");
    const error = await client.deleteSession("s").catch((caught) => caught);
    assert.ok(error instanceof ServiceError && !(error instanceof SessionDeletedError), String(error));
    assert.deepEqual([error.status, error.code], [404, "session_not_found"]);
    assert.deepEqual(service.writes.map(({ url }) => url.pathname), ["/v1/sessions/s", "/v1/sessions/s"]);
  });

  test("a delete whose connection fails is a TransportError and is not sent again: it may have happened", async () => {
    let calls = 0;
    const fetch = async () => {
      calls += 1;
      throw new TypeError("fetch failed", { cause: new Error("other side closed") });
    };
    await assert.rejects(new HistoryClient("http://test", { fetch }).deleteSession("s"), TransportError);
    assert.equal(calls, 1);
  });
});

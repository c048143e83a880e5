// The client against a real `history-service serve` on 127.0.0.1: exact history for every
// seeder scenario, children through their parents, writes and their refusals, close and
// delete, token auth, and follow across a SIGKILL.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { ServiceError, SessionDeletedError } from "../src/client-errors.js";
import { HistoryClient } from "../src/client.js";
import { encodeRecord, parseJsonExact } from "../src/codec.js";
import {
  SKIP,
  ServiceProcess,
  exportSession,
  freePort,
  scenarioRequests,
  seederScenarios,
} from "./live-service.js";

/** @template T @param {AsyncIterable<T>} iterable */
async function drain(iterable) {
  /** @type {T[]} */
  const items = [];
  for await (const item of iterable) items.push(item);
  return items;
}

/** @param {AsyncIterable<{seq: number}>} stream @param {number} last */
async function until(stream, last) {
  /** @type {any[]} */
  const items = [];
  for await (const item of stream) {
    items.push(item);
    if (item.seq === last) break;
  }
  return items;
}

/**
 * Events equal in the service's canonical encoding, byte for byte, event by event.
 *
 * @param {import("../src/codec.js").Event[]} actual
 * @param {import("../src/codec.js").Event[]} expected
 * @param {string} where
 */
function assertSameBytes(actual, expected, where) {
  assert.equal(actual.length, expected.length, where);
  for (let i = 0; i < actual.length; i++) {
    const [a, b] = [encodeRecord(actual[i]), encodeRecord(expected[i])];
    if (a !== b) assert.equal(a, b, `${where}: event ${i}`);
  }
}

/** A small seeded generator, so every run appends the same batches. */
function rand(seed) {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A fresh incarnation is 12 hex digits (docs/protocol.md §2.5).
const FRESH = /^[0-9a-f]{12}$/;

/** A create's answer (§6.1): the id, head -1 and a fresh incarnation, which it returns. @param {any} created @param {string} id */
function assertCreated(created, id) {
  assert.deepEqual(Object.keys(created), ["id", "headSeq", "incarnation"]);
  assert.deepEqual([created.id, created.headSeq], [id, -1]);
  assert.match(created.incarnation, FRESH);
  return /** @type {string} */ (created.incarnation);
}

// Each test skips by itself, so a run without the service counts every skipped test.
const LIVE = { skip: SKIP };

describe("the client against a real history-service", () => {
  /** @type {string} */
  let dir;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "history-js-live-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  describe("seeded, with --auth none", () => {
    /** @type {ServiceProcess} */
    let server;
    /** @type {string} */
    let store;
    before(async () => {
      if (SKIP) return;
      store = `sqlite:///${join(dir, "seeded.db")}`;
      server = new ServiceProcess(store, { port: await freePort() });
      await server.start();
    });
    after(() => server?.stop());

    const requests = scenarioRequests();

    test("every scenario the seeder knows is tested here", LIVE, () => {
      assert.deepEqual(Object.keys(requests).sort(), seederScenarios());
    });

    for (const [name, request] of Object.entries(requests)) {
      test(`iterHistory returns exactly the stored events: ${name}`, LIVE, async () => {
        const seeded = await server.post("/v1/test-only/seed", request);
        assert.equal(seeded.status, 201, JSON.stringify(seeded.body));
        const client = new HistoryClient(server.url, { maxMessages: 4 });
        const exact = new HistoryClient(server.url, { maxMessages: 4, exact: true });
        for (const { id, headSeq } of seeded.body.sessions) {
          const stored = await exportSession(store, id);
          assert.equal(stored.events.length, headSeq + 1);
          const child = stored.header.origin === "subagent" ? id : undefined;
          const session = child === undefined ? id : /** @type {string} */ (stored.header.parentSession);
          assert.deepStrictEqual(await drain(client.iterHistory(session, { child })), stored.events, id);
          const exactEvents = await drain(exact.iterHistory(session, { child }));
          assertSameBytes(exactEvents, stored.events, id);
          const middle = Math.floor(headSeq / 2);
          const suffix = await drain(client.iterHistory(session, { child, after: middle }));
          assert.deepStrictEqual(suffix, stored.events.slice(middle + 1), id);
        }
      });
    }

    test("a child is read through its own parent, and refused anywhere else", LIVE, async () => {
      const seeded = await server.post("/v1/test-only/seed", { scenario: "subagent", seed: 9, sessionId: "kids" });
      assert.equal(seeded.status, 201, JSON.stringify(seeded.body));
      const client = new HistoryClient(server.url, { maxMessages: 2 });
      const grandchild = await exportSession(store, "kids.child-1.grandchild");
      assert.deepStrictEqual(
        await drain(client.iterHistory("kids.child-1", { child: "kids.child-1.grandchild" })),
        grandchild.events,
      );

      const child = await exportSession(store, "kids.child-2");
      const head = child.events.length - 1;
      const followed = await until(client.follow("kids", { child: "kids.child-2" }), head);
      assert.deepStrictEqual(followed, child.events.slice(followed[0].seq));

      await assert.rejects(client.page("kids.child-1"), (error) => {
        assert.ok(error instanceof ServiceError);
        assert.deepEqual([error.status, error.code], [403, "subagent_child"]);
        return true;
      });
      await assert.rejects(drain(client.iterHistory("kids", { child: "kids.child-1.grandchild" })), (error) => {
        assert.ok(error instanceof ServiceError);
        assert.deepEqual([error.status, error.code], [403, "not_a_direct_child"]);
        return true;
      });
    });
  });

  describe("writes, with --auth none", () => {
    /** @type {ServiceProcess} */
    let server;
    /** @type {string} */
    let store;
    /** @type {HistoryClient} */
    let client;
    before(async () => {
      if (SKIP) return;
      store = `sqlite:///${join(dir, "writes.db")}`;
      server = new ServiceProcess(store, { port: await freePort() });
      await server.start();
      client = new HistoryClient(server.url, { maxMessages: 3 });
    });
    after(() => server?.stop());

    /** @param {number} status @param {string} code */
    const refused = (status, code) => (/** @type {unknown} */ error) => {
      assert.ok(error instanceof ServiceError, String(error));
      assert.deepEqual([error.status, error.code], [status, code]);
      return true;
    };

    /** Notes and text deltas, one spelt `3.0`, so a packed row and a number spelling reach the store. */
    function batchOf(/** @type {number} */ start, /** @type {number} */ count) {
      return Array.from({ length: count }, (_, i) => {
        const seq = start + i;
        if (seq % 7 === 0) return parseJsonExact(`{"type":"note","seq":${seq},"time":${seq},"data":{"seq":${seq},"x":3.0}}`);
        const chunk = { type: "text-delta", index: Math.floor(seq / 7), text: ` t${seq}` };
        return { type: "assistant/chunk", seq, time: seq, data: { turn: 1, step: 1, chunk } };
      });
    }

    test("createSession and append store exactly the events sent, read back byte for byte", LIVE, async () => {
      const incarnation = assertCreated(await client.createSession({ id: "w1", createdAt: 7, cwd: "/w" }), "w1");
      const events = batchOf(0, 30);
      assert.deepEqual(await client.append("w1", events.slice(0, 12)), { firstSeq: 0, headSeq: 11 });
      assert.deepEqual(await client.append("w1", events.slice(12)), { firstSeq: 12, headSeq: 29 });
      const stored = await exportSession(store, "w1");
      assert.deepEqual(stored.header, { type: "session", version: 0, id: "w1", createdAt: 7, cwd: "/w", incarnation });
      assert.equal((await client.session("w1")).header.incarnation, incarnation);
      assert.equal((await client.page("w1")).incarnation, incarnation);
      assertSameBytes(stored.events, events, "stored");
      assertSameBytes(await drain(new HistoryClient(server.url, { exact: true }).iterHistory("w1")), events, "read");
    });

    test("the same batch sent again, or re-cut at or below the head, is idempotent and stores nothing", LIVE, async () => {
      await client.createSession({ id: "w2", createdAt: 0 });
      const events = batchOf(0, 20);
      assert.deepEqual(await client.append("w2", events.slice(0, 10)), { firstSeq: 0, headSeq: 9 });
      assert.deepEqual(await client.append("w2", events.slice(10)), { firstSeq: 10, headSeq: 19 });
      assert.deepEqual(await client.append("w2", events.slice(10)), { firstSeq: 10, headSeq: 19, idempotent: true });
      assert.deepEqual(await client.append("w2", events.slice(5, 15)), { firstSeq: 5, headSeq: 19, idempotent: true });
      assertSameBytes((await exportSession(store, "w2")).events, events, "stored");
    });

    test("a batch that does not continue the head, or differs from what is stored, is a seq_conflict with the head", LIVE, async () => {
      await client.createSession({ id: "w3", createdAt: 0 });
      const events = batchOf(0, 10);
      await client.append("w3", events);
      for (const batch of [batchOf(11, 3), batchOf(10, 2).map((event) => ({ ...event, seq: event.seq - 2 }))]) {
        await assert.rejects(client.append("w3", batch), (error) => {
          refused(409, "seq_conflict")(error);
          assert.equal(/** @type {any} */ (error).body.error.headSeq, 9);
          return true;
        });
      }
      assertSameBytes((await exportSession(store, "w3")).events, events, "stored");
    });

    test("the service's other refusals of a write are ServiceErrors with its codes", LIVE, async () => {
      await client.createSession({ id: "w4", createdAt: 0 });
      await assert.rejects(client.createSession({ id: "w4", createdAt: 0 }), refused(409, "session_exists"));
      await assert.rejects(client.createSession({ id: "w/4", createdAt: 0 }), refused(422, "invalid_session_id"));
      await assert.rejects(client.append("w-none", batchOf(0, 1)), refused(404, "session_not_found"));
      const orphan = { id: "w4.orphan", createdAt: 0, parentSession: "w-none", origin: "subagent" };
      await assert.rejects(client.createSession(orphan), refused(422, "invalid_parent"));
    });

    test("a child is created under its parent, appended by its own id and read through the parent", LIVE, async () => {
      await client.createSession({ id: "w5", createdAt: 0 });
      const child = { id: "w5.child", createdAt: 1, parentSession: "w5", origin: "subagent" };
      assertCreated(await client.createSession(child), "w5.child");
      const events = batchOf(0, 9);
      assert.deepEqual(await client.append("w5.child", events), { firstSeq: 0, headSeq: 8 });
      assertSameBytes((await exportSession(store, "w5.child")).events, events, "stored");
      const exact = new HistoryClient(server.url, { exact: true });
      assertSameBytes(await drain(exact.iterHistory("w5", { child: "w5.child" })), events, "read");
      await assert.rejects(client.page("w5.child"), refused(403, "subagent_child"));
    });

    test("a close ends an open follow after its last event, refuses later appends, and ends a new follow at once", LIVE, async () => {
      await client.createSession({ id: "w6", createdAt: 0 });
      const events = batchOf(0, 20);
      await client.append("w6", events.slice(0, 9));
      // Exact, so the `3.0` spelling is followed as stored; pages the size of the whole session.
      const reader = new HistoryClient(server.url, { exact: true });
      /** @type {any[]} */
      const changes = [];
      const stream = reader.follow("w6", { onConnection: (change) => changes.push(change) });
      /** @type {any[]} */
      const received = [];
      while (received.length < 9) received.push((await stream.next()).value);
      await client.append("w6", events.slice(9));
      const closed = await client.closeSession("w6");
      assert.equal(closed.headSeq, 19);
      assert.ok(Number.isSafeInteger(closed.closedAt), String(closed.closedAt));
      let next = await stream.next();
      for (; !next.done; next = await stream.next()) received.push(next.value);
      assertSameBytes(received, events, "followed");
      assert.deepEqual(next.value, { type: "ended", code: "session_closed", headSeq: 19 });
      assert.deepEqual(changes.map((change) => change.type), ["connecting", "connected", "ended"]);

      assert.deepEqual(await client.closeSession("w6"), closed);
      assert.deepEqual((await client.session("w6")).header.closedAt, closed.closedAt);
      await assert.rejects(client.append("w6", batchOf(20, 1)), (error) => {
        refused(409, "session_closed")(error);
        assert.equal(/** @type {any} */ (error).body.error.headSeq, 19);
        return true;
      });
      assert.deepEqual(await client.append("w6", events.slice(9)), { firstSeq: 9, headSeq: 19, idempotent: true });
      const fresh = await drain(reader.follow("w6"));
      assert.ok(fresh.length > 0);
      assertSameBytes(fresh, events.slice(20 - fresh.length), "a new follow");
      assertSameBytes(await drain(reader.follow("w6", { after: 15 })), events.slice(16), "a resumed follow");
      assertSameBytes(await drain(reader.follow("w6", { after: 19 })), [], "a follow at the head");
    });

    test("a child is closed by its own id, and its parent stays open", LIVE, async () => {
      await client.createSession({ id: "w7", createdAt: 0 });
      await client.createSession({ id: "w7.child", createdAt: 1, parentSession: "w7", origin: "subagent" });
      await client.append("w7.child", batchOf(0, 3));
      const closed = await client.closeSession("w7.child");
      assert.equal(closed.headSeq, 2);
      assert.equal((await client.session("w7", { child: "w7.child" })).header.closedAt, closed.closedAt);
      assert.equal((await client.session("w7")).header.closedAt, undefined);
      assert.deepEqual(await client.append("w7", batchOf(0, 2)), { firstSeq: 0, headSeq: 1 });
      assert.equal((await drain(client.follow("w7", { child: "w7.child", after: 0 }))).length, 2);
    });

    test("a delete ends an open follow with SessionDeletedError, without a reconnect, and the id answers as unknown", LIVE, async () => {
      const incarnation = assertCreated(await client.createSession({ id: "d1", createdAt: 0 }), "d1");
      const events = batchOf(0, 12);
      await client.append("d1", events.slice(0, 6));
      /** @type {any[]} */
      const changes = [];
      const stream = new HistoryClient(server.url, { exact: true }).follow("d1", { onConnection: (change) => changes.push(change) });
      /** @type {any[]} */
      const received = [];
      while (received.length < 6) received.push((await stream.next()).value);
      await client.append("d1", events.slice(6));
      while (received.length < 12) received.push((await stream.next()).value);
      assertSameBytes(received, events, "followed");
      assert.equal(await client.deleteSession("d1"), undefined);
      await assert.rejects(stream.next(), (error) => {
        assert.ok(error instanceof SessionDeletedError, String(error));
        assert.deepEqual([error.session, error.incarnation], ["d1", incarnation]);
        return true;
      });
      assert.deepEqual(changes.map((change) => change.type), ["connecting", "connected"]);

      await assert.rejects(client.page("d1"), refused(404, "session_not_found"));
      await assert.rejects(client.session("d1"), refused(404, "session_not_found"));
      await assert.rejects(client.append("d1", batchOf(12, 1)), refused(404, "session_not_found"));
      await assert.rejects(client.closeSession("d1"), refused(404, "session_not_found"));
      await assert.rejects(client.deleteSession("d1"), refused(404, "session_not_found"));
      await assert.rejects(drain(client.follow("d1")), refused(404, "session_not_found"));
      const listed = await client.sessions({ limit: 1000 });
      assert.ok(!listed.sessions.some((session) => session.id === "d1"), JSON.stringify(listed));
    });

    test("a delete takes the subagent tree; a child is deleted by its own id, and its parent stays", LIVE, async () => {
      await client.createSession({ id: "d2", createdAt: 0 });
      await client.createSession({ id: "d2.a", createdAt: 1, parentSession: "d2", origin: "subagent" });
      await client.createSession({ id: "d2.a.x", createdAt: 2, parentSession: "d2.a", origin: "subagent" });
      await client.createSession({ id: "d2.b", createdAt: 3, parentSession: "d2", origin: "subagent" });
      await client.append("d2.a.x", batchOf(0, 3));
      const child = client.follow("d2.a", { child: "d2.a.x" });
      assert.equal((await child.next()).value?.seq, 0);
      await client.deleteSession("d2.a");
      await assert.rejects(drain(child), SessionDeletedError);
      await assert.rejects(client.session("d2", { child: "d2.a" }), refused(404, "session_not_found"));
      await assert.rejects(client.append("d2.a.x", batchOf(3, 1)), refused(404, "session_not_found"));
      assert.deepEqual((await client.subagents("d2")).sessions.map((entry) => entry.id), ["d2.b"]);
      await client.deleteSession("d2");
      await assert.rejects(client.session("d2"), refused(404, "session_not_found"));
      await assert.rejects(client.append("d2.b", batchOf(0, 1)), refused(404, "session_not_found"));
    });

    test("an id created again is a new incarnation: nothing of the old one reads it", LIVE, async () => {
      const old = assertCreated(await client.createSession({ id: "d3", createdAt: 0 }), "d3");
      const events = batchOf(0, 10);
      await client.append("d3", events);
      const page = await client.page("d3", { through: 9 });
      assert.equal(page.incarnation, old);
      await client.deleteSession("d3");
      const fresh = assertCreated(await client.createSession({ id: "d3", createdAt: 0 }), "d3");
      assert.notEqual(fresh, old);
      await client.append("d3", batchOf(0, 10));
      // Pinned to the old incarnation: deleted, whatever the id holds now.
      await assert.rejects(client.page("d3", { through: 9, incarnation: old }), SessionDeletedError);
      await assert.rejects(drain(client.iterHistory("d3", { incarnation: old })), SessionDeletedError);
      await assert.rejects(drain(client.follow("d3", { after: 4, incarnation: old })), (error) => {
        assert.ok(error instanceof SessionDeletedError, String(error));
        assert.equal(error.incarnation, old);
        return true;
      });
      await assert.rejects(drain(client.follow("d3", { incarnation: old })), SessionDeletedError);
      // Unpinned, or pinned to the new one, the address reads the new session.
      assert.equal((await client.page("d3")).incarnation, fresh);
      assert.equal((await client.page("d3", { through: 9, incarnation: fresh })).incarnation, fresh);
      assert.equal((await until(client.follow("d3", { after: 4, incarnation: fresh }), 9)).length, 5);
    });
  });

  test("with --auth token, the token and principal are sent on pages and follow", LIVE, async () => {
    const store = `sqlite:///${join(dir, "token.db")}`;
    const env = { HISTORY_SERVICE_TOKENS: "t0k-1,t0k-2" };
    const server = new ServiceProcess(store, { port: await freePort(), args: ["--auth", "token"], env });
    await server.start();
    try {
      const ann = { Authorization: "Bearer t0k-2", "X-Principal": "ann" };
      const request = { scenario: "multi-turn", seed: 7, turns: 3, sessionId: "ann-1" };
      const seeded = await server.post("/v1/test-only/seed", request, ann);
      assert.equal(seeded.status, 201, JSON.stringify(seeded.body));
      const stored = await exportSession(store, "ann-1");

      const client = new HistoryClient(server.url, { token: "t0k-2", principal: "ann", maxMessages: 3 });
      assert.deepStrictEqual(await drain(client.iterHistory("ann-1")), stored.events);
      const followed = await until(client.follow("ann-1"), stored.events.length - 1);
      assert.deepStrictEqual(followed, stored.events.slice(followed[0].seq));

      /** @param {number} status @param {string} code */
      const refused = (status, code) => (/** @type {unknown} */ error) => {
        assert.ok(error instanceof ServiceError);
        assert.deepEqual([error.status, error.code], [status, code]);
        return true;
      };
      await assert.rejects(new HistoryClient(server.url).page("ann-1"), refused(401, "unauthorized"));
      const wrong = new HistoryClient(server.url, { token: "nope", principal: "ann" });
      await assert.rejects(wrong.page("ann-1"), refused(401, "unauthorized"));
      const bob = new HistoryClient(server.url, { token: "t0k-1", principal: "bob" });
      await assert.rejects(bob.page("ann-1"), refused(404, "session_not_found"));
      await assert.rejects(drain(bob.follow("ann-1")), refused(404, "session_not_found"));

      // Writes carry them too: ann's session is hers, and to bob it does not exist.
      assertCreated(await client.createSession({ id: "ann-2", createdAt: 0 }), "ann-2");
      const note = { type: "note", seq: 0, time: 0, data: {} };
      await assert.rejects(bob.append("ann-2", [note]), refused(404, "session_not_found"));
      await assert.rejects(new HistoryClient(server.url).createSession({ id: "anon", createdAt: 0 }), refused(401, "unauthorized"));
      assert.deepEqual(await client.append("ann-2", [note]), { firstSeq: 0, headSeq: 0 });
      assert.deepStrictEqual(await drain(client.iterHistory("ann-2")), [note]);
    } finally {
      await server.stop();
    }
  });

  const TOTAL = 3000;

  /** Text deltas in runs of 500 (so they pack into rows), with a padded note now and then. */
  function liveEvents(next) {
    return Array.from({ length: TOTAL }, (_, seq) =>
      next() < 0.04
        ? { type: "note", seq, time: seq, data: { seq, pad: "é".repeat(Math.floor(next() * 200)) } }
        : {
            type: "assistant/chunk",
            seq,
            time: seq,
            data: { turn: 1, step: 1, chunk: { type: "text-delta", index: Math.floor(seq / 500), text: ` t${seq}` } },
          },
    );
  }

  test("follow delivers every seq exactly once, in order, across a SIGKILL and a restart", { ...LIVE, timeout: 120_000 }, async () => {
    const next = rand(5);
    const events = liveEvents(next);
    const store = `sqlite:///${join(dir, "follow.db")}`;
    const server = new ServiceProcess(store, { port: await freePort() });
    await server.start();
    const stop = new AbortController();
    try {
      assert.equal((await server.post("/v1/sessions", { id: "live", createdAt: 0 })).status, 201);

      /** @type {import("../src/client.js").ConnectionChange[]} */
      const changes = [];
      /** @type {any[]} */
      const received = [];
      const client = new HistoryClient(server.url, {
        backoff: { baseMs: 20, capMs: 250, maxRetries: 60 },
        followReadTimeoutMs: 10_000,
      });
      const follower = (async () => {
        const stream = client.follow("live", { signal: stop.signal, onConnection: (change) => changes.push(change) });
        for await (const event of stream) {
          received.push(event);
          if (event.seq === TOTAL - 1) break;
        }
      })();
      follower.catch(() => stop.abort());

      let killed = false;
      /** @type {Promise<void> | null} */
      let restarted = null;
      /** @type {unknown} */
      let restartError = null;
      let failedDuringRestart = 0;
      let start = 0;
      /** @type {any[]} */
      let batch = [];
      while (start < TOTAL) {
        if (!killed && start >= TOTAL / 3) {
          // Kill only while the follower holds a live stream that has delivered.
          while (received.length === 0 && !stop.signal.aborted) await sleep(10);
          await server.stop("SIGKILL");
          killed = true;
        }
        // A batch whose answer was lost is re-sent whole, never re-cut: it may already be stored.
        batch = batch.length ? batch : events.slice(start, start + 1 + Math.floor(next() * 100));
        let status;
        try {
          status = (await server.post("/v1/sessions/live/events", { events: batch })).status;
        } catch (error) {
          if (!killed || restartError) throw restartError ?? error;
          failedDuringRestart += 1;
          // The first append refused by the dead service brings it back, on the same port and store.
          restarted ??= server.start().catch((caught) => {
            restartError = caught;
          });
          await sleep(50);
          continue;
        }
        assert.ok(status === 200 || status === 201, `append answered ${status}`);
        start += batch.length;
        batch = [];
      }
      await restarted;
      await follower;

      assert.ok(killed && failedDuringRestart > 0);
      assert.equal(received.length, TOTAL);
      assert.deepStrictEqual(received, events);
      // The follower really lost its stream and resumed by itself.
      const lost = changes.findIndex((change) => change.type === "retrying" && change.opened);
      assert.ok(lost >= 0, JSON.stringify(changes));
      assert.ok(changes.slice(lost).some((change) => change.type === "connected" && change.failures >= 1));

      const suffix = await until(new HistoryClient(server.url).follow("live", { after: 1234 }), TOTAL - 1);
      assert.deepStrictEqual(suffix, events.slice(1235));
    } finally {
      stop.abort();
      await server.stop();
    }
  });
});

/**
 * `HistoryClient`: exact pages, exact history and exactly-once live follow over `fetch`,
 * for browsers and Node, and the writes: create a session, append a batch, close it, delete
 * it. The twin of history_client/client.py and the plans beside it (history.py, follow.py):
 * the same requests, the same error mapping, the same continuity rules. As in Python, this
 * module is the I/O shell; the follow rules (the reconnect backoff, the journal, the
 * stream's frames and errors) are in follow.js, the request plumbing in http.js.
 *
 * A client that reads one session in several requests (the pages of `iterHistory`, a
 * follow's reconnects and repairs) names the incarnation (docs/protocol.md §2.5) it learnt
 * from the first answer in the later ones, so a delete and re-create in between is a
 * `SessionDeletedError`, never the new session's events taken for the old one's.
 *
 * `follow` reads the event stream through `fetch` rather than `EventSource`, so it can send
 * `Authorization` and `X-Principal`, and so it decides itself when and from where to
 * reconnect.
 */

import { checkSessionId, encodeRecord, readPage, validateEvent, validateHeader } from "./codec.js";
import { EventValidationError, RecordFormatError } from "./errors.js";
import { ClientError, ProtocolError, ServiceError, SessionDeletedError, TransportError, describe } from "./client-errors.js";
import { Backoff, Disconnected, Frames, Journal } from "./follow.js";
import { INCARNATION_HEADER, isGone, linkedAbort, serviceError, sessionPath, sleep } from "./http.js";
import { eventId } from "./incarnation.js";

export { Backoff, DEFAULT_MAX_DELAY_MS, DEFAULT_MAX_RETRIES } from "./follow.js";

/** @typedef {import("./codec.js").Event} Event */
/** @typedef {import("./codec.js").SessionHeader} SessionHeader */
/**
 * A checked page, with the incarnation (§2.5) its `Session-Incarnation` header names (`null`
 * from a server before incarnations).
 *
 * @typedef {import("./codec.js").ReadPage & {incarnation: string | null}} Page
 */
/**
 * A session header as `createSession` takes it: `type` and `version` may be left out;
 * `closedAt` is the store's to set, when the session is closed, and `incarnation` the
 * service's, when it creates it.
 *
 * @typedef {Omit<SessionHeader, "type" | "version" | "closedAt" | "incarnation"> & {type?: "session", version?: 0}} NewSession
 */
/**
 * What a create answers (§6.1): the id, its head (-1: no event yet) and the new session's incarnation.
 *
 * @typedef {{id: string, headSeq: number, incarnation: string}} Created
 */
/**
 * One session of a listing (§12.1): its head (-1: no event yet), its direct subagent children, when it
 * closed and when it expires, and its synopsis: its title (its last `session/title`, else its first user
 * message), its last event's `time`, and the tokens its events report. Each optional key is left out
 * while the session has none.
 * @typedef {{
 *   id: string, createdAt: number, headSeq: number, childCount: number, closedAt?: number, expiresAt?: number,
 *   title?: string, lastEventAt?: number, usage?: {inputTokens: number, outputTokens: number},
 * }} ListedSession
 */
/**
 * A page of a listing (§12.1, §12.3): sessions newest first, the cursor of the next page (`null`: none),
 * and how many sessions the whole listing holds under its `state` and `q`.
 * @typedef {{sessions: ListedSession[], nextCursor: string | null, total: number}} SessionList
 */
/**
 * What narrows a listing (§12.1): only the `"open"` or the `"closed"` sessions, and only those whose id or
 * title holds `q`, in any case (1-200 characters). Pass the same with each `cursor`.
 * @typedef {{state?: "open" | "closed", q?: string}} ListFilter
 */
/**
 * What a search passage is (§14.2): a user message, assistant text, reasoning, a tool call or its
 * result, or a session's title.
 * @typedef {"user" | "assistant" | "reasoning" | "tool_call" | "tool_result" | "title"} SearchKind
 */
/**
 * A passage that matched a search (§14.1): its session, and that session's `parent` when it is a
 * subagent child (its pages are read through the parent); the seq of the passage's first event (a
 * `page` with `through: seq` holds it), its kind and that event's `time`; its `snippet`, whose strings
 * at even positions are plain text and at odd positions what matched; its `rank` (how many times the
 * query matched in the passage), and the session's `title` when it has one.
 * @typedef {{
 *   session: string, seq: number, kind: SearchKind, time: number, snippet: string[], rank: number,
 *   parent?: string, title?: string,
 * }} SearchHit
 */
/**
 * A page of a search (§14.1): hits the latest written first, and the cursor of the next page (`null`: none). It
 * holds no total: counting every match would cost as much as a page of each.
 * @typedef {{hits: SearchHit[], nextCursor: string | null}} SearchHits
 */
/**
 * What narrows a search (§14.1): only hits in `"open"` or `"closed"` sessions, and only passages whose
 * first event's `time` is in `[since, until)`, epoch ms. Pass the same with each `cursor`.
 * @typedef {{state?: "open" | "closed", since?: number, until?: number}} SearchFilter
 */
/**
 * What an append answers: the batch's first seq and the new head; `idempotent` when the
 * batch was already stored, so nothing was.
 *
 * @typedef {{firstSeq: number, headSeq: number, idempotent?: true}} Appended
 */
/**
 * What a close answers (§6.3): the session's final head (-1 when empty) and the time of its
 * first close, in ms since the epoch.
 *
 * @typedef {{headSeq: number, closedAt: number}} Closed
 */
/** @typedef {import("./sse.js").ServerSentEvent} ServerSentEvent */

/**
 * A follow connection is about to be opened: `after` is the `Last-Event-ID` it sends
 * (`null` for a fresh open, which starts with a snapshot), `failures` the failed attempts
 * in a row before it.
 *
 * @typedef {{type: "connecting", failures: number, after: number | null}} Connecting
 */
/**
 * The follow stream opened. `failures > 0` means it opened again after that many failed
 * attempts in a row (Python's `Reconnected`).
 *
 * @typedef {{type: "connected", failures: number, after: number | null}} Connected
 */
/**
 * A follow connection failed and is tried again after `delayMs` (Python's `Retrying`).
 * `attempt` counts the failures in a row since an event was last delivered, from 1;
 * `opened` says whether the stream had opened (a lost stream) or not (a failed connection).
 *
 * @typedef {{type: "retrying", attempt: number, delayMs: number, opened: boolean, error: Error, reason: string}} Retrying
 */
/**
 * The follow stream ended for good with the service's `end` frame (§5.1): `code` is
 * `"session_closed"`, the session was closed at `headSeq`, and every event through it was
 * delivered. Nothing follows: `follow` returns this, and does not reconnect.
 *
 * @typedef {{type: "ended", code: string, headSeq: number}} Ended
 */
/** @typedef {Connecting | Connected | Retrying | Ended} ConnectionChange */
/** @typedef {(change: ConnectionChange) => void} ConnectionHook */

export const DEFAULT_TIMEOUT_MS = 10_000;
// The most messages a page or a follow may ask for (`maxMessages`, docs/protocol.md §4.1): the
// service's route table declares it, and tests/clients_js/test_shared_rules.py holds this to it.
export const MAX_MESSAGES = 1000;
// A healthy stream carries a ping every 15 s; three missed pings mean the connection is dead.
export const FOLLOW_READ_TIMEOUT_MS = 45_000;

const RETRYABLE_STATUS = new Set([408, 425, 429, 500, 502, 503, 504]);

/**
 * The history service's client.
 *
 * Parameters:
 *   baseUrl: the service, e.g. `http://127.0.0.1:8000`; `""` for the page's own origin in a browser.
 *   token, principal: sent as `Authorization: Bearer <token>` and `X-Principal` when set.
 *   fetch: the `fetch` to use (default: the global one), e.g. a mock in tests.
 *   maxMessages, maxBytes: defaults for every page request.
 *   backoff: the reconnect policy of `follow`, a `Backoff` or its options.
 *   timeoutMs: the longest a page request may take (default 10 s).
 *   followReadTimeoutMs: how long a follow stream may stay silent before it reconnects (default 45 s).
 *   exact: parse bodies with the codec's `parseJsonExact`, which keeps number spellings
 *     (`1.0` against `1`, integers past 2^53) so events encode back byte for byte; slower.
 */
export class HistoryClient {
  /**
   * @param {string} [baseUrl]
   * @param {{
   *   token?: string,
   *   principal?: string,
   *   fetch?: typeof globalThis.fetch,
   *   maxMessages?: number,
   *   maxBytes?: number,
   *   backoff?: Backoff | ConstructorParameters<typeof Backoff>[0],
   *   timeoutMs?: number,
   *   followReadTimeoutMs?: number,
   *   exact?: boolean,
   * }} [options]
   */
  constructor(baseUrl = "", options = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    // Called as a plain function: a browser's fetch refuses to run with a client as `this`.
    this._fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    /** @type {Record<string, string>} */
    this._headers = {};
    if (options.token !== undefined) this._headers.Authorization = `Bearer ${options.token}`;
    if (options.principal !== undefined) this._headers["X-Principal"] = options.principal;
    this.maxMessages = options.maxMessages;
    this.maxBytes = options.maxBytes;
    this.backoff = options.backoff instanceof Backoff ? options.backoff : new Backoff(options.backoff ?? {});
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.followReadTimeoutMs = options.followReadTimeoutMs ?? FOLLOW_READ_TIMEOUT_MS;
    this.exact = options.exact ?? false;
  }

  /**
   * One validated page: its records cover exactly `[fromSeq, toSeq)` and it ends at the
   * cursor asked for, or the codec's error is raised before any event is returned. Its
   * `incarnation` is the one the service named (§4.2).
   *
   * `incarnation` pins the page to that incarnation of the session (§2.5): if the id is
   * gone, or holds another incarnation by now, the answer is a `SessionDeletedError`, not a
   * page of another session. A page with `through` and `incarnation` never changes, so the
   * service lets a browser cache it (§4.4).
   *
   * @param {string} sessionId
   * @param {{child?: string, through?: number, before?: number, maxMessages?: number, maxBytes?: number, incarnation?: string, signal?: AbortSignal}} [options]
   * @returns {Promise<Page>}
   */
  async page(sessionId, { child, through, before, maxMessages, maxBytes, incarnation, signal } = {}) {
    const path = sessionPath(sessionId, child, "page");
    const params = {
      through,
      before,
      maxMessages: maxMessages ?? this.maxMessages,
      maxBytes: maxBytes ?? this.maxBytes,
      incarnation,
    };
    const deleted = (/** @type {unknown} */ cause) => new SessionDeletedError(child ?? sessionId, incarnation ?? null, { cause });
    /** @type {{text: string, headers: Headers}} */
    let answer;
    try {
      answer = await this._request("GET", path, params, { headers: { Accept: "application/json" } }, signal, true);
    } catch (caught) {
      if (incarnation !== undefined && isGone(caught)) throw deleted(caught);
      throw caught;
    }
    const named = answer.headers.get(INCARNATION_HEADER);
    if (incarnation !== undefined && named !== null && named !== incarnation) throw deleted(undefined);
    const page = readPage(answer.text, { through, before, exact: this.exact });
    return Object.assign(page, { incarnation: named ?? incarnation ?? null });
  }

  /**
   * Create a session from its header (docs/protocol.md §6.1); answers `{id, headSeq: -1,
   * incarnation}`, the new session's incarnation (§2.5).
   *
   * A subagent child is created the same way, with `parentSession` naming a session the
   * caller owns and `origin: "subagent"`. The header is checked as the service checks it
   * (an `EventValidationError` before any request; `closedAt` and `incarnation` are refused
   * too, as only a close and the service set them); the service's refusals are a
   * `ServiceError` with `code` `session_exists` (even for the same header),
   * `invalid_header`, `invalid_session_id` or `invalid_parent`. A connection that fails
   * is a `TransportError` and is not retried: the session may have been created.
   *
   * @param {NewSession} header
   * @param {{signal?: AbortSignal}} [options]
   * @returns {Promise<Created>}
   */
  async createSession(header, { signal } = {}) {
    const checked = validateHeader(header);
    if (checked.closedAt !== undefined) {
      throw new EventValidationError("header.closedAt: set by closing the session (§6.3), never at create");
    }
    if (checked.incarnation !== undefined) {
      throw new EventValidationError("header.incarnation: set by the service when it creates the session (§2.5), never at create");
    }
    return this._post("/v1/sessions", encodeRecord(checked), signal, false);
  }

  /**
   * Append one atomic batch to a session, or to a subagent child by the child's own id (§6.2).
   *
   * The batch must continue the head: its first `seq` is `headSeq + 1` and the seqs run
   * without gaps. Delta `assistant/chunk` events are packed into chunk rows by the service.
   * Answers `{firstSeq, headSeq}`; the exact batch sent again is a no-op that answers
   * `idempotent: true` too, so a batch whose answer was lost can be sent again, whole. A
   * request that fails before any answer is sent once more here, for that reason.
   *
   * Each event is checked as the service checks it, before any request: an empty batch is
   * a `RecordFormatError`, a bad event an `EventValidationError` naming it
   * (`events[1].time: ...`), a bad id a `SessionIdError`. The service's refusals are a
   * `ServiceError` with `code` `seq_conflict` (its `body.error.headSeq` is the head to
   * continue from), `session_closed` (the session was closed, §6.3; `body.error.headSeq`
   * is its final head), `batch_too_large`, `body_too_large` or `session_not_found`.
   *
   * @param {string} sessionId
   * @param {readonly Event[]} events
   * @param {{signal?: AbortSignal}} [options]
   * @returns {Promise<Appended>}
   */
  async append(sessionId, events, { signal } = {}) {
    const path = sessionPath(sessionId, null, "events");
    if (!Array.isArray(events)) throw new RecordFormatError('expected {"events": [...]}: events must be an array');
    if (events.length === 0) throw new RecordFormatError("events must not be empty");
    const lines = events.map((event, i) => encodeRecord(validateEvent(event, `events[${i}]`)));
    return this._post(path, `{"events":[${lines.join(",")}]}`, signal, true);
  }

  /**
   * Close a session, or a subagent child by the child's own id (§6.3): it keeps its events
   * and takes no more. Answers `{headSeq, closedAt}`, the final head and the close's time.
   *
   * Idempotent: closing a closed session answers the same, with the first close's
   * `closedAt`, so a request that fails before any answer is sent once more. From then on
   * an append is a `ServiceError` with `code` `session_closed`, the header carries
   * `closedAt`, and every `follow` of it ends once it has delivered the last event.
   * Closing a parent does not close its children.
   *
   * @param {string} sessionId
   * @param {{signal?: AbortSignal}} [options]
   * @returns {Promise<Closed>}
   */
  async closeSession(sessionId, { signal } = {}) {
    return this._post(sessionPath(sessionId, null, "close"), null, signal, true);
  }

  /**
   * Delete a session and its whole subagent tree (§6.4), a child by its own id (its parent
   * stays). Resolves once the service answered 204: the delete is durable, every follower
   * of the tree ends with a `SessionDeletedError`, and the ids answer as unknown ones, until
   * one is created again as a new incarnation.
   *
   * An unknown id, or another principal's, is a `ServiceError` 404 `session_not_found`. A
   * connection that fails is a `TransportError` and is not retried: the delete may have
   * happened, and a repeat would then answer 404.
   *
   * @param {string} sessionId
   * @param {{signal?: AbortSignal}} [options]
   * @returns {Promise<void>}
   */
  async deleteSession(sessionId, { signal } = {}) {
    const path = sessionPath(sessionId, null, "").slice(0, -1);
    await this._request("DELETE", path, {}, { headers: { Accept: "application/json" } }, signal, false);
  }

  /**
   * One page of the caller's sessions, newest first (§12.1), with the listing's `total`; pass `nextCursor`
   * back as `cursor`, with the same `state` and `q`.
   *
   * @param {{limit?: number, cursor?: string, signal?: AbortSignal} & ListFilter} [options]
   * @returns {Promise<SessionList>}
   */
  async sessions({ limit, cursor, state, q, signal } = {}) {
    return JSON.parse(await this._get("/v1/sessions", { limit, cursor, state, q }, signal));
  }

  /**
   * One page of a session's direct subagent children, newest first (§12.3), named in its events or not,
   * filtered and totalled as `sessions` is. A child's own children are listed at the child's id.
   *
   * @param {string} sessionId
   * @param {{limit?: number, cursor?: string, signal?: AbortSignal} & ListFilter} [options]
   * @returns {Promise<SessionList>}
   */
  async subagents(sessionId, { limit, cursor, state, q, signal } = {}) {
    checkSessionId(sessionId);
    return JSON.parse(await this._get(`/v1/sessions/${sessionId}/subagents`, { limit, cursor, state, q }, signal));
  }

  /**
   * One page of the passages of the caller's sessions, children included, that match `q`, the latest written first
   * (§14.1). `q` holds words, `"quoted phrases"` and `prefix*` terms, all required, read as plain text;
   * `limit` is 1-100 (default 20). Pass `nextCursor` back as `cursor`, with the same `q` and filter.
   * A query the service cannot search (no letter or digit, too many terms) is a `ServiceError` 400
   * `invalid_parameter` whose message says why; a store that keeps no index (JSONL) answers 501
   * `search_unsupported`.
   *
   * @param {string} q
   * @param {{limit?: number, cursor?: string, signal?: AbortSignal} & SearchFilter} [options]
   * @returns {Promise<SearchHits>}
   */
  async search(q, { limit, cursor, state, since, until, signal } = {}) {
    return JSON.parse(await this._get("/v1/search", { q, limit, cursor, state, since, until }, signal));
  }

  /**
   * A session's header and head (§12.2), or a subagent child's, read through its parent.
   *
   * @param {string} sessionId
   * @param {{child?: string, signal?: AbortSignal}} [options]
   * @returns {Promise<{header: Record<string, any>, headSeq: number}>}
   */
  async session(sessionId, { child, signal } = {}) {
    const path = sessionPath(sessionId, child, "").slice(0, -1);
    return JSON.parse(await this._get(path, {}, signal));
  }

  /**
   * The exact events with `after < seq <= through` (default: to the head), in seq order.
   *
   * The page API cuts backwards from a cursor, so this walks back first, each page ending
   * exactly where the previous one began, and yields only once every page has passed
   * the codec's checks: a broken page raises before any event. Every page after the first
   * names the incarnation the first one had (or `incarnation`, from the start), so a delete
   * during the walk is a `SessionDeletedError` rather than a history spliced from two sessions.
   *
   * @param {string} sessionId
   * @param {{child?: string, after?: number, through?: number, incarnation?: string, signal?: AbortSignal}} [options]
   * @returns {AsyncGenerator<Event, void, undefined>}
   */
  async *iterHistory(sessionId, { child, after = -1, through, incarnation, signal } = {}) {
    sessionPath(sessionId, child, "page"); // a bad id fails even when there is nothing to fetch
    if (through !== undefined && through <= after) return;
    /** @type {Page[]} */
    const newer = [];
    /** @type {number | undefined} */
    let cursor = through;
    /** @type {Page} */
    let oldest;
    for (;;) {
      const page = await this.page(sessionId, { child, through: cursor, incarnation, signal });
      incarnation ??= page.incarnation ?? undefined;
      if (page.toSeq <= after + 1) return;
      if (page.fromSeq <= after + 1) {
        oldest = page;
        break;
      }
      newer.push(page);
      cursor = page.fromSeq - 1;
    }
    yield* oldest.events({ after });
    for (let i = newer.length - 1; i >= 0; i--) yield* newer[i].events();
  }

  /**
   * Every event after `after` (or from a fresh snapshot's tail page), exactly once, in
   * order, live.
   *
   * Reconnects with `Last-Event-ID` on any break, as `backoff` says; repairs gaps from
   * pages. It ends when the session is closed (§6.3), once every event up to its final
   * head is delivered: the stream's `end` frame is heard by `onConnection` as `ended` and
   * is the generator's return value, and nothing reconnects. It also ends when the caller
   * stops iterating or `signal` aborts (quietly: the iteration just ends, returning
   * `undefined`), or raises an error that retrying cannot fix. `onConnection` hears, in
   * order, each connection attempt (`connecting`), each stream that opens (`connected`),
   * each failure that will be retried (`retrying`) and the end (`ended`); the failure
   * that exhausts the retries is raised as `TransportError` instead.
   *
   * The follow learns the session's incarnation (§2.5) from its first frame (or takes
   * `incarnation`, e.g. a page's, to start from), resumes with `Last-Event-ID:
   * <incarnation>:<seq>` and repairs gaps from pages pinned to it. When the session is
   * deleted (§6.4) the follow raises `SessionDeletedError` and does not reconnect: the
   * stream said `session_deleted`, or, once the incarnation is known, a reconnect or a
   * repair page got 404 `session_not_found` (the answer for an incarnation that is gone).
   *
   * `packed` (the default) asks for the packed stream (§5.5): each write of the service
   * arrives as one `records` frame, its deltas as chunk rows, expanded to the same events.
   * `false` asks for one `event` frame per event, as a plain `EventSource` reads.
   *
   * @param {string} sessionId
   * @param {{child?: string, after?: number | null, incarnation?: string, maxMessages?: number, packed?: boolean, signal?: AbortSignal, onConnection?: ConnectionHook}} [options]
   * @returns {AsyncGenerator<Event, Ended | undefined, undefined>}
   */
  async *follow(sessionId, { child, after = null, incarnation, maxMessages, packed = true, signal, onConnection } = {}) {
    const path = sessionPath(sessionId, child, "follow");
    /** @type {{maxMessages: number | undefined, packed: 1 | undefined}} */
    const query = { maxMessages, packed: packed ? 1 : undefined };
    /** @type {Journal} */
    const journal = new Journal(after, {
      session: child ?? sessionId,
      incarnation: incarnation ?? null,
      exact: this.exact,
      fetchPage: (through) => this.page(sessionId, { child, through, incarnation: journal.incarnation ?? undefined, signal }),
    });
    let failures = 0;
    for (;;) {
      if (signal?.aborted) return;
      let opened = false;
      /** @type {Frames | null} */
      let stream = null;
      /** @type {Error} */
      let error;
      try {
        onConnection?.({ type: "connecting", failures, after: journal.cursor });
        stream = await this._openStream(path, journal.cursor, journal.incarnation, query, signal);
        opened = true;
        onConnection?.({ type: "connected", failures, after: journal.cursor });
        let first = true; // a snapshot may only open a stream; a resumed one needs none
        for (;;) {
          const frame = await stream.next();
          if (frame === null) throw new Disconnected("the stream ended");
          if (frame.retry !== null) journal.retryMs = frame.retry;
          /** @type {Event[]} */
          let events;
          if (frame.event === "snapshot") {
            if (!first) throw new ProtocolError("the stream sent a snapshot after its opening");
            events = await journal.open(frame.data, frame.id);
          } else if (frame.event === "event") {
            if (journal.cursor === null) throw new ProtocolError("the stream sent an event before its snapshot");
            events = await journal.live(frame.data, frame.id);
          } else if (frame.event === "records") {
            if (journal.cursor === null) throw new ProtocolError("the stream sent records before its snapshot");
            events = await journal.records(frame.data, frame.id);
          } else if (frame.event === "error") {
            throw journal.error(frame.data);
          } else if (frame.event === "end") {
            if (journal.cursor === null) throw new ProtocolError("the stream ended before its snapshot");
            const end = await journal.end(frame.data);
            for (const event of end.events) {
              if (signal?.aborted) return;
              yield event;
            }
            journal.delivered();
            /** @type {Ended} */
            const ended = { type: "ended", code: end.code, headSeq: end.headSeq };
            onConnection?.(ended);
            return ended;
          } else {
            continue;
          }
          for (const event of events) {
            if (signal?.aborted) return;
            yield event;
          }
          journal.delivered();
          first = false;
          failures = 0;
        }
      } catch (caught) {
        if (signal?.aborted) return;
        // A resume that names the incarnation followed finds it gone: the session was deleted (§5.2).
        if (journal.incarnation !== null && isGone(caught)) {
          throw new SessionDeletedError(journal.session, journal.incarnation, { cause: caught });
        }
        // A server that predates packed streams refuses the parameter: follow it in event frames.
        if (!opened && query.packed !== undefined && caught instanceof ServiceError && refusesPacked(caught)) {
          query.packed = undefined;
          continue;
        }
        if (caught instanceof ServiceError && RETRYABLE_STATUS.has(caught.status)) error = caught;
        else if (caught instanceof Disconnected || caught instanceof TransportError) error = caught;
        else throw caught;
      } finally {
        stream?.close();
      }
      failures += 1;
      const { maxRetries } = this.backoff;
      if (maxRetries !== null && failures > maxRetries) {
        throw new TransportError(`the follow stream gave up after attempt ${failures} failed: ${describe(error)}`, {
          cause: error,
        });
      }
      const delayMs = this.backoff.delay(failures, journal.retryMs);
      onConnection?.({ type: "retrying", attempt: failures, delayMs, opened, error, reason: describe(error) });
      await sleep(delayMs, signal);
    }
  }

  /**
   * @param {string} path
   * @param {Record<string, number | string | undefined>} params
   * @returns {string}
   */
  _url(path, params) {
    const query = Object.entries(params)
      .filter(([, value]) => value !== undefined && value !== null)
      .map(([name, value]) => `${name}=${encodeURIComponent(String(value))}`)
      .join("&");
    return `${this.baseUrl}${path}${query ? `?${query}` : ""}`;
  }

  /**
   * GET a JSON body as text; a non-2xx answer is a `ServiceError`, a failure to get one a `TransportError`.
   *
   * @param {string} path
   * @param {Record<string, number | string | undefined>} params
   * @param {AbortSignal | undefined} signal
   * @returns {Promise<string>}
   */
  async _get(path, params, signal) {
    // Node's fetch fails at once on a pooled keep-alive connection that the server closed
    // as the request went out. A GET is safe to send again, once, as browsers do.
    return (await this._request("GET", path, params, { headers: { Accept: "application/json" } }, signal, true)).text;
  }

  /**
   * POST a JSON body (`null`: none) and parse the JSON answer; errors as `_get`, and a
   * `ProtocolError` for an answer that is not JSON.
   *
   * @param {string} path
   * @param {string | null} body
   * @param {AbortSignal | undefined} signal
   * @param {boolean} resend whether a request that failed before any answer may be sent once more
   * @returns {Promise<any>}
   */
  async _post(path, body, signal, resend) {
    /** @type {Record<string, string>} */
    const headers = { Accept: "application/json" };
    if (body !== null) headers["Content-Type"] = "application/json";
    const init = body === null ? { headers } : { headers, body };
    const { text } = await this._request("POST", path, {}, init, signal, resend);
    try {
      return JSON.parse(text);
    } catch (caught) {
      throw new ProtocolError(`${path}: the answer is not JSON: ${describe(caught)}`, { cause: caught });
    }
  }

  /**
   * One request with the credentials, its body read as text, within `timeoutMs`; a non-2xx
   * answer is a `ServiceError`, a failure to get one a `TransportError`.
   *
   * @param {string} method
   * @param {string} path
   * @param {Record<string, number | string | undefined>} params
   * @param {{headers: Record<string, string>, body?: string}} init
   * @param {AbortSignal | undefined} signal
   * @param {boolean} resend whether a request that failed before any answer may be sent once more
   * @returns {Promise<{text: string, headers: Headers}>}
   */
  async _request(method, path, params, init, signal, resend) {
    const fetch = this._fetch;
    const url = this._url(path, params);
    const abort = linkedAbort(signal, this.timeoutMs);
    const request = { ...init, method, headers: { ...init.headers, ...this._headers }, signal: abort.signal };
    try {
      /** @type {Response} */
      let response;
      try {
        response = await fetch(url, request);
      } catch (caught) {
        if (!resend || signal?.aborted || abort.state.timedOut) throw caught;
        response = await fetch(url, request);
      }
      if (!response.ok) throw await serviceError(response);
      return { text: await response.text(), headers: response.headers };
    } catch (caught) {
      if (caught instanceof ClientError) throw caught;
      if (signal?.aborted) throw signal.reason ?? caught;
      if (abort.state.timedOut) throw new TransportError(`${method} ${path} timed out after ${this.timeoutMs} ms`);
      throw new TransportError(describe(caught), { cause: caught });
    } finally {
      abort.close();
    }
  }

  /**
   * Open a follow stream: a resume after `after` names `incarnation` in its `Last-Event-ID`
   * (§5.2), a fresh open in its query.
   *
   * @param {string} path
   * @param {number | null} after
   * @param {string | null} incarnation
   * @param {{maxMessages: number | undefined, packed: 1 | undefined}} query
   * @param {AbortSignal | undefined} signal
   * @returns {Promise<Frames>}
   */
  async _openStream(path, after, incarnation, query, signal) {
    const fetch = this._fetch;
    /** @type {Record<string, string>} */
    const headers = { ...this._headers, Accept: "text/event-stream" };
    /** @type {Record<string, number | string | undefined>} */
    const params = { ...query };
    if (after !== null) headers["Last-Event-ID"] = eventId(incarnation, after);
    else if (incarnation !== null) params.incarnation = incarnation;
    // Until the headers arrive the read timeout covers the whole wait; then Frames times each read.
    const abort = linkedAbort(signal, this.followReadTimeoutMs);
    /** @type {Response} */
    let response;
    try {
      response = await fetch(this._url(path, params), { headers, signal: abort.signal });
      if (!response.ok) throw await serviceError(response);
    } catch (caught) {
      abort.close();
      if (caught instanceof ClientError) throw caught;
      if (abort.state.timedOut) throw new TransportError(`no answer to GET ${path} for ${this.followReadTimeoutMs} ms`);
      throw new TransportError(describe(caught), { cause: caught });
    }
    abort.settle();
    const kind = (response.headers.get("content-type") ?? "").split(";")[0].trim();
    if (kind !== "text/event-stream") {
      abort.close();
      throw new ProtocolError(`follow answered with ${kind || "no content type"}, not text/event-stream`);
    }
    return new Frames(response, this.followReadTimeoutMs, () => abort.close());
  }
}

/**
 * Whether `error` is a server's refusal of the `packed` parameter, which servers before §5.5 do not know.
 *
 * @param {ServiceError} error
 * @returns {boolean}
 */
function refusesPacked(error) {
  return error.status === 400 && error.code === "invalid_parameter" && error.message.includes("packed");
}

// The session viewer: the newest page first, older pages as the reader scrolls up, then live tokens
// until the session is closed or deleted. Opened at a seq (`&at=`, from a search hit), it starts at the
// page that holds it, marks that item, and pages newer events in below as the reader scrolls down,
// until the head, where it follows live.
//
// Everything it shows comes through the public API of the JavaScript client package. The token
// a user enters is kept in sessionStorage for this tab, never in the URL.
import { Backoff, HistoryClient, MAX_MESSAGES, ServiceError, SessionDeletedError } from "history-transport-client";
import { ChildLinks } from "./children.js";
import { Finder } from "./find.js";
import { Place, showHeading } from "./nav.js";
import { listSessions, sessionHref } from "./sessions.js";
import { searchSessions } from "./search.js";
import { eventItem, joinItems } from "./items.js";
import { Pager } from "./paging.js";
import { Timeline } from "./timeline.js";
import { eventCount, shownTime } from "./when.js";

/** @typedef {import("./nav.js").SessionState} SessionState */

const TOKEN_KEY = "history.token";
const PRINCIPAL_KEY = "history.principal";
// Load an older page when the reader comes this close to the top, a newer one this close to the bottom.
const NEAR_TOP_PX = 200;
const NEAR_BOTTOM_PX = 200;

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const scroller = $("scroller");
const timelineEl = $("timeline");
const statusEl = $("status");
const errorEl = $("error");
const olderEl = $("older");
const loginEl = /** @type {HTMLFormElement} */ ($("login"));
const jumpEl = $("jump");

const params = new URLSearchParams(location.search);
const parent = params.get("parent");
const requested = params.get("session");
const sessionId = parent ?? requested;
const child = parent ? requested ?? undefined : undefined;
const pageSize = messagesPerPage(params.get("pageSize"));
// The seq to open at (a search hit's), instead of the newest page.
const at = seqParam(params.get("at"));
// Live events come packed (docs/protocol.md §5.5), a write a frame; `packed=0` asks for one frame an event.
const packed = params.get("packed") !== "0";

const timeline = new Timeline(timelineEl);
const finder = new Finder(timeline, {
  input: /** @type {HTMLInputElement} */ ($("find")),
  count: $("find-count"),
  prev: /** @type {HTMLButtonElement} */ ($("find-prev")),
  next: /** @type {HTMLButtonElement} */ ($("find-next")),
});
/**
 * The open session: its pages on screen (`pager`, which knows what is shown, and of which incarnation,
 * docs/protocol.md §2.5: the first page's, named in every later page and in the follow, so a delete and
 * re-create shows "session deleted", never the new session's events below the old one's), the session
 * as read when it opened (`found`), and whether it is followed.
 * @type {{
 *   client: HistoryClient | null, pager: Pager | null, found: SessionState | null, closed: boolean, deleted: boolean,
 *   following: boolean, stop: AbortController | null,
 * }}
 */
const state = { client: null, pager: null, found: null, closed: false, deleted: false, following: false, stop: null };
/** The live events not shown yet; the next animation frame shows them. @type {{events: any[]}} */
const live = { events: [] };
/** The links from items that name a subagent child to its view, once the session is open. @type {{links: ChildLinks | null}} */
const childLinks = { links: null };
const place = new Place($("about"), timelineEl, sessionId ?? "", child);

/** Link each item that names a subagent child of this session to the child's view. @param {import("./items.js").Item[]} items */
function linkChildren(items) {
  childLinks.links?.link(items);
}

/**
 * List every subagent child of the open session, named in its events or not (`/v1/sessions/{this}/subagents`),
 * as links to their views, oldest first as they were started.
 * @param {HistoryClient} client
 */
async function listSubagents(client) {
  const self = child ?? sessionId;
  if (!self) return;
  const nav = $("subagents");
  /** @type {import("history-transport-client").ListedSession[]} */
  const found = [];
  let cursor;
  try {
    do {
      const listed = await client.subagents(self, { limit: 200, cursor });
      found.push(...listed.sessions);
      cursor = listed.nextCursor ?? undefined;
    } while (cursor !== undefined);
  } catch (error) {
    // The transcript is what the reader came for; a failed listing only leaves the links out.
    console.warn(`could not list the subagents of ${self}: ${describe(/** @type {Error} */ (error))}`);
    return;
  }
  for (const entry of found.reverse()) {
    const link = document.createElement("a");
    link.href = sessionHref(entry.id, self);
    link.textContent = entry.title ?? entry.id;
    link.dataset.child = entry.id;
    link.title = `${entry.id}: ${eventCount(entry.headSeq)}, started ${shownTime(entry.createdAt)}`;
    nav.append(link);
  }
  nav.dataset.count = String(found.length);
  nav.hidden = found.length === 0;
}

/** `pageSize` from the URL: a whole number of messages within the service's range, or the default. @param {string | null} value */
function messagesPerPage(value) {
  const count = Number(value);
  return Number.isInteger(count) && count >= 1 && count <= MAX_MESSAGES ? count : undefined;
}

/** `at` from the URL: a seq, or undefined. @param {string | null} value */
function seqParam(value) {
  const seq = value === null || value === "" ? NaN : Number(value);
  return Number.isSafeInteger(seq) && seq >= 0 ? seq : undefined;
}

/** Whether newer events than those shown wait to be paged in before the follow. */
function hasNewer() {
  return state.pager?.hasNewer ?? false;
}

/** @param {string} phase @param {string} [text] */
function setStatus(phase, text) {
  statusEl.dataset.state = phase;
  statusEl.textContent = text ?? phase;
}

/** @param {string} message */
function showError(message) {
  errorEl.textContent = message;
  errorEl.hidden = false;
}

/**
 * The session was closed (docs/protocol.md §6.3): nothing more will come, so it is no longer live.
 * @param {number | undefined} closedAt the close's time, when the header said it
 */
function showEnded(closedAt) {
  setStatus("ended", "session ended");
  if (closedAt !== undefined) statusEl.title = `closed ${shownTime(closedAt)}`;
}

/** The session was deleted (§6.4): nothing of it is left to read, so nothing more is asked for. */
function showDeleted() {
  state.deleted = true;
  state.pager?.stop();
  state.stop?.abort();
  setStatus("deleted", "session deleted");
  markProgress();
}

function clearError() {
  errorEl.textContent = "";
  errorEl.hidden = true;
}

/** @param {unknown} error */
function describe(error) {
  if (error instanceof ServiceError) return `${error.message} (${error.status} ${error.code})`;
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

function atBottom() {
  return scroller.scrollTop + scroller.clientHeight >= scroller.scrollHeight - 4;
}

/** After items came: the marks and the find count that depend on what is loaded. */
function markProgress() {
  const pager = state.pager;
  if (pager === null) return;
  timelineEl.dataset.from = String(pager.oldest);
  timelineEl.dataset.hasMore = String(pager.hasMore);
  timelineEl.dataset.cursor = String(pager.cursor);
  timelineEl.dataset.hasNewer = String(pager.hasNewer);
  if (finder.query) finder.refresh();
}

/**
 * The jump-to-end button shows while the reader is away from the newest item, or newer items wait to
 * be paged in. Older items go above the reader without moving them, so only scrolling, resizing and
 * new items change it.
 * @param {boolean} [bottom] whether the reader is at the bottom, when the caller knows
 */
function showJump(bottom = atBottom()) {
  jumpEl.hidden = bottom && !hasNewer();
}

window.addEventListener("resize", () => showJump());
jumpEl.addEventListener("click", () => {
  // The end is not paged in yet: open the session at its newest page instead.
  if (hasNewer()) {
    location.assign(child === undefined ? sessionHref(/** @type {string} */ (sessionId)) : sessionHref(child, sessionId ?? undefined));
    return;
  }
  scroller.scrollTop = scroller.scrollHeight;
  showJump(true);
});

/** @param {string} why */
function askForToken(why) {
  setStatus("closed", "token needed");
  $("login-why").textContent = why;
  /** @type {HTMLInputElement} */ ($("principal")).value = sessionStorage.getItem(PRINCIPAL_KEY) ?? "";
  loginEl.hidden = false;
}

loginEl.addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, /** @type {HTMLInputElement} */ ($("token")).value);
  sessionStorage.setItem(PRINCIPAL_KEY, /** @type {HTMLInputElement} */ ($("principal")).value);
  loginEl.hidden = true;
  clearError();
  void open();
});

scroller.addEventListener("scroll", () => {
  if (scroller.scrollTop < NEAR_TOP_PX) void state.pager?.older();
  if (scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < NEAR_BOTTOM_PX) void state.pager?.newer();
  showJump();
});

/**
 * Mark the item that holds `seq` and bring it to the middle of the screen (its top, when it is taller);
 * a folded one is unfolded.
 * @param {number} seq
 */
function showMatch(seq) {
  const node = timeline.holding(seq);
  if (node === undefined) return;
  node.el.dataset.highlight = "true";
  timelineEl.dataset.highlight = String(seq);
  if (node.el instanceof HTMLDetailsElement) node.el.open = true;
  node.el.scrollIntoView({ block: node.el.offsetHeight > scroller.clientHeight ? "start" : "center" });
}

async function follow() {
  const client = /** @type {HistoryClient} */ (state.client);
  const pager = /** @type {Pager} */ (state.pager);
  state.stop = new AbortController();
  setStatus("connecting");
  const updates = client.follow(/** @type {string} */ (sessionId), {
    child,
    after: pager.cursor,
    incarnation: pager.incarnation,
    packed,
    signal: state.stop.signal,
    onConnection: (change) => {
      // A closed session's stream only catches up to its final head: it is never live.
      if (change.type === "connected") setStatus(state.closed ? "ended" : "live", state.closed ? "session ended" : "live");
      else if (change.type === "ended") showEnded(undefined);
      else if (change.type === "retrying") {
        const seconds = (change.delayMs / 1000).toFixed(1);
        setStatus("reconnecting", `reconnecting (attempt ${change.attempt}) in ${seconds} s: ${change.reason}`);
      } else if (change.failures > 0) setStatus("reconnecting", `reconnecting (attempt ${change.failures})…`);
      else setStatus("connecting");
    },
  });
  for (;;) {
    const next = await updates.next();
    // Returned: the session ended (its end frame), or the stream was stopped.
    if (next.done) {
      if (next.value === undefined && !state.deleted) setStatus("closed");
      return;
    }
    queueLive(next.value);
  }
}

/** Keep a live event for the next animation frame, which shows every event that came before it. @param {any} event */
function queueLive(event) {
  live.events.push(event);
  if (live.events.length === 1) requestAnimationFrame(showLive);
}

/**
 * Show the live events that came since the last frame, in one go: layout is read once before
 * (whether the reader is at the bottom) and written once after (to stay there), however many
 * events a burst brought.
 */
function showLive() {
  const events = live.events;
  live.events = [];
  const stick = atBottom();
  const items = joinItems(events.map(eventItem));
  timeline.append(items);
  linkChildren(items);
  /** @type {Pager} */ (state.pager).cursor = events[events.length - 1].seq;
  markProgress();
  if (state.client !== null) place.live(state.client, events);
  if (stick) scroller.scrollTop = scroller.scrollHeight;
  // Kept at the bottom, or away from it with newer items below: known without reading layout again.
  showJump(stick);
}

/** The time from the tail page's last byte to its rendering, for the browser benchmark. */
function recordTailTiming(/** @type {number} */ records) {
  const entries = performance.getEntriesByType("resource").filter((entry) => entry.name.includes("/page"));
  const last = /** @type {PerformanceResourceTiming | undefined} */ (entries[entries.length - 1]);
  requestAnimationFrame(() => {
    const rendered = performance.now();
    /** @type {any} */ (window).viewerMetrics = {
      records,
      responseEnd: last ? last.responseEnd : null,
      transferSize: last ? last.transferSize : null,
      renderedMs: last ? rendered - last.responseEnd : null,
    };
    document.documentElement.dataset.ready = "true";
  });
}

/** The client, with the token and principal this tab was given. */
function connect() {
  const token = sessionStorage.getItem(TOKEN_KEY) ?? undefined;
  const principal = sessionStorage.getItem(PRINCIPAL_KEY) ?? undefined;
  // A viewer left open waits out any outage: it never stops retrying, at most 10 s apart.
  const client = new HistoryClient(location.origin, { token, principal, backoff: new Backoff({ maxRetries: null, capMs: 10_000 }) });
  return { client, token, principal };
}

/**
 * Without a session: the caller's sessions, newest first, a page at a time, filtered as the reader types;
 * above them, the search across their text, whose hits stand in for the list while it holds a query.
 */
async function openList() {
  document.title = "Sessions · session viewer";
  $("title").textContent = "Sessions";
  scroller.hidden = true;
  const listEl = $("sessions");
  const { client, token } = connect();
  setStatus("connecting", "loading");
  searchSessions(client, {
    box: /** @type {HTMLInputElement} */ ($("search")),
    status: $("search-status"),
    results: $("search-results"),
    hits: $("hits"),
    more: /** @type {HTMLButtonElement} */ ($("more-hits")),
    list: $("session-list"),
  });
  await listSessions(
    client,
    {
      section: listEl,
      rows: $("session-rows"),
      more: /** @type {HTMLButtonElement} */ ($("more")),
      filter: /** @type {HTMLInputElement} */ ($("session-filter")),
      count: $("session-count"),
    },
    {
      loaded: (shown, total) => {
        clearError();
        setStatus("idle", `${total} session${total === 1 ? "" : "s"}`);
        document.documentElement.dataset.ready = "true";
      },
      failed: (error) => {
        document.documentElement.dataset.ready = "true";
        if (error instanceof ServiceError && error.status === 401) {
          sessionStorage.removeItem(TOKEN_KEY);
          listEl.hidden = true;
          askForToken(token ? `The service refused the token: ${error.message}` : "This service needs a token.");
          if (token) showError(`The token was refused: ${describe(error)}`);
          return;
        }
        showError(`Could not list sessions: ${describe(error)}`);
        setStatus("error");
      },
    },
  );
}

async function open() {
  if (!sessionId) {
    await openList();
    return;
  }
  document.title = `${child ?? sessionId} · session viewer`;
  showHeading($("title"), sessionId, child);
  $("back").hidden = false;
  // Its line takes its place now, so that filling it in later moves nothing the reader sees.
  $("about").hidden = false;
  const { client, token, principal } = connect();
  setStatus("connecting", "loading");
  // The header says whether the session is closed. Read beside the tail page, not before it; a
  // failure only leaves that out, and the follow still ends on a closed session's end frame.
  const header = client.session(sessionId, { child }).catch(() => null);
  // Opened at a seq: the page through it, within the head (an empty session's is empty).
  const found = at === undefined ? null : await header;
  const through = at === undefined ? undefined : Math.min(at, found?.headSeq ?? at);
  let tail;
  try {
    tail = await client.page(sessionId, { child, through, maxMessages: pageSize });
  } catch (error) {
    if (error instanceof ServiceError && error.status === 401) {
      // A refused token is not kept for the next load.
      sessionStorage.removeItem(TOKEN_KEY);
      askForToken(token ? `The service refused the token: ${error.message}` : "This service needs a token.");
      if (token) showError(`The token was refused: ${describe(error)}`);
      return;
    }
    if (error instanceof ServiceError && token && (error.status === 403 || error.status === 404)) {
      // With tokens, a session is visible only to its owner: the principal may be wrong.
      askForToken(`No session ${child ?? sessionId} for principal ${principal}: check the principal.`);
      showError(`Could not open ${child ?? sessionId}: ${describe(error)}`);
      return;
    }
    showError(`Could not open ${child ?? sessionId}: ${describe(error)}`);
    setStatus("error");
    return;
  }
  state.client = client;
  childLinks.links = new ChildLinks(timeline, client, child ?? sessionId);
  void listSubagents(client);
  const pager = new Pager(client, { session: sessionId, child, pageSize }, { timeline, scroller, older: olderEl }, {
    shown: linkChildren,
    moved: markProgress,
    failed: (what, error) => {
      if (error instanceof SessionDeletedError) showDeleted();
      else showError(`Could not load ${what} messages: ${describe(error)}`);
    },
    atHead: () => void goLive(),
  });
  state.pager = pager;
  pager.first(tail);
  $("find-bar").hidden = false;
  if (at !== undefined) {
    await openAt(client, at, found, tail.records.length);
    return;
  }
  recordTailTiming(tail.records.length);
  scroller.scrollTop = scroller.scrollHeight;
  showJump();
  // Live updates need not wait for older pages: appends and prepends touch opposite ends.
  void pager.fill();
  state.found = await header;
  if (state.found !== null) void place.show(client, state.found);
  await goLive();
}

/**
 * Opened at `seq`, with its page shown: page in what came after it, mark its item and bring it on screen,
 * then fill the screen both ways. The follow starts once the reader has paged in every newer event.
 * @param {HistoryClient} client @param {number} seq @param {SessionState | null} found the session as read
 * @param {number} records the records of its page
 */
async function openAt(client, seq, found, records) {
  const pager = /** @type {Pager} */ (state.pager);
  state.found = found;
  if (found !== null) void place.show(client, found);
  // Without the head, the follow catches up from the newest event shown.
  pager.head = found?.headSeq ?? pager.cursor;
  markProgress();
  // The matched item may go on past its page's end: its page's newer side completes it, and shows what followed.
  await pager.newer();
  showMatch(seq);
  recordTailTiming(records);
  if (pager.hasNewer) setStatus("idle", "newer messages below");
  else void goLive();
  showJump();
  await pager.fill();
}

/** Follow the session live from the newest event shown: once, when nothing newer waits to be paged in. */
async function goLive() {
  const pager = /** @type {Pager} */ (state.pager);
  if (state.following) return;
  state.following = true;
  // The follow takes the newer side over from here.
  pager.head = null;
  markProgress();
  const found = state.found;
  const closedAt = found?.header.closedAt;
  state.closed = typeof closedAt === "number";
  // Closed, and what is shown reaches its final head: there is nothing to follow.
  if (typeof closedAt === "number" && found?.headSeq === pager.cursor) {
    showEnded(closedAt);
    return;
  }
  try {
    await follow();
  } catch (error) {
    // The stream said `session_deleted`, or the incarnation shown was gone when it reconnected.
    if (error instanceof SessionDeletedError) showDeleted();
    else if (!state.stop?.signal.aborted && !state.deleted) {
      if (error instanceof ServiceError && error.status === 401) sessionStorage.removeItem(TOKEN_KEY);
      showError(`The live stream stopped: ${describe(error)}`);
      setStatus("error");
    }
  }
}

void open();

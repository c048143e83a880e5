// Where a session stands: the way back to the list and to its parent, and a line about it.
//
// The line gives the session's title, state (open or closed, and when), events, last activity and the
// tokens its events report, summed by the service over the whole session (docs/protocol.md §12.2), not
// only over what is loaded. A subagent child's first events may be inherited from its parent (its
// seed: the events before its `session/end-seed`, or its header's `seedLength`); those are marked.
import { HistoryClient } from "history-transport-client";
import { sessionHref } from "./sessions.js";
import { eventCount, knownTime, timeElement, tokenCount } from "./when.js";

// How far into a child its seed is looked for: a seed is a parent's context, at the very start.
const SEED_SEARCH = 200;
const END_SEED = "session/end-seed";
// How long live events that may change a title or tokens settle before the session is read again.
const REREAD_MS = 500;
const TELLING = new Set(["session/title", "user/message", "assistant/message"]);

/**
 * A session's state as `GET /v1/sessions/{id}` gives it (§12.2).
 * @typedef {{header: Record<string, any>, headSeq: number, title?: string, lastEventAt?: number, usage?: {inputTokens: number, outputTokens: number}}} SessionState
 */

/**
 * The heading: the session's id, or "parent › child" with the parent a link to its view.
 * @param {HTMLElement} heading
 * @param {string} session the session, or the child's parent
 * @param {string | undefined} child
 */
export function showHeading(heading, session, child) {
  const doc = heading.ownerDocument;
  if (child === undefined) {
    heading.textContent = session;
    return;
  }
  const parent = doc.createElement("a");
  parent.className = "parent";
  parent.href = sessionHref(session);
  parent.textContent = session;
  heading.replaceChildren(parent, " › ", child);
}

/**
 * The line about a session.
 * @param {HTMLElement} about
 * @param {SessionState} state
 */
export function showAbout(about, state) {
  const doc = about.ownerDocument;
  /** @param {string} className @param {(string | Node)[]} content */
  const part = (className, ...content) => {
    const span = doc.createElement("span");
    span.className = className;
    span.append(...content);
    return span;
  };
  const closedAt = state.header.closedAt;
  const closed = typeof closedAt === "number";
  const parts = [
    part(`title${state.title === undefined ? " untitled" : ""}`, state.title ?? "untitled"),
    part(`badge ${closed ? "closed" : "open"}`, closed ? "closed" : "open"),
    part("events", eventCount(state.headSeq)),
    part("activity", "last activity ", timeElement(doc, state.lastEventAt)),
  ];
  if (knownTime(state.lastEventAt) === undefined && knownTime(state.header.createdAt) !== undefined) {
    parts.push(part("created", "created ", timeElement(doc, state.header.createdAt)));
  }
  if (closed) parts[1].title = `closed ${new Date(closedAt).toLocaleString()}`;
  const tokens = tokenCount(state.usage);
  parts.push(part("tokens", tokens === undefined ? "no tokens reported" : `${tokens} tokens`));
  about.replaceChildren(...parts);
  about.dataset.state = closed ? "closed" : "open";
  about.dataset.events = String(state.headSeq + 1);
  about.dataset.tokens = state.usage ? `${state.usage.inputTokens}/${state.usage.outputTokens}` : "";
  about.hidden = false;
}

/**
 * How many of a child's first events it inherited from its parent: its header's `seedLength`, or the
 * seq of its `session/end-seed`, looked for in its first events; 0 when it has no seed.
 * @param {HistoryClient} client
 * @param {string} parent
 * @param {string} child
 * @param {SessionState} state
 * @returns {Promise<number>}
 */
export async function inheritedCount(client, parent, child, state) {
  const given = state.header.seedLength;
  if (typeof given === "number") return given;
  if (state.headSeq < 0) return 0;
  const through = Math.min(state.headSeq, SEED_SEARCH - 1);
  const page = await client.page(parent, { child, through, maxMessages: SEED_SEARCH });
  const end = page.events().find((event) => event.type === END_SEED);
  return end === undefined ? 0 : end.seq;
}

/**
 * Mark each timeline item wholly before `count` as inherited from the parent, now and as items come.
 * @param {HTMLElement} timeline
 * @param {number} count
 */
export function markInherited(timeline, count) {
  if (count <= 0) return;
  timeline.dataset.inherited = String(count);
  const mark = () => {
    for (const item of timeline.querySelectorAll(":scope > .item:not([data-inherited])")) {
      const el = /** @type {HTMLElement} */ (item);
      if (Number(el.dataset.seq1) < count) el.dataset.inherited = "true";
    }
  };
  mark();
  new MutationObserver(mark).observe(timeline, { childList: true });
}

/**
 * The line about the open session (or child), kept current as it is followed: its head and last activity
 * at once, its title and tokens read again from the service once events that may change them settle.
 */
export class Place {
  /**
   * @param {HTMLElement} about the line
   * @param {HTMLElement} timeline
   * @param {string} session the session shown, or the child's parent
   * @param {string | undefined} child
   */
  constructor(about, timeline, session, child) {
    this.about = about;
    this.timeline = timeline;
    this.session = session;
    this.child = child;
    /** @type {SessionState | null} */
    this.shown = null;
    /** @type {number | undefined} */
    this.due = undefined;
  }

  /**
   * Show the session's line, and mark a child's inherited first events.
   * @param {HistoryClient} client
   * @param {SessionState} found
   */
  async show(client, found) {
    this.shown = found;
    showAbout(this.about, found);
    const doc = this.about.ownerDocument;
    if (found.title) doc.title = `${found.title} · session viewer`;
    if (this.child === undefined) return;
    try {
      const inherited = await inheritedCount(client, this.session, this.child, found);
      if (inherited <= 0) return;
      markInherited(this.timeline, inherited);
      const note = doc.createElement("span");
      note.className = "inherited";
      const parent = doc.createElement("a");
      parent.href = sessionHref(this.session);
      parent.textContent = "its parent";
      note.append(`the first ${inherited} event${inherited === 1 ? " is" : "s are"} inherited from `, parent);
      this.about.append(note);
    } catch (error) {
      console.warn(`could not read the seed of ${this.child}: ${error instanceof Error ? error.message : error}`);
    }
  }

  /**
   * Live events came: the head and last activity move now; a title or tokens, once read again.
   * @param {HistoryClient} client
   * @param {any[]} events
   */
  live(client, events) {
    if (this.shown === null || events.length === 0) return;
    const last = events[events.length - 1];
    this.shown = { ...this.shown, headSeq: last.seq, lastEventAt: last.time };
    showAbout(this.about, this.shown);
    if (this.due !== undefined || !events.some(telling)) return;
    this.due = window.setTimeout(() => {
      this.due = undefined;
      client.session(this.session, { child: this.child }).then(
        (found) => {
          this.shown = /** @type {SessionState} */ (found);
          showAbout(this.about, this.shown);
        },
        () => undefined,
      );
    }, REREAD_MS);
  }
}

/** Whether an event may change a session's title or tokens (the service decides how). @param {any} event */
function telling(event) {
  return TELLING.has(event.type) || event.data?.chunk?.type === "usage";
}

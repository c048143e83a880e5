// The session list: the caller's sessions newest first, a page at a time, filtered on the server.
//
// Each row is a session's title (its last `session/title`, else its first user message), id, state,
// event count, last activity and tokens, linked to its view, with its subagent children one click
// away; above them, how many sessions the listing holds (its `total`, not the rows loaded so far)
// and a box that filters them by id or title as the reader types (docs/protocol.md §12.1).
import { HistoryClient } from "history-transport-client";
import { eventCount, knownTime, timeElement, tokenCount } from "./when.js";

// Sessions a page of the list asks for, and the children a row's subagents list shows.
const LIST_PAGE = 50;
const CHILDREN_PAGE = 200;
// How long typing pauses before the filter asks the service again.
const TYPING_MS = 250;

/**
 * The list's elements.
 * @typedef {{section: HTMLElement, rows: HTMLElement, more: HTMLButtonElement, filter: HTMLInputElement, count: HTMLElement}} ListElements
 * What the shell hears of: a page shown (`loaded`, of `total`), and a failure.
 * @typedef {{loaded: (shown: number, total: number) => void, failed: (error: unknown) => void}} ListEvents
 * @typedef {import("history-transport-client").ListedSession} ListedSession
 */

/**
 * A session's view; a subagent child's is read through its `parent`. With `at`, the view opens at the
 * page that holds that seq and marks the item holding it, rather than at the newest page.
 * @param {string} id @param {string} [parent] @param {number} [at]
 */
export function sessionHref(id, parent, at) {
  const session = `session=${encodeURIComponent(id)}`;
  const href = parent === undefined ? `?${session}` : `?parent=${encodeURIComponent(parent)}&${session}`;
  return at === undefined ? href : `${href}&at=${at}`;
}

/**
 * A session's name as a link to its view: its title, with its id beside it (the id alone when untitled).
 * @param {Document} doc
 * @param {ListedSession} session
 * @param {string} [parent]
 */
export function sessionLink(doc, session, parent) {
  const link = doc.createElement("a");
  link.className = "open";
  link.href = sessionHref(session.id, parent);
  link.textContent = session.title ?? session.id;
  if (session.title === undefined) link.classList.add("untitled");
  link.title = session.id;
  return link;
}

/** @param {Document} doc @param {string} tag @param {string} className @param {(string | Node)[]} content */
function element(doc, tag, className, ...content) {
  const made = doc.createElement(tag);
  made.className = className;
  made.append(...content);
  return made;
}

/**
 * A row's subagents: a disclosure whose first opening lists every direct child, each a link to its view.
 * @param {HistoryClient} client
 * @param {Document} doc
 * @param {ListedSession} session
 */
function childrenCell(client, doc, session) {
  if (session.childCount === 0) return element(doc, "span", "none", "—");
  const details = doc.createElement("details");
  details.className = "children";
  const summary = element(doc, "summary", "", `${session.childCount} subagent${session.childCount === 1 ? "" : "s"}`);
  const list = element(doc, "ul", "");
  details.append(summary, list);
  details.addEventListener("toggle", () => {
    if (!details.open || details.dataset.loaded !== undefined) return;
    details.dataset.loaded = "loading";
    void (async () => {
      try {
        /** @type {string | undefined} */
        let cursor;
        do {
          const page = await client.subagents(session.id, { limit: CHILDREN_PAGE, cursor });
          for (const child of page.sessions) {
            const link = sessionLink(doc, child, session.id);
            link.dataset.child = child.id;
            list.append(element(doc, "li", "", link, " ", element(doc, "span", "count", eventCount(child.headSeq))));
          }
          cursor = page.nextCursor ?? undefined;
        } while (cursor !== undefined);
        details.dataset.loaded = String(list.children.length);
      } catch (error) {
        list.append(element(doc, "li", "failed", `Could not list them: ${error instanceof Error ? error.message : error}`));
        details.dataset.loaded = "failed";
      }
    })();
  });
  return details;
}

/**
 * One row of the list.
 * @param {HistoryClient} client
 * @param {Document} doc
 * @param {ListedSession} session
 */
function sessionRow(client, doc, session) {
  const row = doc.createElement("tr");
  row.className = "session";
  row.dataset.id = session.id;
  const closed = session.closedAt !== undefined;
  row.dataset.state = closed ? "closed" : "open";
  const name = element(doc, "td", "name", sessionLink(doc, session), element(doc, "code", "id", session.id));
  const state = element(doc, "td", "state", element(doc, "span", `badge ${row.dataset.state}`, row.dataset.state));
  if (closed) state.title = `closed ${new Date(/** @type {number} */ (session.closedAt)).toLocaleString()}`;
  const events = element(doc, "td", "events", eventCount(session.headSeq));
  // The last event's time; without one (no event yet, or a log that recorded no times), when it was created.
  const activity = element(doc, "td", "activity", timeElement(doc, session.lastEventAt));
  if (knownTime(session.lastEventAt) === undefined && knownTime(session.createdAt) !== undefined) {
    activity.append(element(doc, "span", "created", "created ", timeElement(doc, session.createdAt)));
  }
  const tokens = element(doc, "td", "tokens", tokenCount(session.usage) ?? "—");
  const children = element(doc, "td", "children", childrenCell(client, doc, session));
  row.append(name, state, events, activity, tokens, children);
  return row;
}

/** What the count line says: the rows shown of the listing's total, under the filter. @param {number} shown @param {number} total @param {string} query */
function counted(shown, total, query) {
  if (total === 0) return query ? `No session matches “${query}”` : "No sessions yet";
  const of = shown < total ? `${shown} of ${total}` : `${total}`;
  return `${of} session${total === 1 ? "" : "s"}${query ? ` matching “${query}”` : ""}`;
}

/**
 * The session list over `client`: the first page now, more on "More", anew as the filter changes.
 * Only the answer to the newest query is shown: one that comes after a newer query was asked is dropped.
 * @param {HistoryClient} client
 * @param {ListElements} elements
 * @param {ListEvents} events
 */
export function listSessions(client, elements, events) {
  const { section, rows, more, filter, count } = elements;
  const doc = rows.ownerDocument;
  let asked = 0;
  /** @type {number | undefined} */
  let typing;

  /** @param {string} query @param {string | undefined} cursor */
  const load = async (query, cursor) => {
    const mine = ++asked;
    more.disabled = true;
    section.dataset.loading = "true";
    try {
      const page = await client.sessions({ limit: LIST_PAGE, cursor, q: query || undefined });
      if (mine !== asked) return;
      if (cursor === undefined) rows.replaceChildren();
      rows.append(...page.sessions.map((session) => sessionRow(client, doc, session)));
      const shown = rows.children.length;
      count.textContent = counted(shown, page.total, query);
      more.hidden = page.nextCursor === null;
      more.onclick = page.nextCursor === null ? null : () => void load(query, /** @type {string} */ (page.nextCursor));
      section.dataset.loaded = String(shown);
      section.dataset.total = String(page.total);
      section.dataset.query = query;
      events.loaded(shown, page.total);
    } catch (error) {
      if (mine === asked) events.failed(error);
    } finally {
      if (mine === asked) {
        more.disabled = false;
        section.dataset.loading = "false";
      }
    }
  };

  filter.addEventListener("input", () => {
    window.clearTimeout(typing);
    typing = window.setTimeout(() => void load(filter.value.trim(), undefined), TYPING_MS);
  });
  filter.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    window.clearTimeout(typing);
    void load(filter.value.trim(), undefined);
  });
  section.hidden = false;
  return load(filter.value.trim(), undefined);
}

// Search across sessions (docs/protocol.md §14): the box above the session list, and its hits.
//
// A query typed into the box is sent to the service once typing pauses; while the box holds one, its
// hits stand in place of the list. Each hit names its session (title, else id), what matched (a user
// message, assistant text, a tool call…), when, and a snippet whose matched words are marked, built
// from the service's strings as text nodes, never parsed as markup. A hit links to its session
// opened at the matched message (`&at=SEQ`), a subagent child's through its parent.
import { HistoryClient, ServiceError } from "history-transport-client";
import { sessionHref } from "./sessions.js";
import { timeElement } from "./when.js";

// Hits a page of results asks for.
const SEARCH_PAGE = 20;
// How long typing pauses before the service is asked.
const TYPING_MS = 300;
const KINDS = {
  user: "User",
  assistant: "Assistant",
  reasoning: "Reasoning",
  tool_call: "Tool call",
  tool_result: "Tool result",
  title: "Title",
};

/**
 * The search's elements: the box, its status line, the results (the hits and their More button), and the
 * list the results stand in for.
 * @typedef {{box: HTMLInputElement, status: HTMLElement, results: HTMLElement, hits: HTMLElement, more: HTMLButtonElement, list: HTMLElement}} SearchElements
 * @typedef {import("history-transport-client").SearchHit} SearchHit
 */

/** @param {Document} doc @param {string} tag @param {string} className @param {(string | Node)[]} content */
function element(doc, tag, className, ...content) {
  const made = doc.createElement(tag);
  made.className = className;
  made.append(...content);
  return made;
}

/**
 * A snippet as text, its matched parts (the strings at odd positions) in `<mark>`s.
 * @param {Document} doc
 * @param {string[]} snippet
 */
export function snippetElement(doc, snippet) {
  const shown = element(doc, "p", "snippet");
  snippet.forEach((text, i) => {
    if (text) shown.append(i % 2 === 1 ? element(doc, "mark", "", text) : doc.createTextNode(text));
  });
  return shown;
}

/**
 * One hit: its session as a link to the matched message, what matched and when, and the snippet.
 * @param {Document} doc
 * @param {SearchHit} hit
 */
export function hitElement(doc, hit) {
  const item = doc.createElement("li");
  item.className = "hit";
  item.dataset.session = hit.session;
  item.dataset.seq = String(hit.seq);
  item.dataset.kind = hit.kind;
  const link = /** @type {HTMLAnchorElement} */ (element(doc, "a", "open", hit.title ?? hit.session));
  link.href = sessionHref(hit.session, hit.parent, hit.seq);
  link.title = `${hit.session}, event ${hit.seq}`;
  if (hit.title === undefined) link.classList.add("untitled");
  const about = element(doc, "div", "about", element(doc, "span", "kind", KINDS[hit.kind] ?? hit.kind), timeElement(doc, hit.time));
  if (hit.parent !== undefined) {
    item.dataset.parent = hit.parent;
    about.append(element(doc, "span", "parent", `subagent of ${hit.parent}`));
  }
  item.append(link, about, snippetElement(doc, hit.snippet));
  return item;
}

/** Why a search failed, as the reader should hear it. @param {unknown} error */
function failure(error) {
  if (error instanceof ServiceError && error.code === "search_unsupported") {
    return "Search is unavailable: this service's store keeps no search index.";
  }
  if (error instanceof ServiceError && error.status === 400) return `Cannot search for that: ${error.message}`;
  const why = error instanceof ServiceError ? `${error.message} (${error.status} ${error.code})` : error instanceof Error ? error.message : String(error);
  return `Search failed: ${why}`;
}

/**
 * The search box over `client`. Only the answer to the newest query is shown: typing again aborts the
 * request still under way, and an answer that comes after a newer query was asked is dropped.
 * @param {HistoryClient} client
 * @param {SearchElements} elements
 */
export function searchSessions(client, elements) {
  const { box, status, results, hits, more, list } = elements;
  const doc = hits.ownerDocument;
  /** @type {AbortController | null} */
  let asking = null;
  /** @type {number | undefined} */
  let typing;

  /** Show the list again, and forget any answer under way. */
  const clear = () => {
    asking?.abort();
    asking = null;
    hits.replaceChildren();
    more.hidden = true;
    status.textContent = "";
    delete results.dataset.query;
    delete results.dataset.error;
    delete status.dataset.error;
    results.dataset.loading = "false";
    results.hidden = true;
    list.hidden = false;
  };

  /** @param {string} query @param {string | undefined} cursor */
  const load = async (query, cursor) => {
    asking?.abort();
    const mine = new AbortController();
    asking = mine;
    more.disabled = true;
    results.dataset.loading = "true";
    results.hidden = false;
    list.hidden = true;
    if (cursor === undefined) status.textContent = "Searching…";
    try {
      const page = await client.search(query, { limit: SEARCH_PAGE, cursor, signal: mine.signal });
      if (asking !== mine) return;
      if (cursor === undefined) hits.replaceChildren();
      hits.append(...page.hits.map((hit) => hitElement(doc, hit)));
      const shown = hits.children.length;
      // The service counts no total (§14.1): the count is of the hits shown, with a plus while more may come.
      const count = `${shown}${page.nextCursor === null ? "" : "+"}`;
      status.textContent = shown === 0 ? `Nothing matches “${query}”` : `${count} match${shown === 1 && page.nextCursor === null ? "" : "es"} for “${query}”`;
      more.hidden = page.nextCursor === null;
      more.onclick = page.nextCursor === null ? null : () => void load(query, /** @type {string} */ (page.nextCursor));
      delete results.dataset.error;
      delete status.dataset.error;
      results.dataset.shown = String(shown);
      results.dataset.query = query;
    } catch (error) {
      if (asking !== mine) return;
      results.dataset.error = status.dataset.error = error instanceof ServiceError ? error.code : "failed";
      results.dataset.query = query;
      status.textContent = failure(error);
      more.hidden = true;
      // Nothing to show for the query: the list comes back under the message.
      if (cursor === undefined) {
        hits.replaceChildren();
        results.hidden = true;
        list.hidden = false;
      }
    } finally {
      if (asking === mine) {
        more.disabled = false;
        results.dataset.loading = "false";
      }
    }
  };

  const ask = () => {
    window.clearTimeout(typing);
    const query = box.value.trim();
    if (query) void load(query, undefined);
    else clear();
  };
  box.addEventListener("input", () => {
    window.clearTimeout(typing);
    typing = window.setTimeout(ask, TYPING_MS);
  });
  box.addEventListener("keydown", (event) => {
    if (event.key === "Enter") ask();
    else if (event.key === "Escape") {
      box.value = "";
      ask();
    }
  });
  clear();
  // A query kept in the box (the browser restores it on Back) is searched again.
  if (box.value.trim()) ask();
}

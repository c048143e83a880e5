// Find in the session: which of the items loaded so far show the query, case-insensitively.
//
// Matching items are marked (`data-match`), one of them is the current one (`data-current`),
// and where the browser has the CSS Custom Highlight API each occurrence is highlighted in
// place, without touching the text nodes that live tokens extend. A new query starts at the
// newest match, as a reader of a chat is usually at its end; next and previous wrap around.
import { shownText } from "./render.js";

const MATCH = "find-match";
const CURRENT = "find-current";

/** The Highlight registry, where this browser has one. */
const registry = typeof CSS !== "undefined" && "highlights" in CSS ? CSS.highlights : null;

export class Finder {
  /**
   * @param {import("./timeline.js").Timeline} timeline
   * @param {{input: HTMLInputElement, count: HTMLElement, prev: HTMLButtonElement, next: HTMLButtonElement}} controls
   */
  constructor(timeline, controls) {
    this.timeline = timeline;
    this.controls = controls;
    /** @type {HTMLElement[]} */
    this.matches = [];
    /** @type {HTMLElement | null} */
    this.current = null;
    controls.input.addEventListener("input", () => this.search());
    controls.input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        this.step(event.shiftKey ? -1 : 1);
      } else if (event.key === "Escape") {
        controls.input.value = "";
        this.search();
      }
    });
    controls.prev.addEventListener("click", () => this.step(-1));
    controls.next.addEventListener("click", () => this.step(1));
    this.#show();
  }

  get query() {
    return this.controls.input.value.toLowerCase();
  }

  /** A new query: match again and go to the newest match. */
  search() {
    this.current = null;
    this.refresh();
    if (this.matches.length) this.#select(this.matches[this.matches.length - 1]);
  }

  /**
   * Match again over what is loaded now (items came, or live text grew), keeping the current
   * match when it still matches, else the nearest one after where it was.
   */
  refresh() {
    const query = this.query;
    for (const el of this.matches) {
      delete el.dataset.match;
      delete el.dataset.current;
    }
    const before = this.current;
    this.matches = [];
    /** @type {Range[]} */
    const ranges = [];
    if (query) {
      for (const node of this.timeline.nodes) {
        const text = shownText(node.el);
        const lower = text.toLowerCase();
        if (!lower.includes(query)) continue;
        node.el.dataset.match = "true";
        this.matches.push(node.el);
        if (registry) for (const range of occurrences(node.el, text, lower, query)) ranges.push(range);
      }
    }
    this.current = null;
    if (before && this.matches.includes(before)) this.current = before;
    else if (before && before.isConnected) this.current = this.matches.find((el) => follows(before, el)) ?? this.matches[0] ?? null;
    if (this.current) this.current.dataset.current = "true";
    if (registry) {
      if (ranges.length) registry.set(MATCH, highlight(ranges));
      else registry.delete(MATCH);
      this.#highlightCurrent();
    }
    this.#show();
  }

  /** Go to the next (1) or previous (-1) match, wrapping around. @param {number} by */
  step(by) {
    if (!this.matches.length) return;
    const at = this.current ? this.matches.indexOf(this.current) : -1;
    const next = at === -1 ? (by > 0 ? 0 : this.matches.length - 1) : (at + by + this.matches.length) % this.matches.length;
    this.#select(this.matches[next]);
  }

  /** @param {HTMLElement} el */
  #select(el) {
    if (this.current) delete this.current.dataset.current;
    this.current = el;
    el.dataset.current = "true";
    // A match in folded reasoning or context is unfolded, so the reader sees it.
    if (el instanceof HTMLDetailsElement) el.open = true;
    el.scrollIntoView({ block: "nearest" });
    if (registry) this.#highlightCurrent();
    this.#show();
  }

  #highlightCurrent() {
    if (!registry) return;
    const text = this.current ? shownText(this.current) : "";
    const ranges = this.current ? occurrences(this.current, text, text.toLowerCase(), this.query) : [];
    if (ranges.length) registry.set(CURRENT, highlight(ranges));
    else registry.delete(CURRENT);
  }

  #show() {
    const { count, prev, next } = this.controls;
    const total = this.matches.length;
    const at = this.current ? this.matches.indexOf(this.current) + 1 : 0;
    count.textContent = this.query ? `${at} of ${total}` : "";
    count.dataset.at = String(at);
    count.dataset.total = String(total);
    prev.disabled = next.disabled = total === 0;
  }
}

/** A highlight of any number of ranges (not a spread, which a common letter's matches could overflow). @param {Range[]} ranges */
function highlight(ranges) {
  const out = new Highlight();
  for (const range of ranges) out.add(range);
  return out;
}

/** Whether `el` comes after `other` in the document. @param {Element} other @param {Element} el */
function follows(other, el) {
  return (other.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING) !== 0;
}

/**
 * The ranges of each occurrence of `query` in an item's shown text. Offsets come from the
 * lowercased text, so where lowercasing changed the length (a few non-ASCII letters) the item
 * is marked but not highlighted.
 * @param {HTMLElement} el @param {string} text @param {string} lower @param {string} query
 * @returns {Range[]}
 */
function occurrences(el, text, lower, query) {
  if (!query || lower.length !== text.length) return [];
  const shown = el.classList.contains("formatted") ? el.querySelector(":scope > .pretty") : el.querySelector(":scope > .body");
  const node = shown?.firstChild;
  if (!(node instanceof Text) || node.data !== text) return [];
  /** @type {Range[]} */
  const ranges = [];
  for (let at = lower.indexOf(query); at !== -1; at = lower.indexOf(query, at + query.length)) {
    const range = el.ownerDocument.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + query.length);
    ranges.push(range);
  }
  return ranges;
}

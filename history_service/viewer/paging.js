// The pages of the open session on screen: older ones go above as the reader nears the top. A session
// opened at a seq (a search hit's) also has newer ones go below as the reader nears the bottom, up to
// the head, where the shell follows it live.
//
// Every page after the first names the first one's incarnation (docs/protocol.md §2.5), so a delete
// and re-create between them is a `SessionDeletedError`, never another session's events joined to these.
import { HistoryClient } from "history-transport-client";
import { eventItem, joinItems, recordItem } from "./items.js";

// How far past the newest event shown a newer page reaches, in seqs. Pages are cut backwards from a
// seq (§4.3), so the newer side is read as the events up to there, joined to those shown exactly.
const NEWER_SEQS = 400;

/**
 * What the shell hears of: items shown (to link the children they name), what is shown moved, a load
 * that failed, and the newest event shown reaching the head that was read.
 * @typedef {{
 *   shown: (items: Item[]) => void, moved: () => void, failed: (what: "older" | "newer", error: unknown) => void,
 *   atHead: () => void,
 * }} PagerEvents
 * @typedef {import("./items.js").Item} Item
 * @typedef {import("./timeline.js").Timeline} Timeline
 * @typedef {Awaited<ReturnType<HistoryClient["page"]>>} Page
 */

export class Pager {
  /**
   * @param {HistoryClient} client
   * @param {{session: string, child: string | undefined, pageSize: number | undefined}} where the session, or a child's parent
   * @param {{timeline: Timeline, scroller: HTMLElement, older: HTMLElement}} elements
   * @param {PagerEvents} events
   */
  constructor(client, where, elements, events) {
    this.client = client;
    this.where = where;
    this.elements = elements;
    this.events = events;
    /** The incarnation shown, the first page's. @type {string | undefined} */
    this.incarnation = undefined;
    /** The oldest seq shown, and whether older ones are left. */
    this.oldest = 0;
    this.hasMore = false;
    /** The newest seq shown; live events move it too. */
    this.cursor = -1;
    /** The head newer pages go up to: none (`null`) but for a session opened at a seq, until it is followed. @type {number | null} */
    this.head = null;
    this.loadingOlder = false;
    this.olderFailed = false;
    this.loadingNewer = false;
  }

  /** Whether newer events than those shown wait to be paged in. */
  get hasNewer() {
    return this.head !== null && this.cursor < this.head;
  }

  /** Show the first page, the newest or the one through a seq; later pages are pinned to its incarnation. @param {Page} page */
  first(page) {
    this.incarnation = page.incarnation ?? undefined;
    this.#show(joinItems(page.records.map(recordItem)), false);
    this.oldest = page.fromSeq;
    this.hasMore = page.hasMore;
    this.cursor = page.toSeq - 1;
    this.events.moved();
  }

  /** Nothing more is paged in, either way: the session was deleted. */
  stop() {
    this.hasMore = false;
    this.head = null;
  }

  /** @param {Item[]} items @param {boolean} older */
  #show(items, older) {
    if (older) this.elements.timeline.prepend(items);
    else this.elements.timeline.append(items);
    this.events.shown(items);
  }

  async older() {
    if (this.loadingOlder || !this.hasMore) return;
    const { timeline, scroller, older } = this.elements;
    this.loadingOlder = true;
    timeline.root.dataset.loading = "true";
    older.hidden = false;
    try {
      // `through` pins where the page ends, so it must join the oldest page shown exactly
      // (the client checks it); with the incarnation it makes the page immutable, so the browser
      // may cache it (§4.4), and a page of a session created again after a delete is refused.
      const { session, child, pageSize } = this.where;
      const options = { child, through: this.oldest - 1, maxMessages: pageSize, incarnation: this.incarnation };
      const page = await this.client.page(session, options);
      const height = scroller.scrollHeight;
      const top = scroller.scrollTop;
      this.#show(joinItems(page.records.map(recordItem)), true);
      // Keep what the reader was looking at in place: the new rows went above it.
      scroller.scrollTop = top + (scroller.scrollHeight - height);
      this.oldest = page.fromSeq;
      this.hasMore = page.hasMore;
      this.events.moved();
    } catch (error) {
      this.olderFailed = true;
      this.events.failed("older", error);
    } finally {
      this.loadingOlder = false;
      timeline.root.dataset.loading = "false";
      older.hidden = true;
    }
  }

  /** Page newer events in below the newest shown, up to `NEWER_SEQS` past it or the head; the shell hears when it is reached. */
  async newer() {
    if (this.loadingNewer || !this.hasNewer) return;
    const root = this.elements.timeline.root;
    this.loadingNewer = true;
    root.dataset.loadingNewer = "true";
    let failed = false;
    try {
      const through = Math.min(/** @type {number} */ (this.head), this.cursor + NEWER_SEQS);
      const { session, child } = this.where;
      /** @type {any[]} */
      const events = [];
      for await (const event of this.client.iterHistory(session, { child, after: this.cursor, through, incarnation: this.incarnation })) {
        events.push(event);
      }
      this.#show(joinItems(events.map(eventItem)), false);
      this.cursor = through;
      this.events.moved();
    } catch (error) {
      failed = true;
      this.events.failed("newer", error);
    } finally {
      this.loadingNewer = false;
      root.dataset.loadingNewer = "false";
    }
    if (!failed && this.head !== null && !this.hasNewer) this.events.atHead();
  }

  /** Page in older (then newer) items until they fill the screen, or none are left. */
  async fill() {
    const { scroller } = this.elements;
    while (scroller.scrollHeight <= scroller.clientHeight) {
      const before = [this.oldest, this.cursor];
      if (this.hasMore && !this.olderFailed) await this.older();
      else if (this.hasNewer) await this.newer();
      // Nothing came (a load under way already, or one that failed): the scroll handler takes over.
      if (this.oldest === before[0] && this.cursor === before[1]) return;
    }
  }
}

// The pages of the open session on screen: older ones go above as the reader nears the top.
//
// Every page after the first names the first one's incarnation (docs/protocol.md §2.5), so a delete
// and re-create between them is a `SessionDeletedError`, never another session's events joined to these.
import { HistoryClient } from "history-transport-client";
import { joinItems, recordItem } from "./items.js";

/**
 * What the shell hears of: items shown (to link the children they name), what is shown moved, and a
 * load that failed.
 * @typedef {{shown: (items: Item[]) => void, moved: () => void, failed: (what: "older", error: unknown) => void}} PagerEvents
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
    this.loadingOlder = false;
    this.olderFailed = false;
  }

  /** Show the first page, the newest; later pages are pinned to its incarnation. @param {Page} page */
  first(page) {
    this.incarnation = page.incarnation ?? undefined;
    this.#show(joinItems(page.records.map(recordItem)), false);
    this.oldest = page.fromSeq;
    this.hasMore = page.hasMore;
    this.cursor = page.toSeq - 1;
    this.events.moved();
  }

  /** Nothing more is paged in: the session was deleted. */
  stop() {
    this.hasMore = false;
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

  /** Page in older items until they fill the screen, or none are left. */
  async fill() {
    const { scroller } = this.elements;
    while (this.hasMore && !this.olderFailed && scroller.scrollHeight <= scroller.clientHeight) {
      const before = this.oldest;
      await this.older();
      // Nothing came (a load under way already): the scroll handler takes over.
      if (this.oldest === before) return;
    }
  }
}

// Links from the items that name a subagent child of this session to the child's view.
//
// A harness names a child where it starts or talks to it: a tool result ("started subagent
// ID"), a call's arguments (`subagent_id`), a workflow's `childId`, a relayed report. The
// session's children are listed once (`/v1/sessions/{this}/subagents`), and an item whose text
// names one of them, as the stored events spell its id, gets a link to it (with its call's
// other item). Any id format works: a harness's UUID, or the name an import gave a child.
import { HistoryClient } from "history-transport-client";

/** @typedef {import("./items.js").Item} Item */
/** @typedef {import("./timeline.js").Timeline} Timeline */

// The characters of a session id (docs/protocol.md §2.4): a name is matched whole, not inside a longer one.
const ID_CHAR = "A-Za-z0-9_:@~{}\\-";

/** @param {string} text */
function escape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * Every child of a session, through the listing's pages.
 * @param {HistoryClient} client @param {string} self
 * @returns {Promise<string[]>}
 */
async function listChildren(client, self) {
  /** @type {string[]} */
  const ids = [];
  let cursor;
  do {
    const listed = await client.subagents(self, { limit: 200, cursor });
    ids.push(...listed.sessions.map((session) => session.id));
    cursor = listed.nextCursor ?? undefined;
  } while (cursor !== undefined);
  return ids;
}

export class ChildLinks {
  /**
   * @param {Timeline} timeline
   * @param {HistoryClient} client
   * @param {string} self the session shown, whose children are linked
   */
  constructor(timeline, client, self) {
    this.timeline = timeline;
    this.self = self;
    // Links still being looked for; while any are, the page says so (`<html data-linking>`), for whoever waits on
    // them. Not the timeline: a mark there would be one more change to it, outside the frame that shows events.
    this.pending = 0;
    /** A pattern that finds any child's id in a text, or null when the session has none. @type {Promise<RegExp | null>} */
    this.pattern = listChildren(client, self).then(
      (ids) => {
        const names = ids.filter((id) => id !== self).sort((a, b) => b.length - a.length);
        if (!names.length) return null;
        return new RegExp(`(?<![.${ID_CHAR}])(?:${names.map(escape).join("|")})(?![${ID_CHAR}]|\\.[${ID_CHAR}.])`, "g");
      },
      (error) => {
        // The transcript is what the reader came for; a failed listing only leaves the links out.
        console.warn(`could not list the subagents of ${self}: ${error}`);
        return null;
      },
    );
  }

  /** Link the items just shown (or extended) that name a child. @param {Item[]} items */
  link(items) {
    const seqs = items.map((item) => item.seq0);
    const root = this.timeline.root.ownerDocument.documentElement;
    this.pending += 1;
    root.dataset.linking = "true";
    void this.pattern
      .then((pattern) => {
        if (pattern === null) return;
        for (const seq of seqs) {
          const node = this.timeline.nodeAt(seq);
          if (node === undefined) continue;
          for (const id of new Set(node.item.text.match(pattern) ?? [])) {
            const href = `?parent=${encodeURIComponent(this.self)}&session=${encodeURIComponent(id)}`;
            this.timeline.linkChild(node, href, id);
          }
        }
      })
      .finally(() => {
        this.pending -= 1;
        if (this.pending === 0) delete root.dataset.linking;
      });
  }
}

// Where each bookkeeping event is accounted: on the item on screen it belongs to, its carrier.
//
// A bookkeeping event (a block's start and end, a step's start and end, a normal finish, usage,
// the assembled message, a streamed call's `tool/call`, an approval's decision, a nested call's
// start) names a key (`absorb`); an item that shows what it belongs to offers that key (`offers`).
// The event is accounted on the first item on screen that offers its key: its seq joins that
// item's `data-seqs`, and whatever it adds (an approval's decision, a call's name) shows there.
// With no such item on screen it is shown itself, as a card or a raw row, and taken back when
// an older page or a live event brings its carrier. So every event is on screen exactly once.
import { mark } from "./render.js";

/** @typedef {import("./items.js").Item} Item */
/** @typedef {import("./render.js").Rendered} Rendered */

export class Carriers {
  /** @param {(node: Rendered) => void} remove takes a node off the screen */
  constructor(remove) {
    this.remove = remove;
    /** The item on screen that accounts for each key. @type {Map<string, Rendered>} */
    this.byKey = new Map();
    /** The bookkeeping events shown for want of a carrier, by the key they wait for. @type {Map<string, Rendered[]>} */
    this.orphans = new Map();
  }

  /**
   * Which of some new items (in seq order) are shown, and which are accounted on a carrier: one
   * on screen, or one among them. An event whose carrier is missing is shown; if it offers keys
   * itself (a block's end stands for the block when no delta was streamed), it carries others.
   * @param {Item[]} items
   * @returns {{shown: Item[], absorbed: Item[]}}
   */
  plan(items) {
    /** @type {Set<string>} */
    const offered = new Set();
    for (const item of items) if (!item.absorb) for (const key of item.offers ?? []) offered.add(key);
    const known = (/** @type {string} */ key) => offered.has(key) || this.byKey.has(key);
    /** @type {Set<Item>} */
    const absorbed = new Set();
    let pending = items.filter((item) => item.absorb);
    while (pending.length) {
      const waiting = pending.filter((item) => !known(/** @type {string} */ (item.absorb)));
      for (const item of pending) if (!waiting.includes(item)) absorbed.add(item);
      const carrier = waiting.find((item) => item.offers?.some((key) => !known(key)));
      if (carrier === undefined) break;
      for (const key of carrier.offers ?? []) offered.add(key);
      pending = waiting.filter((item) => item !== carrier);
    }
    return { shown: items.filter((item) => !absorbed.has(item)), absorbed: items.filter((item) => absorbed.has(item)) };
  }

  /**
   * After the shown items were rendered: register the keys they offer (taking back the events
   * shown for want of them), note the events among them that wait for a carrier, and account the
   * absorbed ones. Returns the nodes that took events back, whose marks may have changed.
   * @param {Rendered[]} added @param {Item[]} absorbed
   * @returns {Rendered[]}
   */
  settle(added, absorbed) {
    /** @type {Rendered[]} */
    const adopted = [];
    for (const node of added) {
      const key = node.item.absorb;
      if (key === undefined) continue;
      const waiting = this.orphans.get(key) ?? [];
      if (!waiting.includes(node)) waiting.push(node);
      this.orphans.set(key, waiting);
    }
    for (const node of added) {
      for (const key of node.item.offers ?? []) {
        if (!this.byKey.has(key)) this.byKey.set(key, node);
        const waiting = this.orphans.get(key);
        // An event shown for want of this key is accounted here now; one that is itself the
        // carrier on screen (a block's end) hands over what it carried.
        const taken = waiting?.filter((orphan) => orphan !== node) ?? [];
        if (!taken.length) continue;
        this.orphans.set(key, /** @type {Rendered[]} */ (waiting).filter((orphan) => !taken.includes(orphan)));
        for (const orphan of taken) this.#adopt(node, orphan);
        if (!adopted.includes(node)) adopted.push(node);
      }
    }
    for (const item of absorbed) {
      const carrier = this.byKey.get(/** @type {string} */ (item.absorb));
      if (carrier === undefined) continue;
      account(carrier, item, [item.seq0]);
    }
    return adopted;
  }

  /** Take back an event shown for want of `node`: its seqs, and those it carried, are accounted on `node`. @param {Rendered} node @param {Rendered} orphan */
  #adopt(node, orphan) {
    for (const [key, carrier] of this.byKey) if (carrier === orphan) this.byKey.set(key, node);
    for (const [key, waiting] of this.orphans) {
      if (waiting.includes(orphan)) this.orphans.set(key, waiting.filter((other) => other !== orphan));
    }
    this.remove(orphan);
    account(node, orphan.item, [orphan.item.seq0, ...orphan.absorbed]);
  }
}

/**
 * Account an event on its carrier: its seqs, and what it adds to what the carrier shows.
 * @param {Rendered} node @param {Item} item @param {number[]} seqs
 */
function account(node, item, seqs) {
  node.absorbed.push(...seqs);
  /** @type {Partial<Item>} */
  const more = {};
  if (item.decision !== undefined) more.decision = item.decision;
  if (node.item.callId === undefined && item.callId !== undefined) more.callId = item.callId;
  if (node.item.kind === "tool" && node.item.name === undefined && item.name !== undefined) {
    more.name = item.name;
    if (node.name) node.name.textContent = item.name;
  }
  if (Object.keys(more).length) {
    node.item = { ...node.item, ...more };
    mark(node);
  } else {
    node.el.dataset.seqs = node.absorbed.join(" ");
  }
}

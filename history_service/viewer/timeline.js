// The viewer's timeline: the rendered items of one element, in seq order, as pages and live events add them.
//
// Older pages prepend and live events append; a delta that continues an item on screen extends it
// in place. The timeline marks what edits and replacements hide, puts each model step's token
// usage on the step's last block (its `usage` chunk is not an item on screen), names each tool
// result's tool, and accounts for every bookkeeping event on the item it belongs to (carriers.js).
import { Carriers } from "./carriers.js";
import { Coverage } from "./coverage.js";
import { joins } from "./items.js";
import { handleCopies, mark, render, showTime, showUsage } from "./render.js";

/** @typedef {import("./items.js").Item} Item */
/** @typedef {import("./items.js").Usage} Usage */
/** @typedef {import("./render.js").Rendered} Rendered */

/** The rendered items of one timeline element, kept in seq order. */
export class Timeline {
  /** @param {HTMLElement} root */
  constructor(root) {
    this.root = root;
    /** @type {Rendered[]} */
    this.nodes = [];
    this.hidden = new Coverage();
    /** Each step's usage chunk (the newest seen) and the node showing it. @type {Map<string, {seq: number, usage: Usage, node: Rendered | null}>} */
    this.usages = new Map();
    this.carriers = new Carriers((node) => this.#remove(node));
    /** Each tool call's name, and the results on screen that answer it. @type {Map<string, {name?: string, results: Rendered[]}>} */
    this.calls = new Map();
    handleCopies(root);
  }

  /**
   * Show each step's token usage on the step's last block before its usage chunk (preferring
   * one not folded away), moving it when an older page brings a better one. Only the steps a
   * new usage chunk or a new block touches are looked at.
   * @param {Rendered[]} added the nodes just rendered or extended
   * @param {Item[]} items every item just added, joined or not
   */
  #placeUsage(added, items) {
    /** @type {Set<string>} */
    const steps = new Set();
    for (const item of items) {
      if (item.kind !== "usage" || item.step === undefined || item.usage === undefined) continue;
      const known = this.usages.get(item.step);
      if (known && known.seq >= item.seq0) continue;
      this.usages.set(item.step, { seq: item.seq0, usage: item.usage, node: known ? known.node : null });
      steps.add(item.step);
    }
    if (this.usages.size === 0) return;
    for (const node of added) if (node.item.step !== undefined && this.usages.has(node.item.step)) steps.add(node.item.step);
    for (const step of steps) {
      const entry = /** @type {{seq: number, usage: Usage, node: Rendered | null}} */ (this.usages.get(step));
      const carrier = this.#usageCarrier(step, entry.seq);
      if (entry.node && entry.node !== carrier) showUsage(entry.node, null);
      if (carrier && carrier.usage !== entry.usage) showUsage(carrier, entry.usage);
      entry.node = carrier;
    }
  }

  /** The node a step's usage goes on: of the step's blocks right before its chunk, the last one not folded, else the last. @param {string} step @param {number} seq */
  #usageCarrier(step, seq) {
    /** @type {Rendered | null} */
    let folded = null;
    for (let k = this.#firstEndingFrom(seq) - 1; k >= 0 && this.nodes[k].item.step === step; k--) {
      const node = this.nodes[k];
      if (node.item.kind === "usage") continue;
      if (node.el.tagName !== "DETAILS") return node;
      folded ??= node;
    }
    return folded;
  }

  /**
   * Mark the items that edits and replacements hide; they stay in place, dimmed and labelled,
   * since this is a history. An edit may arrive before or after what it hides, so a new range
   * marks the items already shown in the part of it nothing covered yet (found by seq in the
   * sorted nodes), and a new item is looked up in the ranges seen so far.
   * @param {Rendered[]} added the nodes just rendered or extended
   * @param {Item[]} items every item just added, joined or not
   */
  #markHidden(added, items) {
    for (const item of items) {
      if (!item.hides) continue;
      for (const piece of this.hidden.add(item.hides)) {
        for (let k = this.#firstEndingFrom(piece.start); k < this.nodes.length; k++) {
          const node = this.nodes[k];
          if (node.item.seq0 > piece.end) break;
          this.#hide(node);
        }
      }
    }
    if (this.hidden.empty) return;
    for (const node of added) this.#hide(node);
  }

  /** @param {Rendered} node */
  #hide(node) {
    if (node.el.dataset.hidden !== undefined) return;
    const why = this.hidden.why(node.item.seq0, node.item.seq1);
    if (why !== undefined) node.el.dataset.hidden = why;
  }

  /** The index of the first node that ends at or after `seq`; the nodes are in seq order. @param {number} seq */
  #firstEndingFrom(seq) {
    let low = 0;
    let high = this.nodes.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (this.nodes[mid].item.seq1 < seq) low = mid + 1;
      else high = mid;
    }
    return low;
  }

  /** Take a node off the screen: a bookkeeping event shown for want of its carrier, now accounted there. @param {Rendered} node */
  #remove(node) {
    const found = this.#firstEndingFrom(node.item.seq1);
    const at = this.nodes[found] === node ? found : this.nodes.indexOf(node);
    if (at !== -1) this.nodes.splice(at, 1);
    node.el.remove();
    for (const entry of this.usages.values()) if (entry.node === node) entry.node = null;
  }

  /**
   * Name each tool result after its call: the name comes with the call's deltas, its
   * `tool/call` or its block's end, on this page or another.
   * @param {Rendered[]} added @param {Item[]} items
   */
  #nameResults(added, items) {
    for (const item of items) {
      if (item.callId === undefined || item.kind === "tool-result" || item.name === undefined) continue;
      const call = this.calls.get(item.callId) ?? { results: [] };
      this.calls.set(item.callId, call);
      if (call.name !== undefined) continue;
      call.name = item.name;
      for (const result of call.results) this.#nameResult(result, call.name);
    }
    for (const node of added) {
      if (node.item.kind !== "tool-result" || node.item.callId === undefined) continue;
      const call = this.calls.get(node.item.callId) ?? { results: [] };
      this.calls.set(node.item.callId, call);
      if (!call.results.includes(node)) call.results.push(node);
      if (call.name !== undefined) this.#nameResult(node, call.name);
    }
  }

  /** @param {Rendered} node @param {string} name */
  #nameResult(node, name) {
    if (node.item.name === name) return;
    node.item = { ...node.item, name };
    mark(node);
  }

  /** The node on screen whose range holds `seq`, if any. @param {number} seq */
  nodeAt(seq) {
    const node = this.nodes[this.#firstEndingFrom(seq)];
    return node && node.item.seq0 <= seq ? node : undefined;
  }

  /** The node on screen that shows `seq`: the one whose range holds it, else the one that accounts for it. @param {number} seq */
  holding(seq) {
    return this.nodeAt(seq) ?? this.nodes.find((node) => node.absorbed.includes(seq));
  }

  /**
   * Link a node, and the other items of its tool call (the call and its result), to a subagent child's view.
   * @param {Rendered} named the node that names the child
   * @param {string} href
   * @param {string} child
   */
  linkChild(named, href, child) {
    const call = named.item.callId;
    for (const node of call === undefined ? [named] : this.nodes.filter((other) => other === named || other.item.callId === call)) {
      if (node.el.querySelector(`a.child[data-child="${CSS.escape(child)}"]`)) continue;
      const link = node.el.ownerDocument.createElement("a");
      link.className = "child";
      link.href = href;
      link.dataset.child = child;
      link.textContent = `Open subagent ${child}`;
      node.el.append(link);
    }
  }

  /** After nodes were rendered or extended: carriers, hidden marks, usage lines, result names. @param {Rendered[]} added @param {Item[]} absorbed @param {Item[]} items */
  #settle(added, absorbed, items) {
    const adopted = this.carriers.settle(added, absorbed);
    const touched = adopted.length ? added.concat(adopted) : added;
    this.#markHidden(touched, items);
    this.#placeUsage(touched, items);
    this.#nameResults(added, items);
  }

  /** Add newer items at the end; a delta that continues the last item extends it in place. @param {Item[]} items */
  append(items) {
    const fragment = this.root.ownerDocument.createDocumentFragment();
    /** @type {Item[]} */
    const fresh = [];
    /** The nodes extended. @type {Rendered[]} */
    const added = [];
    for (const item of items) {
      const last = this.nodes[this.nodes.length - 1];
      if (!fresh.some((other) => !other.absorb) && !item.absorb && last && joins(last.item, item)) {
        last.body.appendData(item.text);
        last.item = { ...last.item, seq1: item.seq1, text: last.item.text + item.text };
        if (last.name && !last.name.textContent && item.name) last.name.textContent = item.name;
        if (last.item.callId === undefined && item.callId !== undefined) last.item.callId = item.callId;
        mark(last);
        // It now spans more seqs: a range seen before may hide one of them.
        if (added[added.length - 1] !== last) added.push(last);
        continue;
      }
      fresh.push(item);
    }
    const { shown, absorbed } = this.carriers.plan(fresh);
    for (const item of shown) {
      const node = render(this.root.ownerDocument, item);
      this.nodes.push(node);
      added.push(node);
      fragment.append(node.el);
    }
    this.root.append(fragment);
    this.#settle(added, absorbed, items);
  }

  /** Add older items at the start, in their order. @param {Item[]} items */
  prepend(items) {
    const first = this.nodes[0];
    let older = items;
    let joined = false;
    const tail = older[older.length - 1];
    if (first && tail && !tail.absorb && joins(tail, first.item)) {
      first.body.insertData(0, tail.text);
      first.item = {
        ...first.item,
        seq0: tail.seq0,
        time: tail.time,
        text: tail.text + first.item.text,
        name: tail.name ?? first.item.name,
        callId: tail.callId ?? first.item.callId,
      };
      if (first.name && tail.name) first.name.textContent = tail.name;
      mark(first);
      showTime(first);
      older = older.slice(0, -1);
      joined = true;
    }
    const { shown, absorbed } = this.carriers.plan(older);
    const nodes = shown.map((item) => render(this.root.ownerDocument, item));
    const touched = first && joined ? [...nodes, first] : nodes;
    const fragment = this.root.ownerDocument.createDocumentFragment();
    for (const node of nodes) fragment.append(node.el);
    this.root.prepend(fragment);
    this.nodes = nodes.concat(this.nodes);
    this.#settle(touched, absorbed, items);
  }
}

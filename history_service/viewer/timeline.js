// The viewer's timeline: page records and live events become rendered items, in seq order.
//
// An item is one thing a reader sees: a run of one block's deltas (text, reasoning or a tool
// call's arguments), a user message, a tool result or a turn marker. A chunk row becomes one
// item through joinedText, without expanding it; a live delta of the same block, next in seq,
// joins the item in place. Every item carries its seq range, so order and coverage can be checked.
import { joinedText } from "history-transport-client";
import { Coverage } from "./coverage.js";

const DELTA_KINDS = { "text-delta": "text", "reasoning-delta": "reasoning", "tool-call-delta": "tool" };
const ROW_KINDS = { "text-chunks": "text", "reasoning-chunks": "reasoning", "tool-call-chunks": "tool" };

/**
 * An item, and what it hides when it is an edit (`conversationOp`) or a replacement (`surfaceOp`).
 * @typedef {{start: number, end: number, why: string}} Hiding
 * @typedef {{kind: string, key: string, seq0: number, seq1: number, text: string, name?: string, hides?: Hiding}} Item
 */

/** An item on screen: its element, the text node of its body and its name line (a tool call's). @typedef {{item: Item, el: HTMLElement, body: Text, name: HTMLElement | null}} Rendered */

/** @param {any} data @param {string} kind @param {any} chunk */
function blockKey(data, kind, chunk) {
  return JSON.stringify([kind, data.turn, data.step, chunk.index, kind === "tool" ? chunk.id : null]);
}

/**
 * The range an edit or a replacement hides (§2.1), or undefined.
 * @param {any} event
 * @returns {Hiding | undefined}
 */
function hiding(event) {
  const op = event.conversationOp ?? event.surfaceOp;
  if (!op || typeof op !== "object" || op.op !== "replace") return undefined;
  return { start: op.start, end: op.end, why: event.conversationOp ? "edited out" : "replaced" };
}

/** @param {any} content */
function messageText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((part) => part && part.type === "text" && typeof part.text === "string")
    .map((part) => part.text)
    .join("\n");
}

/**
 * The item of one logical event, or null for an event the viewer does not show.
 * @param {any} event
 * @returns {Item | null}
 */
export function eventItem(event) {
  const data = event.data;
  const seq = event.seq;
  if (event.type === "assistant/chunk" && data && typeof data === "object" && data.chunk) {
    const kind = DELTA_KINDS[/** @type {keyof DELTA_KINDS} */ (data.chunk.type)];
    if (!kind) return null;
    const chunk = data.chunk;
    const text = kind === "tool" ? chunk.argumentsDelta : chunk.text;
    if (typeof text !== "string") return null;
    const item = { kind, key: blockKey(data, kind, chunk), seq0: seq, seq1: seq, text };
    return kind === "tool" && typeof chunk.name === "string" ? { ...item, name: chunk.name } : item;
  }
  if (event.type === "user/message" && data && typeof data === "object") {
    const text = typeof data.text === "string" ? data.text : messageText(data.content);
    return withHiding({ kind: "user", key: "", seq0: seq, seq1: seq, text }, event);
  }
  // A message built from deltas is already on screen as they were; one without is shown itself.
  if (event.type === "assistant/message" && data && typeof data === "object" && !event.sourceEventSeqs?.length) {
    const message = data.message && typeof data.message === "object" ? data.message : data;
    const text = typeof message.text === "string" ? message.text : messageText(message.content);
    return withHiding({ kind: "assistant", key: "", seq0: seq, seq1: seq, text }, event);
  }
  if (event.type === "tool/result" && data && typeof data === "object") {
    const message = data.message && typeof data.message === "object" ? data.message : data;
    return withHiding({ kind: "tool-result", key: "", seq0: seq, seq1: seq, text: messageText(message.content) }, event);
  }
  if (event.type === "turn/start" && data && typeof data === "object" && data.turn !== undefined) {
    return { kind: "turn", key: "", seq0: seq, seq1: seq, text: String(data.turn) };
  }
  return null;
}

/** @param {Item} item @param {any} event @returns {Item} */
function withHiding(item, event) {
  const hides = hiding(event);
  return hides ? { ...item, hides } : item;
}

/**
 * The item of a page record (`{event}` or `{chunks}`, or a bare event or row).
 * @param {any} record
 * @returns {Item | null}
 */
export function recordItem(record) {
  const value = record.chunks ?? record.event ?? record;
  const kind = ROW_KINDS[/** @type {keyof ROW_KINDS} */ (value.type)];
  if (!kind) return eventItem(value);
  const data = value.data;
  const joined = joinedText(value);
  const members = kind === "tool" ? data.args.length : data.texts.length;
  const item = {
    kind,
    key: blockKey(data, kind, data),
    seq0: value.seq0,
    seq1: value.seq0 + members - 1,
    text: joined.text,
  };
  return kind === "tool" && typeof data.name === "string" ? { ...item, name: data.name } : item;
}

/** @param {Item} before @param {Item} after */
function joins(before, after) {
  return before.key !== "" && before.key === after.key && before.seq1 + 1 === after.seq0;
}

/**
 * Items in order, each run of one block joined.
 * @param {Iterable<Item | null>} items
 * @returns {Item[]}
 */
export function joinItems(items) {
  /** @type {Item[]} */
  const out = [];
  for (const item of items) {
    if (item === null) continue;
    const last = out[out.length - 1];
    if (last && joins(last, item)) {
      out[out.length - 1] = { ...last, seq1: item.seq1, text: last.text + item.text, name: last.name ?? item.name };
    } else {
      out.push(item);
    }
  }
  return out;
}

const LABELS = {
  text: "",
  reasoning: "Reasoning",
  tool: "Tool call",
  user: "User",
  assistant: "Assistant",
  "tool-result": "Tool result",
  turn: "Turn",
};

/** The rendered items of one timeline element, kept in seq order. */
export class Timeline {
  /** @param {HTMLElement} root */
  constructor(root) {
    this.root = root;
    /** @type {Rendered[]} */
    this.nodes = [];
    this.hidden = new Coverage();
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

  /** @param {Item} item @returns {Rendered} */
  #render(item) {
    const doc = this.root.ownerDocument;
    const el = doc.createElement(item.kind === "reasoning" ? "details" : "div");
    el.className = `item ${item.kind}`;
    /** @type {HTMLElement | null} */
    let name = null;
    if (item.kind === "reasoning") {
      const summary = doc.createElement("summary");
      summary.textContent = LABELS.reasoning;
      el.append(summary);
    } else if (item.kind === "tool") {
      name = doc.createElement("div");
      name.className = "name";
      name.textContent = item.name ?? "";
      el.append(name);
    } else if (LABELS[/** @type {keyof LABELS} */ (item.kind)]) {
      const label = doc.createElement("div");
      label.className = "label";
      label.textContent = LABELS[/** @type {keyof LABELS} */ (item.kind)];
      el.append(label);
    }
    const body = doc.createElement(item.kind === "tool" || item.kind === "tool-result" ? "pre" : "div");
    body.className = "body";
    const text = doc.createTextNode(item.text);
    body.append(text);
    el.append(body);
    this.#mark(el, item);
    return { item, el, body: text, name };
  }

  /** @param {HTMLElement} el @param {Item} item */
  #mark(el, item) {
    el.dataset.kind = item.kind;
    el.dataset.seq0 = String(item.seq0);
    el.dataset.seq1 = String(item.seq1);
  }

  /** Add newer items at the end; a delta that continues the last item extends it in place. @param {Item[]} items */
  append(items) {
    const fragment = this.root.ownerDocument.createDocumentFragment();
    /** The nodes rendered or extended. @type {Rendered[]} */
    const added = [];
    for (const item of items) {
      const last = this.nodes[this.nodes.length - 1];
      if (last && joins(last.item, item)) {
        last.body.appendData(item.text);
        last.item = { ...last.item, seq1: item.seq1, text: last.item.text + item.text };
        if (last.name && !last.name.textContent && item.name) last.name.textContent = item.name;
        this.#mark(last.el, last.item);
        // It now spans more seqs: a range seen before may hide one of them.
        if (added[added.length - 1] !== last) added.push(last);
        continue;
      }
      const node = this.#render(item);
      this.nodes.push(node);
      added.push(node);
      fragment.append(node.el);
    }
    this.root.append(fragment);
    this.#markHidden(added, items);
  }

  /** Add older items at the start, in their order. @param {Item[]} items */
  prepend(items) {
    const first = this.nodes[0];
    let older = items;
    if (first && older.length && joins(older[older.length - 1], first.item)) {
      const tail = older[older.length - 1];
      first.body.insertData(0, tail.text);
      first.item = { ...first.item, seq0: tail.seq0, text: tail.text + first.item.text, name: tail.name ?? first.item.name };
      if (first.name && tail.name) first.name.textContent = tail.name;
      this.#mark(first.el, first.item);
      older = older.slice(0, -1);
    }
    const nodes = older.map((item) => this.#render(item));
    const touched = first && older !== items ? [...nodes, first] : nodes;
    const fragment = this.root.ownerDocument.createDocumentFragment();
    for (const node of nodes) fragment.append(node.el);
    this.root.prepend(fragment);
    this.nodes = nodes.concat(this.nodes);
    this.#markHidden(touched, items);
  }
}

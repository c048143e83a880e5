// The viewer's timeline: page records and live events become rendered items, in seq order.
//
// An item is one thing a reader sees: a run of one block's deltas (text, reasoning or a tool
// call's arguments), a user message, a tool result or a turn marker. A chunk row becomes one
// item through joinedText, without expanding it; a live delta of the same block, next in seq,
// joins the item in place. Every item carries its seq range, so order and coverage can be checked.
//
// An item also carries its first event's time and, for a model step's blocks, the step; a step's
// `usage` chunk is not an item on screen but a line on the step's last block (`#placeUsage`).
import { joinedText } from "history-transport-client";
import { Coverage } from "./coverage.js";

const DELTA_KINDS = { "text-delta": "text", "reasoning-delta": "reasoning", "tool-call-delta": "tool" };
const ROW_KINDS = { "text-chunks": "text", "reasoning-chunks": "reasoning", "tool-call-chunks": "tool" };

/**
 * An item, and what it hides when it is an edit (`conversationOp`) or a replacement (`surfaceOp`).
 * @typedef {{start: number, end: number, why: string}} Hiding
 * A step's token counts, as the harness's `usage` chunk gives them.
 * @typedef {{inputTokens?: number, outputTokens?: number, cacheReadTokens?: number, reasoningTokens?: number}} Usage
 * An item may also carry its tool call's id (`callId`), whether a tool result is an error
 * (`error`), for injected context the kind of its source (`source`), its first event's time
 * (`time`), the model step its blocks belong to (`step`) and token counts (`usage`). A `usage`
 * item is a step's usage chunk: never rendered itself.
 * @typedef {{kind: string, key: string, seq0: number, seq1: number, text: string, name?: string, hides?: Hiding, callId?: string, error?: boolean, source?: string, time?: number, step?: string, usage?: Usage}} Item
 */

/**
 * An item on screen: its element, the text node of its body, its name line (a tool call's),
 * the formatted copy of its arguments (a tool call's, once they parse as JSON) and its meta
 * line (time, token usage, copy button), which stays outside the body.
 * @typedef {{item: Item, el: HTMLElement, body: Text, name: HTMLElement | null, pretty: HTMLElement | null, meta: HTMLElement, usage: Usage | null}} Rendered
 */

const USAGE_FIELDS = /** @type {const} */ (["inputTokens", "outputTokens", "cacheReadTokens", "reasoningTokens"]);
// Each count's name in the usage line's title, and, for the two the line itself shows, its short name.
const USAGE_NAMES = { inputTokens: "input", outputTokens: "output", cacheReadTokens: "cache read", reasoningTokens: "reasoning" };
const USAGE_SHORT = { inputTokens: "in", outputTokens: "out" };
// The time on each item: short and local; its title says the date too, and `datetime` the ISO time.
const SHORT_TIME = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
const FULL_TIME = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "long" });
const COUNT = new Intl.NumberFormat();
// Items a reader may want to copy: everything but turn markers.
const COPYABLE = new Set(["text", "reasoning", "tool", "user", "assistant", "tool-result", "context"]);

/** @param {any} data @param {string} kind @param {any} chunk */
function blockKey(data, kind, chunk) {
  return JSON.stringify([kind, data.turn, data.step, chunk.index, kind === "tool" ? chunk.id : null]);
}

/** The model step a chunk belongs to, or undefined when it names none. @param {any} data */
function stepKey(data) {
  return data.step === undefined ? undefined : JSON.stringify([data.turn ?? null, data.step]);
}

/** Token counts from a usage object: its numeric fields, or undefined when it has none. @param {any} value @returns {Usage | undefined} */
function usageOf(value) {
  if (!value || typeof value !== "object") return undefined;
  /** @type {Usage} */
  const out = {};
  for (const field of USAGE_FIELDS) if (typeof value[field] === "number") out[field] = value[field];
  return Object.keys(out).length ? out : undefined;
}

/**
 * The time an event carries, or undefined. A log that recorded none reads as time 0 (§13),
 * so 0 is no time, and neither is one outside the range a Date holds.
 * @param {unknown} time
 */
function timeOf(time) {
  return typeof time === "number" && time !== 0 && Number.isFinite(new Date(time).getTime()) ? time : undefined;
}

/** The text an item shows, which its copy button copies and find searches: a tool call's formatted arguments once they parse. @param {Element} el */
export function shownText(el) {
  const shown = el.classList.contains("formatted") ? el.querySelector(":scope > .pretty") : el.querySelector(":scope > .body");
  return shown?.textContent ?? "";
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

/**
 * The text of a message's content: its text parts, and the text nested in its tool-result
 * parts (a harness's tool result holds `{type: "tool-result", content: [...]}`), joined by lines.
 * @param {any} content
 * @returns {string}
 */
export function messageText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  /** @type {string[]} */
  const texts = [];
  for (const part of content) {
    if (!part || typeof part !== "object") continue;
    if (part.type === "text" && typeof part.text === "string") texts.push(part.text);
    else if (part.type === "tool-result") texts.push(messageText(part.content));
  }
  return texts.join("\n");
}

/** Whether a tool result says it failed: its own flag, an error beside it, or a part's flag. @param {any} data @param {any} message */
function isErrorResult(data, message) {
  if (data.isError === true || message.isError === true || (data.error !== undefined && data.error !== null)) return true;
  return Array.isArray(message.content) && message.content.some((/** @type {any} */ part) => part && part.isError === true);
}

/** The call a tool result answers. @param {any} data @param {any} message @returns {string | undefined} */
function resultCallId(data, message) {
  if (typeof data.callId === "string") return data.callId;
  if (message.source && typeof message.source.callId === "string") return message.source.callId;
  const part = Array.isArray(message.content) ? message.content.find((/** @type {any} */ p) => p && typeof p.toolCallId === "string") : undefined;
  return part ? part.toolCallId : undefined;
}

/**
 * The item of one logical event, or null for an event the viewer does not show.
 * @param {any} event
 * @returns {Item | null}
 */
export function eventItem(event) {
  const data = event.data;
  const seq = event.seq;
  const time = timeOf(event.time);
  if (event.type === "assistant/chunk" && data && typeof data === "object" && data.chunk) {
    const chunk = data.chunk;
    if (chunk.type === "usage") {
      const usage = usageOf(chunk.usage);
      const step = stepKey(data);
      return usage && step ? { kind: "usage", key: "", seq0: seq, seq1: seq, text: "", step, usage } : null;
    }
    const kind = DELTA_KINDS[/** @type {keyof DELTA_KINDS} */ (chunk.type)];
    if (!kind) return null;
    const text = kind === "tool" ? chunk.argumentsDelta : chunk.text;
    if (typeof text !== "string") return null;
    const item = withStep({ kind, key: blockKey(data, kind, chunk), seq0: seq, seq1: seq, text, time }, data);
    return kind === "tool" ? toolCall(item, chunk) : item;
  }
  if (event.type === "user/message" && data && typeof data === "object") {
    const text = typeof data.text === "string" ? data.text : messageText(data.content);
    // Context the harness injected (its runtime context, a plugin's, a subagent's report) is not the user.
    const source = data.source && typeof data.source === "object" ? data.source.kind : undefined;
    if (typeof source === "string" && source !== "user") {
      return withHiding({ kind: "context", key: "", seq0: seq, seq1: seq, text, source, time }, event);
    }
    return withHiding({ kind: "user", key: "", seq0: seq, seq1: seq, text, time }, event);
  }
  // A message built from deltas is already on screen as they were; one without is shown itself.
  if (event.type === "assistant/message" && data && typeof data === "object" && !event.sourceEventSeqs?.length) {
    const message = data.message && typeof data.message === "object" ? data.message : data;
    const text = typeof message.text === "string" ? message.text : messageText(message.content);
    /** @type {Item} */
    const item = { kind: "assistant", key: "", seq0: seq, seq1: seq, text, time };
    const usage = usageOf(message.usage ?? data.usage);
    if (usage) item.usage = usage;
    return withHiding(item, event);
  }
  if (event.type === "tool/result" && data && typeof data === "object") {
    const message = data.message && typeof data.message === "object" ? data.message : data;
    /** @type {Item} */
    const item = { kind: "tool-result", key: "", seq0: seq, seq1: seq, text: messageText(message.content), time };
    if (isErrorResult(data, message)) item.error = true;
    const callId = resultCallId(data, message);
    if (callId !== undefined) item.callId = callId;
    return withHiding(item, event);
  }
  if (event.type === "turn/start" && data && typeof data === "object" && data.turn !== undefined) {
    return { kind: "turn", key: "", seq0: seq, seq1: seq, text: String(data.turn), time };
  }
  return null;
}

/** A tool call's item with its name and call id, where the chunk or row has them. @param {Item} item @param {any} source @returns {Item} */
function toolCall(item, source) {
  const out = { ...item };
  if (typeof source.name === "string") out.name = source.name;
  if (typeof source.id === "string") out.callId = source.id;
  return out;
}

/** @param {Item} item @param {any} data @returns {Item} */
function withStep(item, data) {
  const step = stepKey(data);
  return step === undefined ? item : { ...item, step };
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
  const item = withStep(
    {
      kind,
      key: blockKey(data, kind, data),
      seq0: value.seq0,
      seq1: value.seq0 + members - 1,
      text: joined.text,
      time: timeOf(value.time0),
    },
    data,
  );
  return kind === "tool" ? toolCall(item, data) : item;
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
      out[out.length - 1] = {
        ...last,
        seq1: item.seq1,
        text: last.text + item.text,
        name: last.name ?? item.name,
        callId: last.callId ?? item.callId,
      };
    } else {
      out.push(item);
    }
  }
  return out;
}

const LABELS = {
  text: "Assistant",
  reasoning: "Reasoning",
  tool: "Tool call",
  user: "User",
  assistant: "Assistant",
  "tool-result": "Tool result",
  context: "Context",
  turn: "Turn",
};

/** A tool call's arguments as indented JSON, or null while they do not parse (yet). @param {string} text */
export function prettyArguments(text) {
  if (!text.trim()) return null;
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return null;
  }
}

/**
 * Put `text` on the clipboard; true when it got there. Without the Clipboard API (a page not
 * served from a secure origin) a selected, off-screen textarea is copied instead.
 * @param {Document} doc @param {string} text
 */
async function copyText(doc, text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const area = doc.createElement("textarea");
    area.className = "copy-source";
    area.value = text;
    doc.body.append(area);
    area.select();
    try {
      return doc.execCommand("copy");
    } finally {
      area.remove();
    }
  }
}

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
    root.addEventListener("click", (event) => {
      const button = event.target instanceof Element ? event.target.closest("button.copy") : null;
      const el = button?.closest(".item");
      if (!button || !el) return;
      void copyText(root.ownerDocument, shownText(el)).then((copied) => {
        const state = copied ? "copied" : "failed";
        /** @type {HTMLElement} */ (button).dataset.state = state;
        button.textContent = copied ? "Copied" : "Copy failed";
        setTimeout(() => {
          if (/** @type {HTMLElement} */ (button).dataset.state !== state) return;
          delete (/** @type {HTMLElement} */ (button).dataset.state);
          button.textContent = "Copy";
        }, 1500);
      });
    });
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
      if (entry.node && entry.node !== carrier) this.#showUsage(entry.node, null);
      if (carrier && carrier.usage !== entry.usage) this.#showUsage(carrier, entry.usage);
      entry.node = carrier;
    }
  }

  /** The node a step's usage goes on: of the step's blocks right before its chunk, the last one not folded, else the last. @param {string} step @param {number} seq */
  #usageCarrier(step, seq) {
    /** @type {Rendered | null} */
    let folded = null;
    for (let k = this.#firstEndingFrom(seq) - 1; k >= 0 && this.nodes[k].item.step === step; k--) {
      const node = this.nodes[k];
      if (node.el.tagName !== "DETAILS") return node;
      folded ??= node;
    }
    return folded;
  }

  /** @param {Rendered} node @param {Usage | null} usage */
  #showUsage(node, usage) {
    node.usage = usage;
    let el = /** @type {HTMLElement | null} */ (node.meta.querySelector(":scope > .usage"));
    if (usage === null) {
      el?.remove();
      return;
    }
    if (el === null) {
      el = node.el.ownerDocument.createElement("span");
      el.className = "usage";
      node.meta.insertBefore(el, node.meta.querySelector(":scope > .copy"));
    }
    const short = [];
    const all = [];
    for (const field of USAGE_FIELDS) {
      const value = usage[field];
      if (value === undefined) {
        delete el.dataset[field];
        continue;
      }
      el.dataset[field] = String(value);
      all.push(`${USAGE_NAMES[field]} ${COUNT.format(value)}`);
      if (field === "inputTokens" || field === "outputTokens") short.push(`${COUNT.format(value)} ${USAGE_SHORT[field]}`);
    }
    el.textContent = `${(short.length ? short : all).join(" · ")} tokens`;
    el.title = `Tokens this step: ${all.join(", ")}`;
  }

  /** @param {Rendered} node */
  #showTime(node) {
    const time = node.item.time;
    let el = /** @type {HTMLTimeElement | null} */ (node.meta.querySelector(":scope > time"));
    if (time === undefined) {
      el?.remove();
      return;
    }
    if (el === null) {
      el = node.el.ownerDocument.createElement("time");
      node.meta.prepend(el);
    }
    const date = new Date(time);
    el.dateTime = date.toISOString();
    el.title = FULL_TIME.format(date);
    el.textContent = SHORT_TIME.format(date);
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
    const folded = item.kind === "reasoning" || item.kind === "context";
    const el = doc.createElement(folded ? "details" : "div");
    el.className = `item ${item.kind}`;
    // Time, usage and the copy button: outside the label and the body, which hold only the item's own text.
    const meta = doc.createElement("div");
    meta.className = "meta";
    if (COPYABLE.has(item.kind)) {
      const copy = doc.createElement("button");
      copy.type = "button";
      copy.className = "copy";
      copy.title = "Copy the text shown";
      copy.textContent = "Copy";
      meta.append(copy);
    }
    /** @type {HTMLElement | null} */
    let name = null;
    /** @type {HTMLElement | null} */
    let pretty = null;
    if (folded) {
      const summary = doc.createElement("summary");
      summary.textContent = item.kind === "context" ? `${LABELS.context}: ${item.source}` : LABELS.reasoning;
      el.append(summary);
    }
    // After a details element's summary: in its folded part.
    el.append(meta);
    if (item.kind === "tool") {
      name = doc.createElement("div");
      name.className = "name";
      name.textContent = item.name ?? "";
      el.append(name);
    } else if (item.kind === "tool-result" && item.error) {
      const label = doc.createElement("div");
      label.className = "label";
      label.textContent = "Tool result: error";
      el.append(label);
    } else if (!folded && LABELS[/** @type {keyof LABELS} */ (item.kind)]) {
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
    if (item.kind === "tool") {
      // The arguments as sent stay in the body; a formatted copy is shown once they parse.
      pretty = doc.createElement("pre");
      pretty.className = "pretty";
      el.append(pretty);
    }
    /** @type {Rendered} */
    const node = { item, el, body: text, name, pretty, meta, usage: null };
    this.#mark(node);
    this.#showTime(node);
    if (item.usage) this.#showUsage(node, item.usage);
    return node;
  }

  /** @param {Rendered} node */
  #mark(node) {
    const { el, item } = node;
    el.dataset.kind = item.kind;
    el.dataset.seq0 = String(item.seq0);
    el.dataset.seq1 = String(item.seq1);
    if (item.error) el.dataset.error = "true";
    if (item.callId !== undefined) el.dataset.callId = item.callId;
    if (node.pretty) {
      const formatted = prettyArguments(item.text);
      node.pretty.textContent = formatted ?? "";
      el.classList.toggle("formatted", formatted !== null);
    }
  }

  /**
   * Link the items of one tool call (the call and its result) to a subagent child's view.
   * @param {Item} item an item that names the child
   * @param {string} href
   * @param {string} child
   */
  linkChild(item, href, child) {
    for (const node of this.nodes) {
      const same = node.item === item || (item.callId !== undefined && node.item.callId === item.callId);
      if (!same || node.el.querySelector(`a.child[data-child="${CSS.escape(child)}"]`)) continue;
      const link = node.el.ownerDocument.createElement("a");
      link.className = "child";
      link.href = href;
      link.dataset.child = child;
      link.textContent = `Open subagent ${child}`;
      node.el.append(link);
    }
  }

  /** Add newer items at the end; a delta that continues the last item extends it in place. @param {Item[]} items */
  append(items) {
    const fragment = this.root.ownerDocument.createDocumentFragment();
    /** The nodes rendered or extended. @type {Rendered[]} */
    const added = [];
    for (const item of items) {
      if (item.kind === "usage") continue;
      const last = this.nodes[this.nodes.length - 1];
      if (last && joins(last.item, item)) {
        last.body.appendData(item.text);
        last.item = { ...last.item, seq1: item.seq1, text: last.item.text + item.text };
        if (last.name && !last.name.textContent && item.name) last.name.textContent = item.name;
        if (last.item.callId === undefined && item.callId !== undefined) last.item.callId = item.callId;
        this.#mark(last);
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
    this.#placeUsage(added, items);
  }

  /** Add older items at the start, in their order. @param {Item[]} items */
  prepend(items) {
    const first = this.nodes[0];
    let older = items.filter((item) => item.kind !== "usage");
    let joined = false;
    if (first && older.length && joins(older[older.length - 1], first.item)) {
      const tail = older[older.length - 1];
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
      this.#mark(first);
      this.#showTime(first);
      older = older.slice(0, -1);
      joined = true;
    }
    const nodes = older.map((item) => this.#render(item));
    const touched = first && joined ? [...nodes, first] : nodes;
    const fragment = this.root.ownerDocument.createDocumentFragment();
    for (const node of nodes) fragment.append(node.el);
    this.root.prepend(fragment);
    this.nodes = nodes.concat(this.nodes);
    this.#markHidden(touched, items);
    this.#placeUsage(touched, items);
  }
}

// An item on screen: its element, label, body and meta line (time, token usage, copy button).
import { USAGE_FIELDS } from "./items.js";
import { renderMarkdown } from "./markdown.js";

/** @typedef {import("./items.js").Item} Item */
/** @typedef {import("./items.js").Usage} Usage */

/**
 * An item on screen: its element, the text node of its body, its name line (a tool call's),
 * its call line (a tool call's or result's id, and a result's tool), the formatted copy of its
 * JSON (a tool call's arguments, a result's text, once they parse), its text rendered as Markdown
 * (assistant text's), its label (a card's title) and its meta line (time, token usage, copy
 * button), which stays outside the body. `absorbed` are the seqs of the bookkeeping events it
 * accounts for (`data-seqs`).
 * @typedef {{item: Item, el: HTMLElement, body: Text, name: HTMLElement | null, call: HTMLElement | null, pretty: HTMLElement | null, markdown: HTMLElement | null, label: HTMLElement | null, meta: HTMLElement, usage: Usage | null, absorbed: number[]}} Rendered
 */

// Each count's name in the usage line's title, and, for the two the line itself shows, its short name.
const USAGE_NAMES = { inputTokens: "input", outputTokens: "output", cacheReadTokens: "cache read", reasoningTokens: "reasoning" };
const USAGE_SHORT = { inputTokens: "in", outputTokens: "out" };
// The time on each item: short and local; its title says the date too, and `datetime` the ISO time.
const SHORT_TIME = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
const FULL_TIME = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "long" });
const COUNT = new Intl.NumberFormat();
// Items whose text is the model's Markdown, shown rendered; the raw text stays in the body, for copy and find.
const MARKDOWN = new Set(["text", "assistant"]);
// Items folded away, their summary a line: reasoning, injected context, raw rows.
const FOLDED = new Set(["reasoning", "context", "raw", "usage"]);
// Items whose body is preformatted: a call's arguments, a result, an event's JSON.
const PREFORMATTED = new Set(["tool", "tool-result", "raw", "usage"]);
// Items whose text may be JSON, shown indented once it parses.
const JSON_KINDS = new Set(["tool", "tool-result"]);

const LABELS = {
  text: "Assistant",
  reasoning: "Reasoning",
  tool: "Tool call",
  user: "User",
  assistant: "Assistant",
  "tool-result": "Tool result",
  context: "Context",
  turn: "Turn",
  card: "Event",
  raw: "Event",
  usage: "Token usage",
};

/** The text an item shows, which its copy button copies and find searches: a tool call's formatted arguments once they parse. @param {Element} el */
export function shownText(el) {
  const shown = el.classList.contains("formatted") ? el.querySelector(":scope > .pretty") : el.querySelector(":scope > .body");
  return shown?.textContent ?? "";
}

/** A call's arguments or a result's text as indented JSON, or null while it does not parse (yet) or is no object or array. @param {string} text */
export function prettyJson(text) {
  const trimmed = text.trim();
  if (!trimmed.startsWith("{") && !trimmed.startsWith("[")) return null;
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

/** Copy an item's shown text when its copy button is clicked; the button says whether it got there. @param {HTMLElement} root */
export function handleCopies(root) {
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

/** @param {Document} doc @param {string} tag @param {string} className */
function element(doc, tag, className) {
  const el = doc.createElement(tag);
  el.className = className;
  return el;
}

/** An item's element. @param {Document} doc @param {Item} item @returns {Rendered} */
export function render(doc, item) {
  const folded = FOLDED.has(item.kind);
  const el = element(doc, folded ? "details" : "div", `item ${item.kind}`);
  // Time, usage and the copy button: outside the label and the body, which hold only the item's own text.
  const meta = element(doc, "div", "meta");
  if (item.kind !== "turn" && item.tone !== "quiet") {
    const copy = element(doc, "button", "copy");
    /** @type {HTMLButtonElement} */ (copy).type = "button";
    copy.title = "Copy the text shown";
    copy.textContent = "Copy";
    meta.append(copy);
  }
  /** @type {HTMLElement | null} */
  let name = null;
  /** @type {HTMLElement | null} */
  let label = null;
  if (folded) {
    const summary = doc.createElement("summary");
    summary.textContent =
      item.kind === "context" ? `${LABELS.context}: ${item.source}` : item.kind === "reasoning" ? LABELS.reasoning : item.title ?? "";
    el.append(summary);
  }
  // After a details element's summary: in its folded part.
  el.append(meta);
  if (item.kind === "tool") {
    name = element(doc, "div", "name");
    name.textContent = item.name ?? "";
    el.append(name);
  } else if (!folded) {
    label = element(doc, "div", "label");
    label.textContent =
      item.kind === "tool-result" && item.error ? "Tool result: error" : item.title ?? LABELS[/** @type {keyof LABELS} */ (item.kind)] ?? item.kind;
    el.append(label);
  }
  /** @type {HTMLElement | null} */
  let call = null;
  if (item.kind === "tool" || item.kind === "tool-result") {
    call = element(doc, "div", "call");
    el.append(call);
  }
  const body = element(doc, PREFORMATTED.has(item.kind) ? "pre" : "div", "body");
  const text = doc.createTextNode(item.text);
  body.append(text);
  el.append(body);
  // The text as sent stays in the body; a formatted copy is shown once it parses.
  const pretty = JSON_KINDS.has(item.kind) ? element(doc, "pre", "pretty") : null;
  if (pretty) el.append(pretty);
  const markdown = MARKDOWN.has(item.kind) ? element(doc, "div", "markdown") : null;
  if (markdown) el.append(markdown);
  /** @type {Rendered} */
  const node = { item, el, body: text, name, call, pretty, markdown, label, meta, usage: null, absorbed: [] };
  mark(node);
  showTime(node);
  if (item.usage) showUsage(node, item.usage);
  return node;
}

/** Bring a node's data attributes, call line, formatted JSON, Markdown and decision up to its item. @param {Rendered} node */
export function mark(node) {
  const { el, item } = node;
  el.dataset.kind = item.kind;
  el.dataset.seq0 = String(item.seq0);
  el.dataset.seq1 = String(item.seq1);
  if (item.type !== undefined) el.dataset.type = item.type;
  if (item.tone !== undefined) el.dataset.tone = item.tone;
  if (item.error) el.dataset.error = "true";
  if (item.callId !== undefined) el.dataset.callId = item.callId;
  if (node.absorbed.length) el.dataset.seqs = node.absorbed.join(" ");
  if (node.call) {
    const parts = [item.kind === "tool-result" ? item.name : undefined, item.callId].filter((part) => part !== undefined);
    node.call.textContent = parts.join(" · ");
  }
  if (node.pretty) {
    const formatted = prettyJson(item.text);
    node.pretty.textContent = formatted ?? "";
    el.classList.toggle("formatted", formatted !== null);
  }
  if (node.markdown) {
    renderMarkdown(node.markdown, item.text);
    el.classList.add("rendered");
  }
  if (node.label && item.decision !== undefined) {
    const badge = node.label.querySelector(":scope > .decision") ?? node.label.appendChild(element(el.ownerDocument, "span", "decision"));
    badge.textContent = item.decision;
    el.dataset.decision = item.decision;
  }
}

/** Show the item's time on its meta line, or none. @param {Rendered} node */
export function showTime(node) {
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

/** Show a step's token usage on a node's meta line, or none. @param {Rendered} node @param {Usage | null} usage */
export function showUsage(node, usage) {
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

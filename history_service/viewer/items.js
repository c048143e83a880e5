// The viewer's items: page records and live events become the things a reader sees, in seq order.
//
// An item is one thing a reader sees: a run of one block's deltas (text, reasoning or a tool
// call's arguments), a user message, a tool result, a turn marker, or a card for any other event
// (events.js). A chunk row becomes one item through joinedText, without expanding it; a live delta
// of the same block, next in seq, joins the item in place. Every item carries its seq range, so
// order and coverage can be checked.
//
// Every event becomes an item: nothing in a log is dropped. A bookkeeping event (a block's start
// and end, a step's start and end, a normal finish, the assembled message, a streamed call's
// `tool/call`, a step's usage) names the item it belongs to (`absorb`, a key that item `offers`)
// and is accounted there; the timeline shows it itself only when no such item is on screen.
//
// An item also carries its first event's time and, for a model step's blocks, the step; a step's
// `usage` chunk is not an item on screen but a line on the step's last block (timeline.js).
import { joinedText } from "history-transport-client";
import { eventCard, rawItem } from "./events.js";
import { knownTime } from "./when.js";

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
 * item is a step's usage chunk: never rendered itself while its step has a block on screen.
 * A card has its event's `type`, a `title` and a `tone` (`error`, `warn`, `ok` or `quiet`); an
 * approval's card its `decision`. `offers` are the keys of the bookkeeping events an item
 * accounts for; `absorb` is the key of the item a bookkeeping event belongs to.
 * @typedef {{kind: string, key: string, seq0: number, seq1: number, text: string, name?: string, hides?: Hiding, callId?: string, error?: boolean, source?: string, time?: number, step?: string, usage?: Usage, type?: string, title?: string, tone?: string, decision?: string, offers?: string[], absorb?: string}} Item
 */


export const USAGE_FIELDS = /** @type {const} */ (["inputTokens", "outputTokens", "cacheReadTokens", "reasoningTokens"]);

/** @param {any} data @param {string} kind @param {any} chunk */
function blockKey(data, kind, chunk) {
  return JSON.stringify([kind, data.turn, data.step, chunk.index, kind === "tool" ? chunk.id : null]);
}

/** The model step a chunk belongs to, or undefined when it names none. @param {any} data */
export function stepKey(data) {
  return data && typeof data === "object" && data.step !== undefined ? JSON.stringify([data.turn ?? null, data.step]) : undefined;
}

/** The key of a step's bookkeeping, offered by the items that show the step's output. @param {any} data */
export function stepCarrier(data) {
  const step = stepKey(data);
  return step === undefined ? undefined : `step:${step}`;
}

/** The key of one block's start and end, offered by the item of its deltas. @param {any} data @param {any} chunk */
function blockCarrier(data, chunk) {
  return `block:${JSON.stringify([data.turn ?? null, data.step ?? null, chunk.index ?? null])}`;
}

/** The key of a tool call, offered by the item that shows it. @param {string | undefined} id */
export function callCarrier(id) {
  return id === undefined ? undefined : `call:${id}`;
}

/** The keys an item showing a step's output offers. @param {...(string | undefined)} keys @returns {string[]} */
function offering(...keys) {
  return /** @type {string[]} */ (keys.filter((key) => key !== undefined));
}

/** A bookkeeping event: accounted on the item that offers `key`, or shown as `fallback` when none is on screen. @param {Item} fallback @param {string | undefined} key @returns {Item} */
function absorbed(fallback, key) {
  return key === undefined ? fallback : { ...fallback, absorb: key };
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

// A block's kind by its `blockType` (block-start) or its `block.type` (block-end).
const BLOCK_KINDS = { text: "text", reasoning: "reasoning", "tool-call": "tool" };
// Finish reasons of a step that ended as it should; any other is shown as a card of its own.
const NORMAL_FINISH = new Set(["stop", "tool-calls", "end-turn", "tool-use"]);

/**
 * The item of one logical event: every event has one.
 * @param {any} event
 * @returns {Item}
 */
export function eventItem(event) {
  const data = event.data;
  const seq = event.seq;
  const time = knownTime(event.time);
  if (event.type === "assistant/chunk" && data && typeof data === "object" && data.chunk && typeof data.chunk === "object") {
    const item = chunkItem(event, data, data.chunk, time);
    if (item) return item;
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
  if (event.type === "assistant/message" && data && typeof data === "object" && data.interrupted !== true) {
    const message = data.message && typeof data.message === "object" ? data.message : data;
    const text = typeof message.text === "string" ? message.text : messageText(message.content);
    /** @type {Item} */
    const item = { kind: "assistant", key: "", seq0: seq, seq1: seq, text, time, offers: offering(stepCarrier(data)) };
    const usage = usageOf(message.usage ?? data.usage);
    if (usage) item.usage = usage;
    // A message built from deltas is already on screen as they were: it is accounted on them, and
    // shown itself only when they are not (or when it has text and nothing built it).
    if (!event.sourceEventSeqs?.length) return withHiding(item, event);
    const fallback = text ? item : rawItem(event, time);
    return withHiding(absorbed(fallback, stepCarrier(data)), event);
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
  if (event.type === "tool/call" && data && typeof data === "object" && typeof data.callId === "string") {
    // A call streamed as deltas is on screen already; one that was not is shown from this event.
    const text = typeof data.arguments === "string" ? data.arguments : JSON.stringify(data.arguments ?? null);
    const call = withStep({ kind: "tool", key: "", seq0: seq, seq1: seq, text, time }, data);
    const item = toolCall(call, { name: data.name, id: data.callId });
    return absorbed({ ...item, offers: offering(callCarrier(data.callId), stepCarrier(data)) }, callCarrier(data.callId));
  }
  if (event.type === "turn/start" && data && typeof data === "object" && data.turn !== undefined) {
    return { kind: "turn", key: "", seq0: seq, seq1: seq, text: String(data.turn), time };
  }
  if ((event.type === "step/start" || event.type === "step/end") && stepCarrier(data) !== undefined) {
    return absorbed(rawItem(event, time), stepCarrier(data));
  }
  return eventCard(event, time);
}

/**
 * The item of an `assistant/chunk`, or null for a chunk of no known shape (a raw row then).
 * @param {any} event @param {any} data @param {any} chunk @param {number | undefined} time
 * @returns {Item | null}
 */
function chunkItem(event, data, chunk, time) {
  const seq = event.seq;
  if (chunk.type === "usage") {
    const usage = usageOf(chunk.usage);
    const step = stepKey(data);
    if (!usage || !step) return null;
    return absorbed({ ...rawItem(event, time), kind: "usage", step, usage }, stepCarrier(data));
  }
  if (chunk.type === "finish") {
    const reason = chunk.reason && typeof chunk.reason === "object" ? chunk.reason.kind : chunk.reason;
    if (reason === undefined || NORMAL_FINISH.has(reason)) return absorbed(rawItem(event, time), stepCarrier(data));
    return null;
  }
  if (chunk.type === "block-start") return absorbed(rawItem(event, time), blockCarrier(data, chunk));
  if (chunk.type === "block-end" && chunk.block && typeof chunk.block === "object") {
    // The block whole: accounted on its deltas, or shown from here when none were streamed (a
    // raw row when it has nothing to show, which its start is accounted on).
    const kind = BLOCK_KINDS[/** @type {keyof BLOCK_KINDS} */ (chunk.block.type)];
    const text = kind === "tool" ? chunk.block.arguments : chunk.block.text;
    if (!kind || typeof text !== "string" || (!text && kind !== "tool")) {
      return absorbed({ ...rawItem(event, time), offers: [blockCarrier(data, chunk)] }, blockCarrier(data, chunk));
    }
    const block = withStep({ kind, key: "", seq0: seq, seq1: seq, text, time }, data);
    const item = kind === "tool" ? toolCall(block, chunk.block) : block;
    const offers = offering(blockCarrier(data, chunk), stepCarrier(data), callCarrier(item.callId));
    return absorbed({ ...item, offers }, blockCarrier(data, chunk));
  }
  const kind = DELTA_KINDS[/** @type {keyof DELTA_KINDS} */ (chunk.type)];
  if (!kind) return null;
  const text = kind === "tool" ? chunk.argumentsDelta : chunk.text;
  if (typeof text !== "string") return null;
  const item = withStep({ kind, key: blockKey(data, kind, chunk), seq0: seq, seq1: seq, text, time }, data);
  const call = kind === "tool" ? toolCall(item, chunk) : item;
  return { ...call, offers: offering(blockCarrier(data, chunk), stepCarrier(data), callCarrier(call.callId)) };
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
 * @returns {Item}
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
      time: knownTime(value.time0),
    },
    data,
  );
  const call = kind === "tool" ? toolCall(item, data) : item;
  return { ...call, offers: offering(blockCarrier(data, data), stepCarrier(data), callCarrier(call.callId)) };
}

/** Whether `after` continues the block of `before`, next in seq. @param {Item} before @param {Item} after */
export function joins(before, after) {
  return before.key !== "" && before.key === after.key && before.seq1 + 1 === after.seq0;
}

/**
 * Items in order, each run of one block joined.
 * @param {Iterable<Item>} items
 * @returns {Item[]}
 */
export function joinItems(items) {
  /** @type {Item[]} */
  const out = [];
  for (const item of items) {
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

// Cards for the events a harness writes beside the conversation: turn ends and failures,
// approvals, retries, hooks, todos, goals, workflows, compactions, settings. Any other event is a
// raw row: its type, folded, with the event as JSON inside, so nothing in a log goes unseen.
//
// A card is an item of kind `card` with its event's `type`, a `title`, a `text` and a `tone`:
// `error` and `warn` are shown prominently, `quiet` as a faint line. Each card's text is what a
// reader needs without unfolding anything: an error's message and code, an approval's tool,
// reason and decision, a retry's attempt and cause.

/** @typedef {import("./items.js").Item} Item */

const NUMBER = new Intl.NumberFormat();

/** A value as short text: a string as it is, anything else as JSON. @param {unknown} value */
function show(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** The parts of a card's text that are present, one a line. @param {...(string | false | null | undefined)} lines */
function lines(...lines) {
  return lines.filter((line) => typeof line === "string" && line !== "").join("\n");
}

/**
 * What went wrong, as the harness wrote it: a string, or an object with a message, a code
 * and a status, perhaps nested under `error` or `failure`.
 * @param {any} value
 * @returns {string}
 */
export function problemText(value) {
  if (value === undefined || value === null) return "";
  if (typeof value !== "object") return String(value);
  const nested = value.error ?? value.failure;
  if (nested !== undefined && nested !== null && value.message === undefined) return problemText(nested);
  const said = [value.code, value.status, value.name].filter((part) => part !== undefined && part !== null).map(show);
  const message = value.message === undefined ? "" : show(value.message);
  if (!message && !said.length) return JSON.stringify(value);
  return said.length ? `${message}${message ? " " : ""}(${said.join(", ")})` : message;
}

/**
 * A raw row: an event the viewer has no card for, folded, its JSON inside.
 * @param {any} event @param {number | undefined} time
 * @returns {Item}
 */
export function rawItem(event, time) {
  const { seq: _seq, time: _time, ...rest } = event;
  const chunk = event.type === "assistant/chunk" && event.data?.chunk?.type;
  const type = typeof chunk === "string" ? `${event.type} ${chunk}` : String(event.type);
  return { kind: "raw", key: "", seq0: event.seq, seq1: event.seq, text: JSON.stringify(rest, null, 2), time, type, title: type };
}

/**
 * A card of one event.
 * @param {any} event @param {number | undefined} time @param {string} title @param {string} text @param {string} [tone]
 * @returns {Item}
 */
function card(event, time, title, text, tone = "") {
  /** @type {Item} */
  const item = { kind: "card", key: "", seq0: event.seq, seq1: event.seq, text, time, type: String(event.type), title };
  if (tone) item.tone = tone;
  return item;
}

// How a turn ended, when not as it should: the words and the tone of each reason.
const TURN_ENDS = {
  completed: ["completed", "quiet"],
  error: ["failed", "error"],
  "max-tokens": ["stopped at the token limit", "warn"],
  aborted: ["aborted", "warn"],
  blocked: ["blocked", "warn"],
  interrupted: ["interrupted", "warn"],
};

/** Who or what aborted a turn: `user`, or `{kind: "user", reason: "approval-rejected"}`. @param {any} reason */
function abortedBy(reason) {
  if (reason === undefined || reason === null) return "";
  if (typeof reason !== "object") return `by ${show(reason)}`;
  const why = reason.reason ?? reason.message;
  return `by ${show(reason.kind ?? "the caller")}${why === undefined ? "" : `: ${show(why)}`}`;
}

/** @param {any} event @param {any} data @param {number | undefined} time */
function turnEnd(event, data, time) {
  const reason = data.reason && typeof data.reason === "object" ? data.reason : { kind: data.reason };
  const kind = reason.kind ?? (data.error !== undefined ? "error" : undefined);
  const [said, tone] = TURN_ENDS[/** @type {keyof TURN_ENDS} */ (kind)] ?? [kind === undefined ? "ended" : show(kind), "warn"];
  const turn = data.turn === undefined ? "Turn" : `Turn ${show(data.turn)}`;
  const why = kind === "aborted" ? abortedBy(reason.reason) : problemText(reason.error ?? reason.failure ?? data.error);
  const detail = kind === "error" && !why ? problemText({ message: reason.message, code: reason.code }) : why;
  return card(event, time, `${turn} ${said}`, detail, tone);
}

/** A step's finish that was not a normal one (an error, the token limit, a filter). @param {any} event @param {any} chunk @param {number | undefined} time */
function finish(event, chunk, time) {
  const reason = chunk.reason && typeof chunk.reason === "object" ? chunk.reason : { kind: chunk.reason };
  const kind = show(reason.kind ?? "unknown");
  const tone = kind === "error" ? "error" : "warn";
  const title = kind === "error" ? "Model request failed" : `Model stopped: ${kind}`;
  return card(event, time, title, problemText(reason.failure ?? reason.error ?? (kind === "error" ? reason : undefined)), tone);
}

// Todo statuses as a checklist shows them.
const TODO_MARKS = { completed: "☑", in_progress: "◐", "in-progress": "◐", pending: "☐", cancelled: "☒" };

/** @param {any} todos */
function todoLines(todos) {
  if (!Array.isArray(todos)) return show(todos);
  return todos
    .map((todo) => {
      const mark = TODO_MARKS[/** @type {keyof TODO_MARKS} */ (todo?.status)] ?? "☐";
      return `${mark} ${show(todo?.content ?? todo?.text ?? todo)}`;
    })
    .join("\n");
}

/** The text of an inbox message's text parts. @param {any} message */
function inboxText(message) {
  const content = Array.isArray(message?.content) ? message.content : [];
  return content
    .filter((/** @type {any} */ part) => part?.type === "text" && typeof part.text === "string")
    .map((/** @type {any} */ part) => part.text)
    .join("\n");
}

/**
 * The card of an event that is not part of the conversation itself, or its raw row.
 * @param {any} event @param {number | undefined} time
 * @returns {Item}
 */
export function eventCard(event, time) {
  const data = event.data && typeof event.data === "object" ? event.data : {};
  switch (event.type) {
    case "turn/end":
      return turnEnd(event, data, time);
    case "assistant/chunk":
      if (data.chunk?.type === "finish") return finish(event, data.chunk, time);
      break;
    case "assistant/message": {
      const message = data.message && typeof data.message === "object" ? data.message : data;
      const text = Array.isArray(message.content) ? inboxText(message) : show(message.text ?? "");
      return card(event, time, "Response interrupted", text, "warn");
    }
    case "approval/asked": {
      const item = card(event, time, `Approval asked: ${show(data.toolName ?? "a tool")}`, lines(data.reason && show(data.reason), data.callId && `call ${show(data.callId)}`), "warn");
      if (typeof data.callId === "string") item.callId = data.callId;
      return data.id === undefined ? item : { ...item, offers: [`approval:${show(data.id)}`] };
    }
    case "approval/decided": {
      const item = card(event, time, `Approval decided: ${show(data.outcome ?? "unknown")}`, "", data.outcome === "rejected" ? "error" : "ok");
      item.decision = show(data.outcome ?? "unknown");
      return data.id === undefined ? item : { ...item, absorb: `approval:${show(data.id)}` };
    }
    case "approval/policy":
      return card(event, time, `Approval policy: ${show(data.policy)}`, data.source ? `set by ${show(data.source)}` : "", "quiet");
    case "permission/preset":
      return card(event, time, `Permission preset: ${show(data.preset)}`, "", "quiet");
    case "sandbox/mode":
      return card(event, time, `Sandbox: ${show(data.mode)}`, "", "quiet");
    case "plan/mode":
      return card(event, time, data.active ? "Plan mode on" : "Plan mode off", "", "quiet");
    case "session/title":
      return card(event, time, `Title: ${show(data.title)}`, "", "quiet");
    case "session/end-seed":
      return card(event, time, "End of the history this session was seeded with", "", "quiet");
    case "request/context": {
      const window = typeof data.contextWindow === "number" ? ` (context ${NUMBER.format(data.contextWindow)} tokens)` : "";
      return card(event, time, `Model: ${show(data.provider)} / ${show(data.model)}${window}`, "", "quiet");
    }
    case "request/header":
      return { ...rawItem(event, time), title: `Request header (${show(data.reason ?? "sent")})` };
    case "hook/invoked":
      return card(event, time, `Hook ${show(data.point)}: ${show(data.handlerId)}`, data.matcher === undefined ? "" : `matcher ${show(data.matcher)}`, "quiet");
    case "hook/result": {
      const blocked = data.decision === "block" || data.decision === "deny" || (typeof data.exitCode === "number" && data.exitCode !== 0);
      const said = [data.exitCode === undefined ? "" : `exit ${show(data.exitCode)}`, typeof data.durationMs === "number" ? `${data.durationMs.toFixed(1)} ms` : ""];
      const title = `Hook ${show(data.point)} result: ${show(data.decision ?? "done")}`;
      return card(event, time, title, lines(said.filter(Boolean).join(", "), data.stderrSummary && show(data.stderrSummary)), blocked ? "warn" : "quiet");
    }
    case "todo/write":
      return card(event, time, "Todos", todoLines(data.todos));
    case "goal/change": {
      const goal = data.goal && typeof data.goal === "object" ? data.goal : {};
      const title = `Goal ${show(data.operation ?? "change")}${goal.phase === undefined ? "" : ` (${show(goal.phase)})`}`;
      return card(event, time, title, show(goal.objective ?? ""));
    }
    case "llm/retry":
    case "llm/retry-started": {
      const attempt = data.retry === undefined ? "" : ` ${show(data.retry)}${data.maxRetries === undefined ? "" : `/${show(data.maxRetries)}`}`;
      const wait = typeof data.delayMs === "number" ? ` in ${(data.delayMs / 1000).toFixed(1)} s` : "";
      return card(event, time, `Retrying the model request${attempt}${wait}`, problemText(data.failure ?? data.error), "warn");
    }
    case "tool-workflow/run-start":
      return card(event, time, `Workflow ${show(data.name ?? data.runId)} started`, "");
    case "tool-workflow/agent-start":
      return card(event, time, `Workflow agent ${show(data.label ?? data.seq)} started${data.phase ? ` (${show(data.phase)})` : ""}`, data.childId ? `subagent ${show(data.childId)}` : "");
    case "tool-workflow/agent-end":
      return card(event, time, `Workflow agent ${show(data.seq)}: ${show(data.outcome)}`, "", data.outcome === "completed" ? "" : "warn");
    case "tool-workflow/run-end":
      return card(event, time, `Workflow ended: ${show(data.stopReason)}`, "", data.stopReason === "completed" ? "" : "warn");
    case "compaction/start":
      return card(event, time, "Compaction started", "", "quiet");
    case "compaction/summary": {
      const summary = Array.isArray(data.summary) ? inboxText({ content: data.summary }) : show(data.summary ?? "");
      const shadowed = typeof data.shadowedTokenCount === "number" ? ` (${NUMBER.format(data.shadowedTokenCount)} tokens summarised)` : "";
      return card(event, time, `Compaction summary${shadowed}`, summary);
    }
    case "compaction/end":
      return data.error ? card(event, time, "Compaction failed", problemText(data.error), "error") : card(event, time, "Compaction ended", "", "quiet");
    case "compaction/prune":
      return card(event, time, `Tool output pruned (${NUMBER.format(Number(data.shadowedTokenCount) || 0)} tokens)`, "", "quiet");
    case "subagent/descriptor": {
      const model = data.agentModel ? `, ${show(data.agentProvider ?? "")} ${show(data.agentModel)}` : "";
      return card(event, time, `Subagent${data.label ? `: ${show(data.label)}` : ""}`, `${show(data.mode ?? "")} (${show(data.provider ?? "")}${model})`, "quiet");
    }
    case "command/run":
      return card(event, time, `Command /${show(data.name)}`, show(data.args ?? "").trim());
    case "command/done":
      return card(event, time, `Command ${data.kind === "success" ? "done" : show(data.kind ?? "done")}`, show(data.text ?? ""), data.kind === "error" ? "error" : "");
    case "tool/code-dispatch-start":
      return { ...card(event, time, `Nested call ${show(data.name)}`, show(data.arguments ?? "")), absorb: `dispatch:${show(data.subCallId)}` };
    case "tool/code-dispatch": {
      const result = inboxText(data);
      const item = card(event, time, `Nested call ${show(data.name)}${data.isError ? ": error" : ""}`, lines(show(data.arguments ?? ""), result && `→ ${result}`), data.isError ? "error" : "");
      return { ...item, offers: [`dispatch:${show(data.subCallId)}`] };
    }
    case "agent/inbox/spliced": {
      const inserted = Array.isArray(data.inserted) ? data.inserted : [];
      const removed = typeof data.removedCount === "number" && data.removedCount ? `, ${data.removedCount} taken out` : "";
      const title = `Inbox (${show(data.target ?? "pending")}): ${inserted.length} queued${removed}`;
      return card(event, time, title, inserted.map(inboxText).join("\n"), "quiet");
    }
  }
  return rawItem(event, time);
}

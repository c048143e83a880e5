// Times and counts as a person reads them: a time before 2000 is unknown, never 1970.
//
// A log that recorded no times reads as time 0 (docs/protocol.md §7.2), and the API keeps what
// the log says; the viewer says "unknown" rather than show the epoch as if it were a date.

// The earliest time shown as a date: 2000-01-01T00:00:00Z.
export const EARLIEST_SHOWN = Date.UTC(2000, 0, 1);

/** The time itself when a person should see it as a date, else undefined. @param {unknown} ms */
export function knownTime(ms) {
  return typeof ms === "number" && ms >= EARLIEST_SHOWN && Number.isFinite(new Date(ms).getTime()) ? ms : undefined;
}

/** A time in a sentence: local date and time, or "at an unknown time". @param {unknown} ms */
export function shownTime(ms) {
  const known = knownTime(ms);
  return known === undefined ? "at an unknown time" : new Date(known).toLocaleString();
}

/**
 * A `<time>` for a known time, in UTC (its local form in the title), or a quiet "unknown".
 * @param {Document} doc
 * @param {unknown} ms
 * @returns {HTMLElement}
 */
export function timeElement(doc, ms) {
  const known = knownTime(ms);
  if (known === undefined) {
    const unknown = doc.createElement("span");
    unknown.className = "unknown";
    unknown.textContent = "unknown";
    unknown.title = "the log recorded no time";
    return unknown;
  }
  const at = new Date(known);
  const time = doc.createElement("time");
  time.dateTime = at.toISOString();
  time.textContent = at.toISOString().replace("T", " ").replace(/:\d\d\.\d+Z$/, " UTC");
  time.title = at.toLocaleString();
  return time;
}

/** A session's events, as a person counts them: "empty" for none. @param {number} headSeq */
export function eventCount(headSeq) {
  const count = headSeq + 1;
  return count <= 0 ? "empty" : `${count.toLocaleString("en-US")} event${count === 1 ? "" : "s"}`;
}

/**
 * The tokens a session's events report, summed, or undefined when they report none.
 * @param {{inputTokens: number, outputTokens: number} | undefined} usage
 */
export function tokenCount(usage) {
  if (!usage) return undefined;
  const number = (/** @type {number} */ n) => n.toLocaleString("en-US");
  return `${number(usage.inputTokens)} in · ${number(usage.outputTokens)} out`;
}

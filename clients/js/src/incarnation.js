/**
 * A session's incarnation (docs/protocol.md §2.5), the twin of codec/incarnation.py: which life
 * of an id a page, a follow's SSE `id:` or an ETag belongs to. A session id may be deleted
 * and created again; each creation is a new incarnation, and nothing of one may be taken for
 * another's. An SSE `id:` is `<incarnation>:<seq>`, which a client sends back as
 * `Last-Event-ID` to resume.
 */

export const INCARNATION_PATTERN = "^[0-9a-z]{1,32}$";
const INCARNATION = new RegExp(INCARNATION_PATTERN);
const SEQ = /^-?[0-9]{1,16}$/;

/**
 * Whether `value` is an incarnation: 1-32 characters `0-9 a-z`.
 *
 * @param {unknown} value
 * @returns {value is string}
 */
export function isIncarnation(value) {
  return typeof value === "string" && INCARNATION.test(value);
}

/**
 * The SSE `id:` of the frame at `seq`, as `Last-Event-ID` sends it back; a bare seq when the
 * incarnation is not known (a stream from a server before incarnations).
 *
 * @param {string | null} incarnation
 * @param {number} seq
 * @returns {string}
 */
export function eventId(incarnation, seq) {
  return incarnation === null ? String(seq) : `${incarnation}:${seq}`;
}

/**
 * `{incarnation, seq}` of an SSE id, as codec/incarnation.py `parse_event_id` reads it: a bare
 * seq (a server before incarnations) has `incarnation` `null`. `null` when the text is neither
 * `<incarnation>:<seq>` nor `<seq>`, the seq written as a query integer is (an optional `-`
 * and 1-16 digits).
 *
 * @param {string} text
 * @returns {{incarnation: string | null, seq: number} | null}
 */
export function parseEventId(text) {
  const colon = text.lastIndexOf(":");
  const seq = text.slice(colon + 1);
  if (!SEQ.test(seq)) return null;
  // `|| 0`: "-0" is seq 0, as Python's int() reads it, not JavaScript's -0.
  const value = Number(seq) || 0;
  if (colon === -1) return { incarnation: null, seq: value };
  const incarnation = text.slice(0, colon);
  return INCARNATION.test(incarnation) ? { incarnation, seq: value } : null;
}

/**
 * A joined-text view of a chunk row, for UIs that render accumulated text: the twin of
 * history_client/text.py `RowText`.
 *
 * The view keeps what a renderer needs from a run of deltas, with no per-delta objects:
 * the joined text, the member where the first non-empty token arrived, and the member at
 * which the accumulated text first stops being blank. Both are found in one forward pass,
 * so a row of 40,000 spaces then `x` costs O(characters), not O(members²).
 */

/**
 * @typedef {import("./chunk-rows.js").ChunkRow} ChunkRow
 * @typedef {{
 *   text: string,
 *   tokenStart: number, tokenSeq: number, tokenTime: number,
 *   visibleStart: number | null, visibleSeq: number | null, visibleTime: number | null
 * }} RowText
 */

// "Visible" is what String.prototype.trim keeps: anything but ECMAScript WhiteSpace and
// LineTerminator. The Python twin spells out the same set.
const NOT_BLANK = /[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]/;

/**
 * Whether `text` has a character that `trim()` would keep.
 * @param {string} text
 */
export function hasVisible(text) {
  return NOT_BLANK.test(text);
}

/**
 * The joined text of a row and its two boundaries, each as a member index, seq and time.
 *
 * `tokenStart` is the first member with a non-empty text (0 if none); a tool-call row with
 * a name anchors at member 0. `visibleStart` is the first member at which the accumulated
 * text has a non-blank character, or `null` if it never does; for a tool-call row it
 * equals `tokenStart`.
 * @param {ChunkRow} row
 * @returns {RowText}
 */
export function joinedText(row) {
  const data = row.data;
  const tool = row.type === "tool-call-chunks";
  const pieces = tool ? /** @type {import("./chunk-rows.js").ToolCallRowData} */ (data).args : /** @type {import("./chunk-rows.js").TextRowData} */ (data).texts;
  let token = -1;
  /** @type {number | null} */
  let visible = null;
  if (tool && typeof (/** @type {any} */ (data).name) === "string") token = 0;
  for (let k = 0; k < pieces.length && (token < 0 || (!tool && visible === null)); k++) {
    const piece = pieces[k];
    if (token < 0 && piece !== "") token = k;
    if (!tool && visible === null && NOT_BLANK.test(piece)) visible = k;
  }
  if (token < 0) token = 0;
  if (tool) visible = token;
  const dt = data.dt;
  let time = row.time0;
  let tokenTime = time;
  let visibleTime = null;
  const last = Math.max(token, visible ?? 0);
  for (let k = 0; k <= last; k++) {
    if (k) time += dt[k - 1];
    if (k === token) tokenTime = time;
    if (k === visible) visibleTime = time;
  }
  return {
    text: pieces.join(""),
    tokenStart: token,
    tokenSeq: row.seq0 + token,
    tokenTime,
    visibleStart: visible,
    visibleSeq: visible === null ? null : row.seq0 + visible,
    visibleTime,
  };
}

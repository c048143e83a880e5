/**
 * The codec of docs/protocol.md §1-§5 in JavaScript, the twin of the Python `codec`
 * package: events, chunk rows, page and follow bodies, their canonical JSON, and the
 * incarnation an SSE id names.
 *
 * Decoders are strict and raise a `CodecError` subclass (src/errors.js) whose message
 * says where and why. Read README.md for what the twin guarantees about number
 * spellings and key order.
 */

export {
  CHUNK_EVENT_TYPE,
  MAX_DEPTH,
  MAX_SAFE_INTEGER,
  MAX_SESSION_ID,
  RESERVED_TYPES,
  checkDepth,
  checkSessionId,
  validateEvent,
  validateHeader,
} from "./events.js";
export {
  MIN_RUN,
  ROW_TAGS,
  checkRow,
  decodeStorageRecord,
  deltaMember,
  expandRecords,
  expandRow,
  memberCount,
  packChunkRuns,
  recordRange,
  rowFromValue,
} from "./chunk-rows.js";
export {
  checkPage,
  decodeFollowSnapshot,
  decodeLiveEvent,
  decodeLiveRecord,
  decodeLiveRecords,
  decodePage,
  decodePageRecord,
  decodeStorageLine,
  expectedToSeq,
  iterPageEvents,
  pageEvents,
  readPage,
  recordSeqRange,
} from "./pages.js";
export { encodeLines, encodeRecord } from "./encode.js";
export { INCARNATION_PATTERN, eventId, isIncarnation, parseEventId } from "./incarnation.js";
export { KEY_ORDER, SPELLINGS, encodeJson, formatFloat, formatNumber, parseJsonExact } from "./json.js";

/**
 * @typedef {import("./events.js").Event} Event
 * @typedef {import("./events.js").ReplaceOp} ReplaceOp
 * @typedef {import("./events.js").SessionHeader} SessionHeader
 * @typedef {import("./chunk-rows.js").ChunkRow} ChunkRow
 * @typedef {import("./chunk-rows.js").StorageRecord} StorageRecord
 * @typedef {import("./pages.js").PageRecord} PageRecord
 * @typedef {import("./pages.js").Page} Page
 * @typedef {import("./pages.js").ReadPage} ReadPage
 * @typedef {import("./pages.js").FollowSnapshot} FollowSnapshot
 * @typedef {import("./pages.js").LiveRecords} LiveRecords
 * @typedef {import("./pages.js").Cursor} Cursor
 */

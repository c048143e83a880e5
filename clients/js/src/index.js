/**
 * history-transport-client: the browser's and Node's client of the session-history service.
 *
 * The one public entry point. The codec (events, chunk rows, pages and follow frames, with
 * the rules of docs/protocol.md), the joined-text view of a row, the error classes, and
 * `HistoryClient` for pages, whole histories, exactly-once live follow and the writes.
 */

export * from "./codec.js";
export { hasVisible, joinedText } from "./text.js";
export {
  BatchTooLargeError,
  CodecError,
  EventValidationError,
  InvalidJsonError,
  PageContinuityError,
  RecordFormatError,
  RowFormatError,
  SessionIdError,
} from "./errors.js";
export {
  ClientError,
  CursorAheadError,
  ProtocolError,
  ResumeBehindError,
  ServiceError,
  SessionDeletedError,
  StreamOverlapError,
  TransportError,
} from "./client-errors.js";
export { Backoff, HistoryClient, MAX_MESSAGES } from "./client.js";
export { SSEDecoder } from "./sse.js";

/**
 * @typedef {import("./codec.js").Event} Event
 * @typedef {import("./codec.js").SessionHeader} SessionHeader
 * @typedef {import("./codec.js").ChunkRow} ChunkRow
 * @typedef {import("./codec.js").StorageRecord} StorageRecord
 * @typedef {import("./codec.js").PageRecord} PageRecord
 * @typedef {import("./codec.js").ReadPage} ReadPage
 * @typedef {import("./codec.js").FollowSnapshot} FollowSnapshot
 * @typedef {import("./codec.js").LiveRecords} LiveRecords
 * @typedef {import("./client.js").NewSession} NewSession
 * @typedef {import("./client.js").Created} Created
 * @typedef {import("./client.js").Appended} Appended
 * @typedef {import("./client.js").Closed} Closed
 * @typedef {import("./client.js").Ended} Ended
 * @typedef {import("./client.js").SessionList} SessionList
 * @typedef {import("./client.js").ListedSession} ListedSession
 * @typedef {import("./client.js").ListFilter} ListFilter
 * @typedef {import("./client.js").SearchHit} SearchHit
 * @typedef {import("./client.js").SearchHits} SearchHits
 * @typedef {import("./client.js").SearchKind} SearchKind
 * @typedef {import("./client.js").SearchFilter} SearchFilter
 * @typedef {import("./client.js").ConnectionChange} ConnectionChange
 */

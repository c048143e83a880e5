/**
 * Errors raised by the codec, the same tree as codec/errors.py.
 *
 * Every failure to read JSON text or values as events, rows, records or pages is a
 * `CodecError`, so callers catch one type at the package boundary:
 *
 *     CodecError
 *     ├── EventValidationError     an event or session header breaks docs/protocol.md §2
 *     │   └── SessionIdError       a session id breaks the id rule (§2.4)
 *     ├── RowFormatError           a chunk row breaks §3 ("malformed <tag> row: <why>")
 *     ├── RecordFormatError        a storage line, a page record or a page body has the wrong shape
 *     │   └── InvalidJsonError     text that is not JSON
 *     ├── BatchTooLargeError       an append body that stands for too many logical events
 *     └── PageContinuityError      a page's records do not tile [fromSeq, toSeq), or it ends
 *                                  elsewhere than the requested cursor (§4.2)
 *
 * In Python, `PageContinuityError` belongs to the client; here every rejection of a page
 * is a `CodecError`, whichever check made it.
 */

/** Base class for every codec failure; the message says where and why. */
export class CodecError extends Error {
  /**
   * @param {string} message
   * @param {{cause?: unknown}} [options]
   */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Raised when an event or header breaks the envelope rules. */
export class EventValidationError extends CodecError {}

/** Raised when a session id breaks the id rule (see `checkSessionId`). */
export class SessionIdError extends EventValidationError {}

/** Raised when a value tagged as a chunk row is not a valid row. */
export class RowFormatError extends CodecError {}

/** Raised when a storage line, page record or page body is malformed (wrong shape). */
export class RecordFormatError extends CodecError {}

/** Raised when text is not JSON at all: bad syntax, a lone surrogate escape, a number out of range. */
export class InvalidJsonError extends RecordFormatError {}

/** Raised when an append body stands for more logical events than allowed. */
export class BatchTooLargeError extends CodecError {}

/** Raised when a page's records do not cover exactly [fromSeq, toSeq), or the page ends where it was not asked to. */
export class PageContinuityError extends CodecError {}

/**
 * The client's error tree, mirroring history_client/errors.py.
 *
 * - `ClientError`: the root of every error the client raises on purpose.
 *   - `ServiceError`: the service answered with a non-2xx status.
 *   - `TransportError`: the service could not be reached, or a follow stream's retries ran out.
 *   - `ProtocolError`: the service sent something that breaks the wire contract.
 *     - `StreamOverlapError`: a live record partly overlaps what was already delivered.
 *     - `ResumeBehindError`: a resumed stream opened behind the last delivered seq.
 *   - `CursorAheadError`: `follow` asked to resume after a seq the session does not have.
 *   - `SessionDeletedError`: the session a follow or a walk of pages was reading was deleted.
 *
 * Pages and frames that fail the codec's checks raise the codec's own errors
 * (`CodecError` and its subclasses, `PageContinuityError` among them), unchanged.
 */

/** The root of every error the client raises on purpose. */
export class ClientError extends Error {
  /**
   * @param {string} message
   * @param {{cause?: unknown}} [options]
   */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * Raised when the service answers with a non-2xx status.
 *
 * `code` and `message` come from the `{"error": {"code", "message"}}` body (branch on
 * `code`; `message` is for people); a body of any other shape gives `code`
 * `"http_<status>"` and the status text as `message`. `body` is the parsed JSON body, or
 * its text when it is not JSON.
 */
export class ServiceError extends ClientError {
  /**
   * @param {string} message
   * @param {{status: number, code: string, body?: unknown}} details
   */
  constructor(message, { status, code, body }) {
    super(message);
    this.status = status;
    this.code = code;
    /** @type {unknown} */
    this.body = body;
  }
}

/** Raised when the service cannot be reached, or a follow stream's reconnects run out. */
export class TransportError extends ClientError {}

/** Raised when a response breaks the wire contract outside what the codec checks: a bad frame, a wrong content type. */
export class ProtocolError extends ClientError {}

/** Raised when a live record partly overlaps the events already delivered. */
export class StreamOverlapError extends ProtocolError {}

/** Raised when a reconnected stream opens at a cursor behind the last delivered seq. */
export class ResumeBehindError extends ProtocolError {}

/** Raised when `follow` resumes after a seq beyond the session's head (`headSeq`). */
export class CursorAheadError extends ClientError {
  /**
   * @param {number} after
   * @param {number} headSeq
   */
  constructor(after, headSeq) {
    super(`cannot resume after seq ${after}: the session's head is ${headSeq}`);
    this.after = after;
    this.headSeq = headSeq;
  }
}

/**
 * Raised when the session being read was deleted (docs/protocol.md §6.4): a follow's stream
 * ended with `session_deleted`, or a request that names the incarnation the client was
 * reading (§2.5) got 404 `session_not_found`, the answer for an incarnation that is gone.
 * Terminal: nothing of the session is left to read, and an id created again is another
 * session. `session` is the id addressed (the child's, for a child read through its parent);
 * `incarnation` the one that was read, when it was known.
 */
export class SessionDeletedError extends ClientError {
  /**
   * @param {string} session
   * @param {string | null} incarnation
   * @param {{cause?: unknown}} [options]
   */
  constructor(session, incarnation, options) {
    super(`session ${session}${incarnation === null ? "" : ` (incarnation ${incarnation})`} was deleted`, options);
    this.session = session;
    this.incarnation = incarnation;
  }
}

/**
 * An error as one line, as a status line shows it: a `ServiceError` with its status and
 * code (`503 store_unavailable: ...`). Node's fetch fails with a bare "fetch failed" and keeps the
 * reason in `cause`, so the cause is named too; a `ClientError` already says it.
 *
 * @param {unknown} error
 * @returns {string}
 */
export function describe(error) {
  if (error instanceof ServiceError) return `${error.status} ${error.code}: ${error.message}`;
  if (!(error instanceof Error)) return String(error);
  const text = error.message.split("\n")[0] || error.name;
  const cause = /** @type {{cause?: unknown}} */ (error).cause;
  if (!(error instanceof ClientError) && cause instanceof Error && cause.message) return `${text}: ${describe(cause)}`;
  return text;
}

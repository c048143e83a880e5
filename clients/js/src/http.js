/**
 * The request plumbing of `HistoryClient` (client.js): a session's address, the
 * `ServiceError` of a non-2xx answer and what a 404 means, and the abort and timeout a
 * request runs under.
 */

import { checkSessionId } from "./codec.js";
import { ServiceError } from "./client-errors.js";

// The page header that names the page's incarnation (docs/protocol.md §4.2).
export const INCARNATION_HEADER = "Session-Incarnation";

/**
 * Whether `error` is the answer for a session that is not there (§6.4). While a request names
 * the incarnation it reads, that incarnation is gone: the session was deleted.
 *
 * @param {unknown} error
 */
export function isGone(error) {
  return error instanceof ServiceError && error.status === 404 && error.code === "session_not_found";
}

/**
 * The address of a session, or of a subagent child read through its parent. An id the
 * service could never accept is the codec's `SessionIdError`, before any request.
 *
 * @param {string} session
 * @param {string | null | undefined} child
 * @param {string} leaf
 * @returns {string}
 */
export function sessionPath(session, child, leaf) {
  checkSessionId(session);
  if (child != null) checkSessionId(child, "child id");
  let base = `/v1/sessions/${encodeURIComponent(session)}`;
  if (child != null) base += `/subagents/${encodeURIComponent(child)}`;
  return `${base}/${leaf}`;
}

/**
 * The `ServiceError` for a non-2xx response; reads its body.
 *
 * @param {Response} response
 * @returns {Promise<ServiceError>}
 */
export async function serviceError(response) {
  const status = response.status;
  let code = `http_${status}`;
  let message = response.statusText || "error";
  let text = "";
  try {
    text = await response.text();
  } catch {
    // The status already says what went wrong; a body lost on the way adds nothing.
  }
  /** @type {unknown} */
  let body = text;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON (a gateway's HTML page, say): keep the text.
  }
  const error = isObject(body) ? body.error : undefined;
  if (isObject(error) && typeof error.code === "string") {
    code = error.code;
    if (error.message !== undefined) message = String(error.message);
  }
  return new ServiceError(message, { status, code, body });
}

/**
 * @param {unknown} value
 * @returns {value is Record<string, unknown>}
 */
function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * An `AbortController` that also aborts when `parent` does, or after `timeoutMs` (`null`: never).
 *
 * @param {AbortSignal | undefined} parent
 * @param {number | null} timeoutMs
 */
export function linkedAbort(parent, timeoutMs) {
  const controller = new AbortController();
  const state = { timedOut: false };
  const onAbort = () => controller.abort(parent?.reason);
  if (parent?.aborted) onAbort();
  else parent?.addEventListener("abort", onAbort, { once: true });
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;
  if (timeoutMs !== null) {
    timer = setTimeout(() => {
      state.timedOut = true;
      controller.abort();
    }, timeoutMs);
  }
  return {
    signal: controller.signal,
    state,
    /** Stop the timeout; the link to `parent` stays until `close`. */
    settle: () => clearTimeout(timer),
    close() {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onAbort);
      controller.abort();
    },
  };
}

/**
 * Wait `ms`, or less if `signal` aborts.
 *
 * @param {number} ms
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<void>}
 */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

"""The one table that answers every error over HTTP (docs/protocol.md §11.1), and the handlers that use it.

`ERRORS` maps error classes of every package to their answers, and the nearest class in
an error's MRO decides, as Starlette looks handlers up. So:

* a codec error whose meaning does not depend on where it occurs is answered as it is
  (`InvalidJsonError`, `SessionIdError`, `BatchTooLargeError`); the others are placed by
  `history_service.requests` (in a header, the batch or an item). One that reaches the
  edge unplaced failed on data the service holds itself: 500 ``internal``.
* a store error says what happened to a session, or it is a failure: 503
  ``store_unavailable``, logged, with a fixed message that names no path. Each logged
  failure is one line; the app's `Tracebacks` adds the traceback to the first of a kind
  and then to one every few seconds.

A `SubscriptionRefused` is answered under ``/ds`` in the Durable Streams protocol's shape:
its status the table's, its ``code`` the protocol's spelling (`SubscriptionRefused.code`).

`EXCEPTION_HANDLERS` is what the app passes to ``Starlette(exception_handlers=...)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ExceptionHandler

from codec import BatchTooLargeError, CodecError, InvalidJsonError, SessionIdError, encode
from history_service.bodies import ErrorBody, ErrorDetail, FollowError
from history_service.errors import (
    BodyTooLarge,
    ContentEncodingError,
    ContentTooLargeError,
    DuplicateHeader,
    HistoryServiceError,
    InvalidAck,
    InvalidBatch,
    InvalidEvent,
    InvalidHeader,
    InvalidParameter,
    InvalidParent,
    InvalidSeed,
    NoAcceptableCoding,
    NoAcceptableType,
    NoPendingWork,
    NotADirectChild,
    NotJson,
    NotOwner,
    Overloaded,
    SubagentChild,
    SubscriptionBodyTooLarge,
    SubscriptionExists,
    SubscriptionInvalid,
    SubscriptionLimit,
    SubscriptionNotFound,
    SubscriptionRefused,
    ThroughBeyondHead,
    Unauthenticated,
    UnsupportedEncoding,
    ViewerUnavailable,
    WakeClaimed,
    WakeFenced,
    WakeTokenExpired,
    WakeTokenInvalid,
    WebhookUrlRejected,
)
from history_service.logs import Tracebacks
from persistence import (
    InvalidSessionIdError,
    ProducerFencedError,
    ProducerGapError,
    SearchQueryError,
    SearchUnsupportedError,
    SeqConflictError,
    SessionClosedError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
    StreamBodyTooLargeError,
    StreamClosedError,
    StreamConflictError,
    StreamError,
    StreamGoneError,
    StreamNotFoundError,
    StreamRequestError,
    StreamValueTooLargeError,
)

__all__ = ["ERRORS", "EXCEPTION_HANDLERS", "Answer", "answer_for", "error_response", "stream_error", "tracebacks_of"]

# The name this log had before the table had a module of its own: operators filter on it.
logger = logging.getLogger("history_service.errors")


def _no_fields(exc: Any) -> dict[str, Any]:
    return {}


class Answer(NamedTuple):
    """How the errors of one class are answered.

    Parameters:
        status, code: the HTTP status and the stable code (docs/protocol.md §11.1).
        message: the body's message for an error, its ``str`` unless given.
        fields: the body's extra fields for an error, such as ``headSeq``.
        headers: response headers to add.
        logged: a failure on the server's side: the error goes to the log, with its traceback
            when the app's `Tracebacks` allows.
    """

    status: int
    code: str
    message: Callable[[Any], str] = str
    fields: Callable[[Any], dict[str, Any]] = _no_fields
    headers: Mapping[str, str] | None = None
    logged: bool = False


def _fixed(message: str) -> Callable[[Any], str]:
    return lambda exc: message


def _through_parent(exc: SubagentChild) -> str:
    return (
        f"session {exc.session_id!r} is a subagent child; "
        f"read it through /v1/sessions/{exc.parent}/subagents/{exc.session_id}"
    )


# An id that exists for someone else answers exactly as one that does not exist: ids leak nothing.
_NO_SESSION: Final = Answer(404, "session_not_found", lambda exc: f"no session {exc.session_id!r}")
_INTERNAL: Final = Answer(500, "internal", _fixed("internal server error"), logged=True)

ERRORS: Final[Mapping[type[Exception], Answer]] = {
    HistoryServiceError: _INTERNAL,
    InvalidParameter: Answer(400, "invalid_parameter"),
    DuplicateHeader: Answer(400, "duplicate_header"),
    Unauthenticated: Answer(401, "unauthorized", headers={"WWW-Authenticate": "Bearer"}),
    NoAcceptableCoding: Answer(406, "not_acceptable"),
    NoAcceptableType: Answer(406, "not_acceptable"),
    NotJson: Answer(415, "unsupported_media_type"),
    UnsupportedEncoding: Answer(415, "unsupported_encoding"),
    BodyTooLarge: Answer(413, "body_too_large"),
    InvalidHeader: Answer(422, "invalid_header"),
    InvalidBatch: Answer(422, "invalid_batch"),
    InvalidEvent: Answer(422, "invalid_event", fields=lambda exc: {"index": exc.index}),
    InvalidSeed: Answer(422, "invalid_seed"),
    ContentEncodingError: Answer(400, "bad_encoding"),
    ContentTooLargeError: Answer(413, "body_too_large"),
    NotOwner: _NO_SESSION,
    SubagentChild: Answer(403, "subagent_child", _through_parent),
    NotADirectChild: Answer(403, "not_a_direct_child"),
    InvalidParent: Answer(422, "invalid_parent"),
    ThroughBeyondHead: Answer(400, "invalid_parameter"),
    Overloaded: Answer(503, "overloaded", headers={"Retry-After": "1"}),
    ViewerUnavailable: Answer(404, "viewer_unavailable"),
    CodecError: _INTERNAL,
    InvalidJsonError: Answer(400, "malformed_json", lambda exc: f"the body is not valid JSON: {exc}"),
    SessionIdError: Answer(422, "invalid_session_id"),
    BatchTooLargeError: Answer(413, "batch_too_large"),
    StoreError: Answer(
        503, "store_unavailable", _fixed("the store failed; the server log has the details"), logged=True
    ),
    SessionNotFoundError: _NO_SESSION,
    SessionExistsError: Answer(409, "session_exists"),
    SeqConflictError: Answer(409, "seq_conflict", fields=lambda exc: {"headSeq": exc.head_seq}),
    SessionClosedError: Answer(409, "session_closed", fields=lambda exc: {"headSeq": exc.head_seq}),
    InvalidSessionIdError: Answer(422, "invalid_session_id"),
    SearchQueryError: Answer(400, "invalid_parameter"),
    SearchUnsupportedError: Answer(501, "search_unsupported"),
    # Durable Streams (§13): answered as plain text under /ds (`history_service.durable.app`), by these statuses.
    StreamError: Answer(400, "stream_invalid"),
    StreamRequestError: Answer(400, "stream_invalid"),
    StreamBodyTooLargeError: Answer(413, "body_too_large"),
    StreamValueTooLargeError: Answer(413, "stream_value_too_large"),
    StreamNotFoundError: Answer(404, "stream_not_found"),
    StreamGoneError: Answer(410, "stream_gone"),
    StreamConflictError: Answer(409, "stream_conflict"),
    StreamClosedError: Answer(409, "stream_closed"),
    ProducerFencedError: Answer(403, "producer_fenced"),
    ProducerGapError: Answer(409, "producer_seq_gap"),
    # The subscription API (§13.6): answered under /ds in the protocol's shape and spelling of the code.
    SubscriptionRefused: _INTERNAL,
    SubscriptionNotFound: Answer(404, "subscription_not_found"),
    SubscriptionInvalid: Answer(400, "subscription_invalid"),
    SubscriptionBodyTooLarge: Answer(413, "body_too_large"),
    WebhookUrlRejected: Answer(400, "webhook_url_rejected"),
    WakeTokenInvalid: Answer(401, "token_invalid"),
    WakeTokenExpired: Answer(401, "token_expired"),
    WakeFenced: Answer(409, "fenced"),
    SubscriptionExists: Answer(409, "subscription_exists"),
    SubscriptionLimit: Answer(409, "limit_exceeded"),
    WakeClaimed: Answer(409, "already_claimed"),
    NoPendingWork: Answer(409, "no_pending_work"),
    InvalidAck: Answer(409, "invalid_offset"),
}


def answer_for(error: type[BaseException]) -> Answer | None:
    """The answer of the nearest class in ``error``'s MRO that `ERRORS` maps, as Starlette finds a handler."""
    for cls in error.__mro__:
        answer = ERRORS.get(cls)
        if answer is not None:
            return answer
    return None


def error_response(
    status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None, **extra: Any
) -> Response:
    """The JSON error body ``{"error": {"code", "message", ...extra}}`` with ``status``."""
    body = encode(ErrorBody(ErrorDetail(code, message, **extra)))
    return Response(body, status_code=status, headers=headers, media_type="application/json")


async def _answer(request: Request, exc: Exception) -> Response:
    answer = answer_for(type(exc))
    assert answer is not None, "registered only for the classes ERRORS maps"
    if answer.logged:
        # The app's `Tracebacks` keeps an outage from writing one traceback per request; an app
        # without one (not built by create_app) logs every traceback.
        limited = tracebacks_of(request)
        limited.error(logger, exc, "%s on %s %s: %s", answer.code, request.method, request.url.path, exc)
    if isinstance(exc, StoreError) and (metrics := getattr(request.state, "metrics", None)) is not None:
        metrics.store_error(exc)
    return error_response(answer.status, answer.code, answer.message(exc), headers=answer.headers, **answer.fields(exc))


_HTTP_CODES: Final = {404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette's own: no route for the path, or not for the method.
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    # Starlette's 405 carries the Allow header RFC 9110 §15.5.6 requires.
    return error_response(exc.status_code, code, str(exc.detail), headers=exc.headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(_INTERNAL.status, _INTERNAL.code, _INTERNAL.message(exc))


def tracebacks_of(request: Request) -> Tracebacks:
    """The app's `Tracebacks`; for an app that has none (not built by create_app), one that logs every traceback."""
    tracebacks = getattr(request.state, "tracebacks", None)
    return tracebacks if isinstance(tracebacks, Tracebacks) else Tracebacks(window=0)


def stream_error(exc: Exception, tracebacks: Tracebacks) -> bytes:
    """The data of the ``error`` frame that ends a follow stream ``exc`` broke once its status line was sent."""
    answer = answer_for(type(exc)) or _INTERNAL
    if answer.logged:
        tracebacks.error(logger, exc, "%s while following: %s", answer.code, exc)
    return encode(FollowError(answer.code))


EXCEPTION_HANDLERS: Final[Mapping[Any, ExceptionHandler]] = {
    **{error: _answer for error in ERRORS},
    HTTPException: _http_error,
    Exception: _unexpected,
}

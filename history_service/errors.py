"""The service's errors: one tree, each error named for what happened (docs/protocol.md §11).

Only the one error table, `history_service.answers.ERRORS`, knows how each is answered::

    HistoryServiceError(Exception)
    ├── RequestError                 the request, as sent, is refused before the service acts on it
    │   ├── InvalidParameter         a query parameter, Last-Event-ID or X-Principal: malformed or out of range
    │   ├── DuplicateHeader          two Authorization or two X-Principal headers
    │   ├── Unauthenticated          a missing or wrong service token or principal
    │   ├── NoAcceptableCoding       Accept-Encoding refuses every coding, identity included
    │   ├── NotJson                  a body sent without Content-Type: application/json
    │   ├── UnsupportedEncoding      a Content-Encoding other than zstd, br or gzip
    │   ├── BodyTooLarge             a body past the byte or the JSON value limit
    │   ├── InvalidHeader            a create body that is not a valid session header
    │   ├── InvalidBatch             an append body that is not {"events": [...]} with an item
    │   ├── InvalidEvent             an append item that breaks §2 or §3; ``index`` names it
    │   └── InvalidSeed              a seeder request that is not one
    ├── ContentEncodingError(ValueError)  a coded body that is corrupt, or has bytes after its end
    │   └── ContentTooLargeError     it decodes past its size limit
    ├── NotOwner                     the session belongs to another principal
    ├── SubagentChild                a subagent child addressed as a top-level session
    ├── NotADirectChild              the caller's session addressed under a parent it is not a child of
    ├── InvalidParent                a child header whose parent the caller does not own
    ├── ThroughBeyondHead            a page asked to end past the session's head
    ├── Overloaded                   too many bytes in flight, or too many follow streams: retry later
    ├── ViewerUnavailable            the viewer's sources are not installed
    ├── SubscriptionRefused          the subscription API under /ds refuses a request (§13.6)
    │   ├── SubscriptionNotFound         no such subscription, or no such route of the API
    │   ├── SubscriptionInvalid          a malformed body, id, stream name or ack
    │   ├── SubscriptionBodyTooLarge     a body past the API's limit
    │   ├── WebhookUrlRejected           a webhook URL this server will not notify
    │   ├── WakeTokenInvalid             a missing or wrong wake token
    │   │   └── WakeTokenExpired         a wake token past its time
    │   ├── WakeFenced                   a token or body of a wake no longer open, or a change that lost its race
    │   ├── SubscriptionExists           a PUT of an id that has another configuration
    │   ├── SubscriptionLimit            too many subscriptions, or links of one
    │   ├── WakeClaimed                  a claim of a wake another worker holds
    │   ├── NoPendingWork                a claim with nothing to wake for
    │   └── InvalidAck                   an ack of no linked stream, behind its ack or past its tail
    └── CommandError                 a ``history-service`` command's failure, reported as one line

`CommandError` has no row in the table: a command's failure is a line on stderr, never an answer.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BodyTooLarge",
    "CommandError",
    "ContentEncodingError",
    "ContentTooLargeError",
    "DuplicateHeader",
    "HistoryServiceError",
    "InvalidBatch",
    "InvalidEvent",
    "InvalidHeader",
    "InvalidParameter",
    "InvalidParent",
    "InvalidSeed",
    "InvalidAck",
    "NoAcceptableCoding",
    "NoAcceptableType",
    "NoPendingWork",
    "NotADirectChild",
    "NotJson",
    "NotOwner",
    "Overloaded",
    "RequestError",
    "SubagentChild",
    "SubscriptionBodyTooLarge",
    "SubscriptionExists",
    "SubscriptionInvalid",
    "SubscriptionLimit",
    "SubscriptionNotFound",
    "SubscriptionRefused",
    "ThroughBeyondHead",
    "Unauthenticated",
    "UnsupportedEncoding",
    "ViewerUnavailable",
    "WakeClaimed",
    "WakeFenced",
    "WakeTokenExpired",
    "WakeTokenInvalid",
    "WebhookUrlRejected",
]


class HistoryServiceError(Exception):
    """Base class for the service's own errors."""


class RequestError(HistoryServiceError):
    """Base class for a request refused as it was sent: its parameters, headers or body."""


class InvalidParameter(RequestError):
    """Raised when a query parameter, ``Last-Event-ID`` or ``X-Principal`` is unknown, malformed or out of range."""


class DuplicateHeader(RequestError):
    """Raised when a request carries a credential header twice: proxies disagree on which one wins."""


class Unauthenticated(RequestError):
    """Raised in token mode when the service token or the principal is missing or wrong."""


class NoAcceptableCoding(RequestError):
    """Raised when ``Accept-Encoding`` refuses every coding the service offers, identity included."""


class NoAcceptableType(RequestError):
    """Raised when ``Accept`` refuses every media type a read can answer in, its default included."""


class NotJson(RequestError):
    """Raised when a body is not sent as ``Content-Type: application/json``."""


class UnsupportedEncoding(RequestError):
    """Raised when a body's ``Content-Encoding`` is not one the service decodes."""


class BodyTooLarge(RequestError):
    """Raised when a body passes the byte limit as received, or holds more JSON values than allowed."""


class InvalidHeader(RequestError):
    """Raised when a create body is JSON but not a valid session header; the message says where and why."""


class InvalidBatch(RequestError):
    """Raised when an append body is JSON but not ``{"events": [...]}`` with at least one item."""


class InvalidEvent(RequestError):
    """Raised when an item of an append body breaks the event or row rules; ``index`` is its position."""

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message)
        self.index = index


class InvalidSeed(RequestError):
    """Raised when a seeder request is not one the seeder can run."""


class ContentEncodingError(HistoryServiceError, ValueError):
    """Raised when a body cannot be decoded with its content coding."""


class ContentTooLargeError(ContentEncodingError):
    """Raised when a compressed body decodes to more than its size limit; decoding stops there."""


class NotOwner(HistoryServiceError):
    """Raised when the session an address names belongs to another principal."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} belongs to another principal")
        self.session_id = session_id


class SubagentChild(HistoryServiceError):
    """Raised when a subagent child is read as a top-level session, not through its parent."""

    def __init__(self, session_id: str, *, parent: str) -> None:
        super().__init__(f"session {session_id!r} is a subagent child of {parent!r}")
        self.session_id = session_id
        self.parent = parent


class NotADirectChild(HistoryServiceError):
    """Raised when the caller's session is read under a parent that it is not a direct subagent child of."""

    def __init__(self, child: str, *, parent: str) -> None:
        super().__init__(f"session {child!r} is not a direct subagent child of {parent!r}")
        self.child = child
        self.parent = parent


class InvalidParent(HistoryServiceError):
    """Raised when a subagent header names a parent that does not exist or that the caller does not own."""

    def __init__(self, parent: str) -> None:
        super().__init__(f"no session {parent!r} to be the parent")
        self.parent = parent


class ThroughBeyondHead(HistoryServiceError):
    """Raised when a page is asked to end (``through``) past the head of its session."""

    def __init__(self, through: int, head: int) -> None:
        super().__init__(f"through {through} is beyond the head {head}")
        self.through = through
        self.head = head


class Overloaded(HistoryServiceError):
    """Raised when a read would pass the process's budget of bytes in flight, or a follow its cap of streams."""


class ViewerUnavailable(HistoryServiceError):
    """Raised when the viewer is asked for on an install without the JavaScript client's sources."""

    def __init__(self) -> None:
        super().__init__(
            "the viewer needs the JavaScript client's sources (clients/js/src), which this install does not have"
        )


class SubscriptionRefused(HistoryServiceError):
    """Base class for a request the subscription API refuses (docs/protocol.md §13.6).

    ``code`` is the code as the Durable Streams protocol spells it in its answers under ``/ds``.
    """

    code: ClassVar[str] = "INTERNAL"

    def __init_subclass__(cls, *, code: str, **options: Any) -> None:
        super().__init_subclass__(**options)
        cls.code = code


class SubscriptionNotFound(SubscriptionRefused, code="SUBSCRIPTION_NOT_FOUND"):
    """Raised when the owner has no subscription of the id, or a path under ``__ds/`` names no route of the API."""


class SubscriptionInvalid(SubscriptionRefused, code="INVALID_REQUEST"):
    """Raised when a subscription request's body, id, stream name or acks are malformed or out of range."""


class SubscriptionBodyTooLarge(SubscriptionRefused, code="INVALID_REQUEST"):
    """Raised when a subscription request's body is past the API's byte limit."""


class WebhookUrlRejected(SubscriptionRefused, code="WEBHOOK_URL_REJECTED"):
    """Raised when a webhook's URL is one this server may not notify (`history_service.durable.egress`)."""


class WakeTokenInvalid(SubscriptionRefused, code="TOKEN_INVALID"):
    """Raised when a wake's callback, ack or release carries no token, or one that is not ours or not its own."""


class WakeTokenExpired(WakeTokenInvalid, code="TOKEN_EXPIRED"):
    """Raised when a wake token of ours has passed its time."""


class WakeFenced(SubscriptionRefused, code="FENCED"):
    """Raised when a token or body is not the open wake's, or a change lost every race to other processes."""


class SubscriptionExists(SubscriptionRefused, code="SUBSCRIPTION_ALREADY_EXISTS"):
    """Raised when a PUT names a subscription that exists with another configuration."""


class SubscriptionLimit(SubscriptionRefused, code="LIMIT_EXCEEDED"):
    """Raised when a subscription would pass the owner's or the store's count, or link too many streams."""


class WakeClaimed(SubscriptionRefused, code="ALREADY_CLAIMED"):
    """Raised when a worker claims a wake that ``holder`` holds, at ``generation``, its lease still running."""

    def __init__(self, message: str, *, holder: str, generation: int) -> None:
        super().__init__(message)
        self.holder = holder
        self.generation = generation


class NoPendingWork(SubscriptionRefused, code="NO_PENDING_WORK"):
    """Raised when a worker claims a wake while no linked stream holds data past its ack."""


class InvalidAck(SubscriptionRefused, code="INVALID_OFFSET"):
    """Raised when an ack names no linked stream, or an offset not of it, behind its ack or past its tail."""


class CommandError(HistoryServiceError):
    """Raised by a ``history-service`` command for a failure it reports as one line on stderr, exiting 1."""

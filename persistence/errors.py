"""Errors raised by the stores.

Backends translate their own failures (sqlite3, psycopg, OS errors) into this tree, so
callers never see a driver exception::

    StoreError(Exception)
    ├── SessionNotFoundError(StoreError, KeyError)   no session with that id
    ├── SessionExistsError                           creating an id that is taken
    ├── SeqConflictError                             a batch that does not continue the head
    ├── SessionClosedError                           an append to a session that was closed
    ├── InvalidSessionIdError(StoreError, ValueError) an id the store cannot hold safely
    ├── StoreNotFoundError                           no store where the URL points, and none may be created
    ├── SchemaVersionError                           a database or log written by another schema
    ├── CorruptLogError                              committed data that cannot be read
    ├── SearchQueryError(StoreError, ValueError)     a search query that cannot be searched (docs/protocol.md §14)
    ├── SearchUnsupportedError                       a store that keeps no search index (JSONL)
    └── StreamError                                  a Durable Streams write or read refused (docs/protocol.md §13)
        ├── StreamNotFoundError                      no such stream (or a fork's missing source)
        ├── StreamGoneError                          deleted, but still read through by its forks: 410
        ├── StreamConflictError                      a create that disagrees, a content type or Stream-Seq out of turn
        ├── StreamClosedError                        a write to a closed stream
        ├── StreamRequestError                       a request the stream's rules refuse: 400
        ├── StreamBodyTooLargeError                  a JSON-mode body past its value limit: 413
        ├── StreamValueTooLargeError                 a JSON value past a stored piece: 413
        ├── ProducerFencedError                      a producer's stale epoch: 403
        └── ProducerGapError                         a producer's seq past the next one: 409
"""

from __future__ import annotations

__all__ = [
    "CorruptLogError",
    "InvalidSessionIdError",
    "SchemaVersionError",
    "SearchQueryError",
    "SearchUnsupportedError",
    "SeqConflictError",
    "SessionClosedError",
    "SessionExistsError",
    "SessionNotFoundError",
    "StoreError",
    "StoreNotFoundError",
    "ProducerFencedError",
    "ProducerGapError",
    "StreamBodyTooLargeError",
    "StreamClosedError",
    "StreamConflictError",
    "StreamError",
    "StreamGoneError",
    "StreamNotFoundError",
    "StreamRequestError",
    "StreamValueTooLargeError",
]


class StoreError(Exception):
    """Base class for every store failure."""


class SessionNotFoundError(StoreError, KeyError):
    """Raised when a session id is unknown to the store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session {session_id!r}")
        self.session_id = session_id

    def __str__(self) -> str:
        return str(self.args[0])


class SessionExistsError(StoreError):
    """Raised when a session is created with an id that already exists."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already exists")
        self.session_id = session_id


class SeqConflictError(StoreError):
    """Raised when a batch does not start at ``head_seq + 1`` and is not an exact re-send."""

    def __init__(self, message: str, *, session_id: str, head_seq: int) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.head_seq = head_seq


class SessionClosedError(StoreError):
    """Raised when a batch that is not an exact re-send is appended to a closed session."""

    def __init__(self, session_id: str, *, head_seq: int) -> None:
        super().__init__(f"session {session_id!r} is closed; its head is {head_seq}")
        self.session_id = session_id
        self.head_seq = head_seq


class InvalidSessionIdError(StoreError, ValueError):
    """Raised when a session id cannot be stored safely (for example, too long once encoded)."""


class StoreNotFoundError(StoreError):
    """Raised when a store URL points where no store is, and the caller may not create one (or cannot, there)."""


class SchemaVersionError(StoreError):
    """Raised when a store was written by a schema version this build does not know."""


class CorruptLogError(StoreError):
    """Raised when committed data cannot be decoded; the message names the place."""


class SearchQueryError(StoreError, ValueError):
    """Raised for a search query that is too long, too big, or holds no word to search for."""


class SearchUnsupportedError(StoreError):
    """Raised by a store that keeps no search index."""


class StreamError(StoreError):
    """Base class of the Durable Streams refusals."""


class StreamNotFoundError(StreamError):
    pass


class StreamGoneError(StreamError):
    pass


class StreamConflictError(StreamError):
    pass


class StreamRequestError(StreamError):
    pass


class StreamBodyTooLargeError(StreamError):
    """A JSON-mode body holding more values than the request's ``max_values`` allows."""


class StreamValueTooLargeError(StreamError):
    """A JSON value larger than one stored piece of an append (`codec.PIECE_BYTES`)."""


class StreamClosedError(StreamError):
    """A write to a closed stream; ``tail`` is where it ended, in its life ``life``."""

    def __init__(self, message: str, *, tail: int, life: int = 0) -> None:
        super().__init__(message)
        self.tail = tail
        self.life = life


class ProducerFencedError(StreamError):
    """A producer's epoch older than the stream's; ``epoch`` is the current one."""

    def __init__(self, message: str, *, epoch: int) -> None:
        super().__init__(message)
        self.epoch = epoch


class ProducerGapError(StreamError):
    def __init__(self, message: str, *, expected: int, received: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.received = received

"""Session stores: an in-memory reference, JSONL files and SQL (SQLite, PostgreSQL).

Every store implements `HistoryStore` and passes one contract suite.
"""

from __future__ import annotations

from persistence.base import (
    DEFAULT_OWNER,
    DEFAULT_SESSION_CACHE,
    DEFAULT_STORE_TIMEOUT,
    AppendResult,
    HistoryStore,
    PageRead,
    SessionInfo,
    SessionKey,
    SessionSummary,
    closed_at_of,
    expires_at_of,
    in_listing,
    newest_first,
    now_ms,
    subagent_parent,
)
from persistence.errors import (
    CorruptLogError,
    InvalidSessionIdError,
    ProducerFencedError,
    ProducerGapError,
    SchemaVersionError,
    SeqConflictError,
    SessionClosedError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
    StoreNotFoundError,
    StreamClosedError,
    StreamConflictError,
    StreamError,
    StreamGoneError,
    StreamNotFoundError,
    StreamRequestError,
)
from persistence.jsonl import JsonlStore
from persistence.memory import MemoryStore
from persistence.message_index import select_cuts
from persistence.notify import HeadListener, Notice, stream_of
from persistence.rules import expiry, page_span
from persistence.sql import SqlStore
from persistence.state import KeyedLocks, Lru
from persistence.streams import (
    AppendOutcome,
    AppendRequest,
    Chunk,
    CreateRequest,
    MemoryStreams,
    Producer,
    ProducerClaim,
    ReadResult,
    StreamMeta,
    StreamStore,
    media_type,
)
from persistence.url import describe_url, open_store, shareable_across_workers

__all__ = [
    "AppendOutcome",
    "AppendRequest",
    "AppendResult",
    "Chunk",
    "closed_at_of",
    "CorruptLogError",
    "CreateRequest",
    "DEFAULT_OWNER",
    "DEFAULT_SESSION_CACHE",
    "DEFAULT_STORE_TIMEOUT",
    "describe_url",
    "expires_at_of",
    "expiry",
    "HeadListener",
    "HistoryStore",
    "in_listing",
    "InvalidSessionIdError",
    "JsonlStore",
    "KeyedLocks",
    "Lru",
    "media_type",
    "MemoryStore",
    "MemoryStreams",
    "newest_first",
    "Notice",
    "now_ms",
    "open_store",
    "page_span",
    "PageRead",
    "Producer",
    "ProducerClaim",
    "ProducerFencedError",
    "ProducerGapError",
    "ReadResult",
    "SchemaVersionError",
    "select_cuts",
    "SeqConflictError",
    "SessionClosedError",
    "SessionExistsError",
    "SessionInfo",
    "SessionKey",
    "SessionNotFoundError",
    "SessionSummary",
    "shareable_across_workers",
    "SqlStore",
    "StoreError",
    "StoreNotFoundError",
    "stream_of",
    "StreamClosedError",
    "StreamConflictError",
    "StreamError",
    "StreamGoneError",
    "StreamMeta",
    "StreamNotFoundError",
    "StreamRequestError",
    "StreamStore",
    "subagent_parent",
]

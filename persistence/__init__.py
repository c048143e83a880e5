"""Session stores: an in-memory reference, JSONL files and SQL (SQLite, PostgreSQL).

Every store implements `HistoryStore` and passes one contract suite.
"""

from __future__ import annotations

from persistence.base import DEFAULT_OWNER, AppendResult, HistoryStore, SessionInfo
from persistence.errors import (
    CorruptLogError,
    InvalidSessionIdError,
    SchemaVersionError,
    SeqConflictError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
)
from persistence.memory import MemoryStore
from persistence.message_index import select_cuts
from persistence.sql import SqlStore

__all__ = [
    "AppendResult",
    "CorruptLogError",
    "DEFAULT_OWNER",
    "HistoryStore",
    "InvalidSessionIdError",
    "MemoryStore",
    "SchemaVersionError",
    "select_cuts",
    "SeqConflictError",
    "SessionExistsError",
    "SessionInfo",
    "SessionNotFoundError",
    "SqlStore",
    "StoreError",
]

"""The SQL store: SQLite embedded, PostgreSQL for several nodes, one store behind one backend interface."""

from __future__ import annotations

from persistence.sql.schema import meta_table, metadata, records_table, sessions_table
from persistence.sql.store import INLINE_BYTES, SCHEMA_VERSION, SqlStore

__all__ = ["INLINE_BYTES", "SCHEMA_VERSION", "SqlStore", "meta_table", "metadata", "records_table", "sessions_table"]

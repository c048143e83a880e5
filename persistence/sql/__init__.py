"""The SQL store: SQLite embedded, PostgreSQL for several nodes, one store behind one backend interface."""

from __future__ import annotations

from persistence.sql.schema import meta_table, metadata, records_table, sessions_table
from persistence.sql.store import SCHEMA_VERSION, SqlStore

__all__ = ["SCHEMA_VERSION", "SqlStore", "meta_table", "metadata", "records_table", "sessions_table"]

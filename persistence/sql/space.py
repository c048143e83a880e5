"""The SQL store's space on disk: how much it takes, and giving back what deleted sessions freed (§6.4).

A delete frees pages inside the database: SQLite reuses them for later writes, and
PostgreSQL's autovacuum marks dead rows reusable. Neither gives space back to the file
system by itself; `vacuum` does (SQLite's ``VACUUM`` rebuilds the file, PostgreSQL's plain
``VACUUM`` makes the space reusable at once and trims empty pages at the end of each table).
"""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from persistence.errors import StoreError
from persistence.sql.schema import metadata

__all__ = ["size", "vacuum"]


def _sqlite_path(engine: Engine) -> str | None:
    database = engine.url.database
    return None if database in (None, "", ":memory:") else database


def size(engine: Engine) -> int:
    """The bytes the store's tables take: SQLite's file with its WAL, or PostgreSQL's relations with their indexes."""
    if engine.dialect.name == "sqlite":
        path = _sqlite_path(engine)
        if path is None:
            return 0
        return sum(os.path.getsize(name) for name in (path, f"{path}-wal") if os.path.exists(name))
    with engine.connect() as conn:
        total = 0
        for table in metadata.sorted_tables:
            total += conn.execute(sa.select(sa.func.pg_total_relation_size(table.name))).scalar_one()
        return int(total)


def vacuum(engine: Engine) -> None:
    """Give back the space deleted sessions freed; it holds the database's write lock while it runs (SQLite)."""
    pooled = engine.raw_connection()
    connection: Any = pooled.dbapi_connection
    try:
        # Outside any transaction, which neither statement may run in: on the DBAPI connection itself.
        if engine.dialect.name == "sqlite":
            connection.isolation_level = None
            connection.execute("VACUUM")
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        else:
            connection.autocommit = True
            connection.execute("VACUUM " + ", ".join(table.name for table in metadata.sorted_tables))
    except engine.dialect.loaded_dbapi.Error as exc:
        raise StoreError(f"store unavailable: {exc}") from exc
    finally:
        # The connection's settings were changed for this alone: it does not go back to the pool.
        pooled.detach()
        connection.close()

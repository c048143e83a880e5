"""Giving back the space deleted sessions freed (docs/protocol.md §7.3), on the dialect's statements.

A delete frees pages inside the database: SQLite reuses them for later writes, and
PostgreSQL's autovacuum marks dead rows reusable. Neither gives space back to the file
system by itself; `vacuum` runs what the dialect says does (`Dialect.vacuum_statements`),
holding the database alone where the backend must (`Backend.alone`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy.engine import Engine

from persistence.errors import StoreError
from persistence.sql.dialect import Dialect

__all__ = ["vacuum"]


def vacuum(engine: Engine, dialect: Dialect, alone: AbstractContextManager[None]) -> None:
    """Run the dialect's vacuum within ``alone``: the database held alone where the backend needs it."""
    with alone:
        _vacuum(engine, dialect)


def _vacuum(engine: Engine, dialect: Dialect) -> None:
    pooled = engine.raw_connection()
    connection: Any = pooled.dbapi_connection
    try:
        # Outside any transaction, which none of these may run in: on the DBAPI connection itself.
        dialect.autocommit(connection)
        for statement in dialect.vacuum_statements():
            connection.execute(statement)
    except engine.dialect.loaded_dbapi.Error as exc:
        raise StoreError(f"store unavailable: {exc}") from exc
    finally:
        # The connection's settings were changed for this alone: it does not go back to the pool.
        pooled.detach()
        connection.close()

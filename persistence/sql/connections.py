"""The SQL store's connections on its engine: a DBAPI connection of its own, and bounded SQLAlchemy transactions.

The hot path runs on DBAPI connections the backend keeps (its readers, its writer), opened
here as the engine's are (the SQLite pragmas); the schema work and the listings, off the hot
path, take a SQLAlchemy transaction from the engine's pool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from persistence.errors import StoreError
from persistence.sql.dialect import Deadline

__all__ = ["Connections", "failure"]


def failure(exc: BaseException | None, deadline: Deadline | None, timeout: float) -> str:
    """What went wrong, for a `StoreError`: the bound when the watchdog cut the call, else the driver's words."""
    if deadline is not None and deadline.expired:
        return f"no answer within {timeout:g} s"
    return str(exc)


class Connections:
    """Connections on ``engine``; ``bound(connection)`` bounds a call on one (the backend's), within ``timeout``."""

    def __init__(
        self, engine: Engine, bound: Callable[[Any], AbstractContextManager[Deadline]], timeout: float
    ) -> None:
        self.engine = engine
        self._bound = bound
        self._timeout = timeout

    def connect(self) -> Any:
        """A DBAPI connection of the store's own, set up as the engine's are (the SQLite pragmas)."""
        pooled = self.engine.raw_connection()
        connection = pooled.dbapi_connection
        pooled.detach()
        return connection

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A SQLAlchemy write transaction, for schema work."""
        try:
            with self.engine.connect() as conn:
                conn = conn.execution_options(history_write=True)
                with conn.begin():
                    yield conn
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {exc.orig}") from exc

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A bounded SQLAlchemy transaction, off the hot path: the listings' reads, and PostgreSQL's purge batches."""
        deadline: Deadline | None = None
        try:
            with self.engine.connect() as conn:
                with self._bound(conn.connection.dbapi_connection) as deadline:
                    try:
                        with conn.begin():
                            yield conn
                    finally:
                        if deadline.expired:
                            # Cut by the watchdog: the pool must not hand it out again.
                            conn.invalidate()
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {failure(exc.orig, deadline, self._timeout)}") from exc

"""How one database's SQL differs, and the bounds and limits its reads and writes share.

`persistence.sql.sqlite` and `persistence.sql.pg_dialect` each implement `Dialect`: how a
statement locks a session's row, what moving a head tells the other processes, and what the
migrations and the vacuum run there. The statements (`persistence.sql.statements`,
`persistence.sql.deletion`, `persistence.sql.migrations`) are compiled with it; the runtime
that differs (where reads run, the group writer) is the backend's (`persistence.sql.backend`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Final, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Delete, Select, Update

from persistence.search import Query

__all__ = [
    "MESSAGE_PAGE",
    "READERS_KEPT",
    "Busy",
    "Deadline",
    "Dialect",
    "LongWalk",
    "busy_ms",
    "lock_waits",
]

READERS_KEPT: Final = 8
# Messages per read of the message index.
MESSAGE_PAGE: Final = 256
# A statement that moves or removes a session row, which a dialect may make tell other processes.
U = TypeVar("U", Update, Delete)


class LongWalk(Exception):
    """A cut that needs more of the message index than an event-loop read may walk."""


class Busy(Exception):
    """A read on the event loop that would wait for another connection's lock: it is retried in a worker thread."""


class Deadline:
    """One call bounded by ``seconds``; ``expired`` once its bound cut its connection (it must then be discarded)."""

    __slots__ = ("at", "connection", "done", "expired", "seconds")

    def __init__(self, connection: Any, seconds: float, at: float) -> None:
        self.connection = connection
        self.seconds = seconds
        self.at = at
        self.done = False
        self.expired = False


@contextmanager
def lock_waits(connection: Any, seconds: float) -> Iterator[Deadline]:
    """A call bounded only by how long the database waits for a lock (SQLite's busy timeout): never cut."""
    yield Deadline(connection, seconds, 0.0)


class Dialect(ABC):
    """One database's SQL, for the statements a `SqlStore` compiles and the schema work it runs."""

    # The empty byte string as a DDL default.
    EMPTY_BYTES: ClassVar[str]
    # The SQL that opens the writer's transaction (``None``: the driver opens one).
    BEGIN: ClassVar[str | None]
    # Whether a block still streaming stays out of the full-text index until it ends (`persistence.sql.search`).
    DEFERS_OPEN: ClassVar[bool]

    @abstractmethod
    def lock_head(self, head: Select[Any]) -> Select[Any]:
        """The head's read, made to hold the session's write lock to the end of the transaction."""

    @abstractmethod
    def advance(self, advance: U) -> U:
        """The head's move, made to do what else this database does with it."""

    @abstractmethod
    def advance_params(
        self, session_id: str, new_head: int, *, closed: bool = False, deleted: bool = False, incarnation: str = ""
    ) -> dict[str, Any]:
        """What `advance` (or a close, ``closed``, or a delete, ``deleted``) needs besides the session and heads."""

    @abstractmethod
    def told(
        self,
        cursor: Any,
        session_id: str,
        new_head: int,
        *,
        closed: bool = False,
        deleted: bool = False,
        incarnation: str = "",
    ) -> None:
        """After a statement on ``cursor`` moved a head, closed or deleted a session: tell the others at commit.

        Called in the unit's savepoint, so a unit rolled back tells nothing.
        """

    @abstractmethod
    def notify_stream(self, cursor: Any, name: str) -> None:
        """Tell the other processes, when this write commits, that the Durable Stream ``name`` changed."""

    @abstractmethod
    def before_migration(self, conn: Connection) -> None:
        """In the migration's transaction, before it reads the schema."""

    @abstractmethod
    def drop_default(self, conn: Connection, table: str, column: str) -> None:
        """Drop a column's default, where the database can (SQLite cannot: there it stays)."""

    @abstractmethod
    def autocommit(self, connection: Any) -> None:
        """Put a DBAPI connection in autocommit mode: each statement outside any transaction."""

    @abstractmethod
    def vacuum_statements(self) -> tuple[str, ...]:
        """What gives back the space deleted sessions freed, run outside any transaction (`persistence.sql.space`)."""

    @abstractmethod
    def search_terms(self, tokens: list[str]) -> str:
        """A passage's folded tokens as its ``terms`` column is written (`persistence.sql.search`)."""

    @abstractmethod
    def search_terms_value(self, bound: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """The ``terms`` a statement writes, from a parameter bound to `search_terms`."""

    @abstractmethod
    def search_match(self, query: Query) -> tuple[sa.FromClause, sa.ColumnElement[bool], sa.ColumnElement[Any]]:
        """Where a search reads the passages from, what those that match ``query`` meet, and the passage's id as
        the database reads matches newest first fastest."""


def busy_ms(timeout: float) -> int:
    """SQLite's busy timeout, in whole milliseconds, for a bound in seconds."""
    return max(1, round(timeout * 1000))

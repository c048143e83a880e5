"""What a `SqlStore` asks of its database at run time: the one interface SQLite and PostgreSQL implement.

`persistence.sql.sqlite` and `persistence.sql.postgres` each implement `Backend`; the store
(`persistence.sql.store`) holds one, calls it with the units of `persistence.sql.pages` and
`persistence.sql.writes`, and never asks which it is. A backend owns its connections'
setup, where its reads run (SQLite on the event loop, PostgreSQL in one hop), its group
writer (PostgreSQL's writes a group's appends in one statement), readiness, head notices,
the sweeper's turn and closing. How its SQL differs is its `Dialect`'s.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import Any, TypeVar

from sqlalchemy.engine import Engine

from codec import StoredRecord
from persistence.base import PageRead, sole_sweeper
from persistence.call_bound import Outstanding, call_bound
from persistence.group_commit import GroupCommit
from persistence.notify import HeadListener
from persistence.sql.connections import Connections
from persistence.sql.dialect import Deadline, Dialect
from persistence.sql.groups import SessionUnit, SqlGroups
from persistence.sql.lines import Lines
from persistence.sql.reads import KeptReaders
from persistence.sql.search import SqlSearch
from persistence.sql.statements import Statements
from persistence.sql.tails import Tails

__all__ = ["Backend"]

T = TypeVar("T")


class Backend(ABC):
    """One database's runtime for a `SqlStore` on ``engine``: reads, the group writer, notices, readiness, closing.

    ``lines`` are the store's lines' packing and ``tails`` the open runs its writer keeps. It
    holds the statements compiled for its dialect (``sql``), its connections, and the writer
    thread (``writer``) that commits groups with ``groups``. A subclass sets ``dialect`` and
    its own state, then calls this, then sets ``readers``.
    """

    dialect: Dialect
    # The kept reader connections, which `read` takes.
    readers: KeptReaders

    def __init__(
        self, engine: Engine, timeout: float, origin: str, *, lines: Lines, tails: Tails, indexed: bool = True
    ) -> None:
        self.engine = engine
        self.timeout = timeout
        self.origin = origin
        self.sql = Statements(engine.dialect, self.dialect)
        self.search = SqlSearch(engine.dialect, self.dialect, indexed=indexed)
        self.lines = lines
        self.tails = tails
        dbapi = engine.dialect.loaded_dbapi
        self.driver_error: type[Exception] = dbapi.Error
        self.integrity_error: type[Exception] = dbapi.IntegrityError
        # Calls whose callers gave up (`persistence.call_bound`): closing waits for them.
        self.outstanding = Outstanding()
        self.connections = Connections(engine, self.bound, timeout)
        self.groups = self.group_writer()
        self.writer = GroupCommit(self.groups, name="history-sql-writer", bound=self.call_bound())

    @classmethod
    @abstractmethod
    def serves(cls, backend: str) -> bool:
        """Whether this is the backend for a SQLAlchemy backend name."""

    @classmethod
    @abstractmethod
    def connect_args(cls, timeout: float) -> dict[str, Any]:
        """The driver's connect arguments, bounding connecting by ``timeout`` where the driver can."""

    @classmethod
    @abstractmethod
    def prepare_engine(cls, engine: Engine, busy_ms: int) -> None:
        """Set up a new engine's connections and transactions."""

    @abstractmethod
    def bound(self, connection: Any) -> AbstractContextManager[Deadline]:
        """Bound one call on a DBAPI connection."""

    @abstractmethod
    def group_writer(self) -> SqlGroups:
        """How a group of appends and creates commits on this database."""

    @abstractmethod
    async def read(self, work: Callable[..., T], *args: Any) -> T:
        """``work(cursor, *args)`` on a reader, where this database's reads run."""

    @abstractmethod
    async def read_page(
        self, session_id: str, through: int | None, before: int | None, max_messages: int, max_bytes: int | None
    ) -> PageRead:
        """`HistoryStore.read_page`."""

    @abstractmethod
    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        """`HistoryStore.read_stored`."""

    @abstractmethod
    async def check_ready(self) -> None:
        """`HistoryStore.check_ready`."""

    @abstractmethod
    def listener(self) -> HeadListener | None:
        """Head notices from every process, where this database sends them."""

    @abstractmethod
    def size(self) -> int:
        """The bytes the store's tables take on disk (docs/protocol.md §7.3)."""

    @abstractmethod
    async def close(self) -> None:
        """Close what this backend opened on the event loop; then `close_sync`, in a thread."""

    def opened(self) -> None:
        """Once per open, before the schema is migrated: here, nothing to do."""
        return None

    def call_bound(self) -> float | None:
        """The most a caller waits for one whole call (`persistence.call_bound`), or ``None``: unbounded.

        Here unbounded: an embedded database's calls wait only for its locks, which the timeout bounds already,
        and for this process's own work, which a slow machine may legitimately stretch.
        """
        return None

    def alone(self) -> AbstractContextManager[None]:
        """Hold the database alone while `persistence.sql.space.vacuum` runs, or refuse with `StoreError`.

        Here, nothing to hold: the vacuum runs beside the database's other users.
        """
        return nullcontext()

    def alone_now(self) -> bool:
        """Whether no other store has the database open now, so work that would stall them may run at open.

        Here, always: a database whose writers lock rows, not the whole database, stalls no one.
        """
        return True

    async def purge(self, session_id: str, work: Callable[[Any], bool]) -> bool:
        """One batch of a deleted session's records (`Deletion.purge_some` as ``work``); whether more remain.

        Here, a unit of the writer's between groups of appends: a database with one writer has no other place.
        """
        return bool(await self.writer.run(SessionUnit(session_id, work), session_id))

    def sweeping(self) -> AbstractAsyncContextManager[bool]:
        """`HistoryStore.sweeping`: always, on a database that one process writes."""
        return sole_sweeper()

    def close_sync(self) -> None:
        """Stop the writer and close every connection, in a thread; a backend closes its own after."""
        self.writer.close()
        self.groups.close()
        # Calls whose callers gave up (`persistence.call_bound`) end within the timeout: their connections
        # come back, to be closed with the rest.
        self.outstanding.wait(call_bound(self.timeout))
        self.readers.close()
        self.engine.dispose()

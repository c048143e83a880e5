"""What the SQL store asks of its database's dialect, and what the two dialects share.

`persistence.sql.sqlite` and `persistence.sql.postgres` each implement `Dialect`; the store
(`persistence.sql.store`) holds one and never asks which it is. Each dialect owns its
connections' setup, its read path (SQLite reads on the event loop, PostgreSQL in one hop),
its group writer (PostgreSQL's writes a group's appends in one statement), readiness and head notices.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple, TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import Delete, Select, Update

from codec import StoredRecord
from persistence.base import PageRead, SessionInfo, sole_sweeper
from persistence.notify import HeadListener
from persistence.sql.groups import SessionUnit, SqlGroups

if TYPE_CHECKING:
    from persistence.sql.store import SqlStore

__all__ = ["MESSAGE_PAGE", "READERS_KEPT", "Busy", "Deadline", "Dialect", "Head", "LongWalk"]

READERS_KEPT: Final = 8
# Messages per read of the message index.
MESSAGE_PAGE: Final = 256
T = TypeVar("T")
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


class Head(NamedTuple):
    """A page's session, end and cuts, once its head is read."""

    info: SessionInfo
    to_seq: int
    cuts: list[int]


class Dialect(ABC):
    """One database's ways, for a `SqlStore` on an engine of that database."""

    # The empty byte string as a DDL default.
    EMPTY_BYTES: ClassVar[str]
    # The SQL that opens the writer's transaction (``None``: the driver opens one).
    BEGIN: ClassVar[str | None]

    @classmethod
    @abstractmethod
    def serves(cls, backend: str) -> bool:
        """Whether this dialect is the one for a SQLAlchemy backend name."""

    @classmethod
    @abstractmethod
    def connect_args(cls, timeout: float) -> dict[str, Any]:
        """The driver's connect arguments, bounding connecting by ``timeout`` where the driver can."""

    @classmethod
    @abstractmethod
    def prepare_engine(cls, engine: Engine, busy_ms: int) -> None:
        """Set up a new engine's connections and transactions."""

    @abstractmethod
    def __init__(self, engine: Engine, timeout: float, origin: str) -> None: ...

    @abstractmethod
    def opened(self, store: SqlStore) -> None:
        """Once per open, before the schema is migrated."""

    @abstractmethod
    def before_migration(self, conn: Connection) -> None:
        """In the migration's transaction, before it reads the schema."""

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
    def notify_stream(self, cursor: Any, name: str) -> None:
        """Tell the other processes, when this write commits, that the Durable Stream ``name`` changed."""

    @abstractmethod
    def bound(self, connection: Any) -> AbstractContextManager[Deadline]:
        """Bound one call on a DBAPI connection."""

    def call_bound(self, timeout: float) -> float | None:
        """The most a caller waits for one whole call (`persistence.call_bound`), or ``None``: unbounded.

        Here unbounded: an embedded database's calls wait only for its locks, which ``timeout`` bounds already,
        and for this process's own work, which a slow machine may legitimately stretch.
        """
        return None

    @abstractmethod
    def writer(self, connection: Any) -> Any:
        """A new DBAPI connection, set up for the writer."""

    @abstractmethod
    def groups(self, store: SqlStore) -> SqlGroups:
        """The store's group writer: how a group of appends and creates commits on this database."""

    @abstractmethod
    def new_reader(self, store: SqlStore, busy_ms: int) -> tuple[Any, int]:
        """A new reader connection, and the busy timeout (ms) it has."""

    @abstractmethod
    def wait_for_locks(self, connection: Any, busy: int, busy_ms: int) -> int:
        """Make a reader that waits ``busy`` ms for a lock wait ``busy_ms``; returns what it waits now."""

    @abstractmethod
    def run_read(self, connection: Any, work: Callable[..., T], args: tuple[Any, ...]) -> T:
        """``work(cursor, *args)`` as one read on ``connection``."""

    @abstractmethod
    def lock_taken(self, exc: Exception) -> bool:
        """Whether a read failed only because another connection holds a lock."""

    @abstractmethod
    async def read(self, store: SqlStore, work: Callable[..., T], *args: Any) -> T:
        """``work`` on a reader, where this database's reads run."""

    @abstractmethod
    async def read_page(
        self,
        store: SqlStore,
        session_id: str,
        through: int | None,
        before: int | None,
        max_messages: int,
        max_bytes: int | None,
    ) -> PageRead:
        """`HistoryStore.read_page`."""

    @abstractmethod
    async def read_stored(self, store: SqlStore, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        """`HistoryStore.read_stored`."""

    @abstractmethod
    def size(self) -> int:
        """The bytes the store's tables take on disk (docs/protocol.md §7.3)."""

    @abstractmethod
    def autocommit(self, connection: Any) -> None:
        """Put a DBAPI connection in autocommit mode: each statement outside any transaction."""

    @abstractmethod
    def vacuum_statements(self) -> tuple[str, ...]:
        """What gives back the space deleted sessions freed, run outside any transaction (`persistence.sql.space`)."""

    def alone(self) -> AbstractContextManager[None]:
        """Hold the database alone while `persistence.sql.space.vacuum` runs, or refuse with `StoreError`.

        Here, nothing to hold: the vacuum runs beside the database's other users.
        """
        return nullcontext()

    @abstractmethod
    def drop_default(self, conn: Connection, table: str, column: str) -> None:
        """Drop a column's default, where the database can (SQLite cannot: there it stays)."""

    async def purge(self, store: SqlStore, session_id: str, work: Callable[[Any], bool]) -> bool:
        """One batch of a deleted session's records (`Deletion.purge_some` as ``work``); whether more remain.

        Here, a unit of the writer's between groups of appends: a database with one writer has no other place.
        """
        return bool(await store._writer.run(SessionUnit(session_id, work), session_id))

    def sweeping(self, engine: Engine) -> AbstractAsyncContextManager[bool]:
        """`HistoryStore.sweeping`: always, on a database that one process writes."""
        return sole_sweeper()

    @abstractmethod
    async def check_ready(self, store: SqlStore) -> None:
        """`HistoryStore.check_ready`."""

    @abstractmethod
    def listener(self) -> HeadListener | None:
        """Head notices from every process, where this database sends them."""

    @abstractmethod
    async def close(self) -> None:
        """Close what this dialect opened on the event loop."""

    @abstractmethod
    def close_sync(self) -> None:
        """Close what this dialect opened in threads, once the store's connections are closed."""


def busy_ms(timeout: float) -> int:
    """SQLite's busy timeout, in whole milliseconds, for a bound in seconds."""
    return max(1, round(timeout * 1000))

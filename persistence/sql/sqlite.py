"""SQLite, embedded: WAL, ``BEGIN IMMEDIATE`` for the writer, and reads on the event loop.

A read runs on the calling event loop, where a small page costs tens of microseconds, less
than the hop to a worker thread (about 110 µs measured); a read whose records pass
`OFF_LOOP_BYTES`, or that would wait for another connection's lock, is finished in a worker
thread. A writer, or a read in a worker thread, waits up to the store's bound for a lock.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar
from urllib.parse import quote

import anyio.to_thread
from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Select
from sqlalchemy.sql.compiler import SQLCompiler

from codec import StoredRecord
from persistence.base import PageRead
from persistence.errors import StoreError
from persistence.notify import HeadListener
from persistence.rules import page_span
from persistence.sql.dialect import Busy, Deadline, Dialect, Head, LongWalk, U
from persistence.sql.groups import SqlGroups
from persistence.sql.holders import Holders
from persistence.sql.schema import PROBE, CodePointOrder, StoredIncarnation

if TYPE_CHECKING:
    from persistence.sql.store import SqlStore

__all__ = ["SqliteDialect"]

# Message-index pages a read on the event loop may walk to find its cut (a page is 256 messages).
_INLINE_MESSAGE_PAGES: Final = 4
# SQLite's "busy" and "locked" primary result codes: another connection holds the lock a statement needs.
_SQLITE_BUSY: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
# How long the probe's own SQLite connection waits for a lock before it reports the store busy.
_PROBE_LOCK_WAIT: Final = 2.0
T = TypeVar("T")


@compiles(CodePointOrder)
def _code_point_order(element: CodePointOrder, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLite's default BINARY collation already compares UTF-8 text by code point.
    return compiler.process(element.column, **kw)


@compiles(StoredIncarnation)
def _stored_incarnation(element: StoredIncarnation, compiler: SQLCompiler, **kw: Any) -> str:
    # The header is stored as a blob of UTF-8 JSON; SQLite's JSON functions read text.
    return f"json_extract(CAST({compiler.process(element.header, **kw)} AS TEXT), '$.incarnation')"


def _prepare(dbapi_connection: Any, busy_ms: int) -> None:
    """Every connection's pragmas, waiting up to ``busy_ms`` for a lock (WAL, which the file keeps, is set at open)."""
    # Let SQLAlchemy's begin event, not pysqlite, open transactions.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
    cursor.execute("PRAGMA synchronous=FULL")
    # Off: a deleted session's records outlive its row until they are purged (`persistence.sql.deletion`),
    # which a version-4 database's foreign key on history_records would refuse. The store keeps the rest.
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.close()


def _busy(exc: Exception) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode & 0xFF in _SQLITE_BUSY


class SqliteDialect(Dialect):
    EMPTY_BYTES: ClassVar[str] = "X''"
    # The write lock up front, so two processes never duplicate or skip a seq.
    BEGIN: ClassVar[str | None] = "BEGIN IMMEDIATE"

    @classmethod
    def serves(cls, backend: str) -> bool:
        return backend == "sqlite"

    @classmethod
    def connect_args(cls, timeout: float) -> dict[str, Any]:
        return {}

    @classmethod
    def prepare_engine(cls, engine: Engine, busy_ms: int) -> None:
        @sa_event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            _prepare(dbapi_connection, busy_ms)

        @sa_event.listens_for(engine, "begin")
        def _begin(connection: Connection) -> None:
            write = connection.get_execution_options().get("history_write", False)
            connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    def __init__(self, engine: Engine, timeout: float, origin: str) -> None:
        self._engine = engine
        self._timeout = timeout
        path = self._file()
        self._holders = Holders(path) if path is not None else None

    def size(self) -> int:
        path = self._engine.url.database
        if path in (None, "", ":memory:"):
            return 0
        return sum(os.path.getsize(name) for name in (path, f"{path}-wal") if os.path.exists(name))

    def autocommit(self, connection: Any) -> None:
        connection.isolation_level = None

    def vacuum_statements(self) -> tuple[str, ...]:
        # VACUUM rewrites the file; the checkpoint then cuts the WAL, which the rewrite went through.
        return ("VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)")

    def alone(self) -> AbstractContextManager[None]:
        return self._holders.alone() if self._holders is not None else nullcontext()

    def opened(self, store: SqlStore) -> None:
        """The store's hold on the file (`Holders`), then WAL mode, which the file keeps.

        Setting WAL waits for other connections' locks, so it is set once, here.
        """
        if self._holders is not None:
            self._holders.hold(self._timeout)
        try:
            connection = self._engine.raw_connection()
            try:
                dbapi_connection = connection.dbapi_connection
                assert dbapi_connection is not None
                dbapi_connection.execute("PRAGMA journal_mode=WAL")
            finally:
                connection.close()
        except store._driver_error as exc:
            raise StoreError(f"store unavailable: {exc}") from exc

    def before_migration(self, conn: Connection) -> None:
        pass

    def drop_default(self, conn: Connection, table: str, column: str) -> None:
        pass  # SQLite alters no column: the default stays, and every insert names the column anyway

    def lock_head(self, head: Select[Any]) -> Select[Any]:
        # BEGIN IMMEDIATE already holds the write lock.
        return head

    def advance(self, advance: U) -> U:
        return advance

    def notify_stream(self, cursor: Any, name: str) -> None:
        return None  # one process writes an embedded database: its own writes wake its readers

    def advance_params(
        self, session_id: str, new_head: int, *, closed: bool = False, deleted: bool = False, incarnation: str = ""
    ) -> dict[str, Any]:
        return {}

    @contextmanager
    def bound(self, connection: Any) -> Iterator[Deadline]:
        # SQLite's bound is its busy timeout.
        yield Deadline(connection, self._timeout, 0.0)

    def writer(self, connection: Any) -> Any:
        return connection

    def groups(self, store: SqlStore) -> SqlGroups:
        """Each unit in a savepoint: SQLite's statements are calls in this process, so batching saves no round trip."""
        return SqlGroups(store._connect_writer, begin=self.BEGIN, aborted=store._tails.clear, bound=self.bound)

    def new_reader(self, store: SqlStore, busy_ms: int) -> tuple[Any, int]:
        if busy_ms == 0:
            return self._connect_on_loop(store), busy_ms
        return store._connect(), store._busy_ms

    def _connect_on_loop(self, store: SqlStore) -> Any:
        """A reader opened on the event loop, which never waits for a lock (`Busy` when it would).

        Opened by the driver itself, since the engine's connections wait up to the bound.
        """
        if self._file() is None:
            # No other process can lock an in-memory database; a URI the engine interprets is opened by the engine.
            connection = store._connect()
            connection.execute("PRAGMA busy_timeout=0")
            return connection
        args, options = self._engine.dialect.create_connect_args(self._engine.url)
        connection = self._engine.dialect.loaded_dbapi.connect(*args, **{**options, "timeout": 0})
        try:
            _prepare(connection, 0)
        except sqlite3.Error as exc:
            connection.close()
            if _busy(exc):
                raise Busy from exc
            raise
        return connection

    def wait_for_locks(self, connection: Any, busy: int, busy_ms: int) -> int:
        if busy != busy_ms:
            connection.execute(f"PRAGMA busy_timeout={busy_ms}")
        return busy_ms

    def run_read(self, connection: Any, work: Callable[..., T], args: tuple[Any, ...]) -> T:
        cursor = connection.cursor()
        cursor.execute("BEGIN")
        try:
            return work(cursor, *args)
        finally:
            connection.rollback()

    def lock_taken(self, exc: Exception) -> bool:
        return _busy(exc)

    async def read(self, store: SqlStore, work: Callable[..., T], *args: Any) -> T:
        """On the event loop; one that would wait for a lock there is retried in a worker thread."""
        try:
            return store._reading_on_loop(work, *args)
        except Busy:
            pass
        return await store._in_thread(work, *args)

    async def read_page(
        self,
        store: SqlStore,
        session_id: str,
        through: int | None,
        before: int | None,
        max_messages: int,
        max_bytes: int | None,
    ) -> PageRead:
        read, complete = await self.read(
            store, self._page_inline, store, session_id, through, before, max_messages, max_bytes
        )
        if complete:
            return read
        if not read.cuts:
            # The cut needs a long walk through the message index: the walk goes on in a worker thread.
            return await store._in_thread(
                store._page_walked, session_id, read.info, read.to_seq, max_messages, max_bytes
            )
        stored = await store._in_thread(store._stored, session_id, read.cuts[-1], read.to_seq)
        return PageRead(read.info, read.to_seq, read.cuts, stored)

    def _page_inline(
        self,
        cursor: Any,
        store: SqlStore,
        session_id: str,
        through: int | None,
        before: int | None,
        max_messages: int,
        max_bytes: int | None,
    ) -> tuple[PageRead, bool]:
        """The page's read in one transaction; ``False`` when its cut needs a long walk or its records are large."""
        info = store._info(cursor, session_id)
        span = page_span(info.head_seq, through, before)
        if not span.reads:
            return PageRead.unread(info, span), True
        try:
            cuts = store._cuts(cursor, session_id, span.to_seq, max_messages, _INLINE_MESSAGE_PAGES)
        except LongWalk:
            return PageRead(info, span.to_seq, [], []), False
        return store._page_of(cursor, session_id, Head(info, span.to_seq, cuts), max_bytes, True)

    async def read_stored(self, store: SqlStore, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        try:
            stored = store._reading_on_loop(store._stored_checked, session_id, from_seq, to_seq, True)
        except Busy:
            stored = None
        if stored is not None:
            return stored
        found = await store._in_thread(store._stored_checked, session_id, from_seq, to_seq, False)
        assert found is not None
        return found

    async def check_ready(self, store: SqlStore) -> None:
        """A connection of the probe's own, opened by the file's path (never creating it).

        Connections opened before still read a file whose directory was removed or moved.
        """
        if self._file() is None:
            await self.read(store, lambda cursor: cursor.execute(PROBE).fetchall())
        else:
            await anyio.to_thread.run_sync(self._probe)

    def _file(self) -> str | None:
        """The database file's absolute path, or ``None`` for an in-memory database or a URI the engine interprets."""
        url = self._engine.url
        if url.database in (None, "", ":memory:") or url.query.get("uri"):
            return None
        return os.path.abspath(url.database)

    def _probe(self) -> None:
        path = self._file()
        assert path is not None
        try:
            # mode=rw: a missing file is an error, not a new empty database.
            connection = sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, timeout=_PROBE_LOCK_WAIT)
            try:
                connection.execute(PROBE).fetchall()
            finally:
                connection.close()
        except sqlite3.Error as exc:
            raise StoreError(f"store unavailable: {exc}") from exc

    def listener(self) -> HeadListener | None:
        return None

    async def close(self) -> None:
        pass

    def close_sync(self) -> None:
        if self._holders is not None:
            self._holders.release()

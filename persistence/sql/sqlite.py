"""SQLite, embedded: WAL, ``BEGIN IMMEDIATE`` for the writer, and reads on the event loop.

`SqliteDialect` is its SQL, `SqliteBackend` its runtime (`persistence.sql.backend`).

Processes sharing a file hear each other's writes through the notices log
(`persistence.notice_log`): the dialect collects a unit's notices in the writer thread, and
`SqliteGroups` inserts the group's just before its ``COMMIT``, so a notice exists exactly when
its change does. Writers of several processes take turns through a `FileGate` on
``<file>-write``, and the work done once per store through a `FileTurn` on ``<file>-turn``.

A read runs on the calling event loop, where a small page costs tens of microseconds, less
than the hop to a worker thread (about 110 µs measured); a read whose records pass
`OFF_LOOP_BYTES`, or that would wait for another connection's lock, is finished in a worker
thread. A writer, or a read in a worker thread, waits up to the store's bound for a lock.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from typing import Any, ClassVar, Final, TypeVar
from urllib.parse import quote

import anyio.to_thread
import sqlalchemy as sa
from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Select
from sqlalchemy.sql.compiler import SQLCompiler

import persistence.sql.pages as pages
from codec import StoredRecord
from persistence.base import PageRead, sole_sweeper
from persistence.errors import StoreError
from persistence.notice_log import LogListener, tell
from persistence.notify import STREAM_NOTICE, HeadListener, notice
from persistence.search import Query, fts5
from persistence.sql.backend import Backend
from persistence.sql.dialect import Busy, Deadline, Dialect, U, busy_ms, lock_waits
from persistence.sql.groups import SqlGroups
from persistence.sql.holders import Holders
from persistence.sql.lines import Lines
from persistence.sql.reads import KeptReaders
from persistence.sql.schema import PROBE, CodePointOrder, StoredIncarnation, passages_table
from persistence.sql.tails import Tails
from persistence.state.flocks import FileGate, FileTurn

__all__ = ["SqliteBackend", "SqliteDialect"]

# Message-index pages a read on the event loop may walk to find its cut (a page is 256 messages).
_INLINE_MESSAGE_PAGES: Final = 4
# SQLite's "busy" and "locked" primary result codes: another connection holds the lock a statement needs.
_SQLITE_BUSY: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
# How long the probe's own SQLite connection waits for a lock before it reports the store busy.
_PROBE_LOCK_WAIT: Final = 2.0
# Whether writers take turns through the gate before SQLite's lock (measured: docs/protocol.md §7.3).
_GATED: Final = True
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
    """SQLite's SQL: one writer at a time, so no row lock; notices of ``origin`` wait in `pending` for the commit.

    `pending` belongs to the writer thread: its units add to it, and `SqliteGroups` writes it out.
    """

    EMPTY_BYTES: ClassVar[str] = "X''"
    # The write lock up front, so two processes never duplicate or skip a seq.
    BEGIN: ClassVar[str | None] = "BEGIN IMMEDIATE"
    # FTS5 writes a segment each commit: a streaming block rewritten there every delta halved appends/s.
    DEFERS_OPEN: ClassVar[bool] = True

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.pending: list[str] = []

    def autocommit(self, connection: Any) -> None:
        connection.isolation_level = None

    def vacuum_statements(self) -> tuple[str, ...]:
        # VACUUM rewrites the file; the checkpoint then cuts the WAL, which the rewrite went through.
        return ("VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)")

    def search_terms(self, tokens: list[str]) -> str:
        # FTS5's unicode61 reads the folded tokens, space-separated, as they are.
        return " ".join(tokens)

    def search_terms_value(self, bound: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return bound

    def search_match(self, query: Query) -> tuple[sa.FromClause, sa.ColumnElement[bool], sa.ColumnElement[Any]]:
        # The FTS5 table's rows are the passages' rowids (`persistence.sql.schema`). Ordered by its own rowid,
        # FTS5 walks its matches newest first and stops at the page: 0.4 ms against 43 for the passages' id
        # (a sort of every match), for a word in 6,564 passages.
        fts = sa.table("search_fts", sa.column("rowid"))
        source = fts.join(passages_table, passages_table.c.id == fts.c.rowid)
        return source, sa.literal_column("search_fts").op("MATCH")(fts5(query)), fts.c.rowid

    def before_migration(self, conn: Connection) -> None:
        pass

    def drop_default(self, conn: Connection, table: str, column: str) -> None:
        pass  # SQLite alters no column: the default stays, and every insert names the column anyway

    def lock_head(self, head: Select[Any]) -> Select[Any]:
        # BEGIN IMMEDIATE already holds the write lock.
        return head

    def advance(self, advance: U) -> U:
        return advance

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
        told = notice(session_id, new_head, self.origin, closed=closed, deleted=deleted, incarnation=incarnation)
        self.pending.append(told)

    def notify_stream(self, cursor: Any, name: str) -> None:
        self.pending.append(notice(STREAM_NOTICE + name, 0, self.origin))

    def advance_params(
        self, session_id: str, new_head: int, *, closed: bool = False, deleted: bool = False, incarnation: str = ""
    ) -> dict[str, Any]:
        return {}


class SqliteGroups(SqlGroups):
    """`SqlGroups` that write their units' notices before the commit, and take the ``gate`` (if any) around a group.

    A unit rolled back to its savepoint takes its notices with it.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        dialect: SqliteDialect,
        gate: FileGate | None,
        timeout: float,
        aborted: Callable[[], None],
        bound: Callable[[Any], AbstractContextManager[Deadline]],
    ) -> None:
        super().__init__(connect, begin=dialect.BEGIN, aborted=aborted, bound=bound)
        self._dialect = dialect
        self._gate = gate
        self._timeout = timeout

    def __call__(self, works: list[Callable[[Any], Any]]) -> list[tuple[bool, Any]]:
        try:
            with self._gate.held(self._timeout) if self._gate is not None else nullcontext():
                return super().__call__(works)
        finally:
            self._dialect.pending.clear()

    def _unit(self, connection: Any, cursor: Any, work: Callable[[Any], Any]) -> tuple[bool, Any]:
        pending = self._dialect.pending
        mark = len(pending)
        outcome = super()._unit(connection, cursor, work)
        if not outcome[0]:
            del pending[mark:]
        return outcome

    def _before_commit(self, cursor: Any) -> None:
        tell(cursor, self._dialect.origin, self._dialect.pending)


class SqliteBackend(Backend):
    """SQLite's runtime: the holders' lock on the file, reads on the event loop, one savepoint per unit."""

    dialect: SqliteDialect

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

    def __init__(
        self, engine: Engine, timeout: float, origin: str, *, lines: Lines, tails: Tails, indexed: bool = True
    ) -> None:
        path = _file(engine)
        self._path = path
        self._holders = Holders(path) if path is not None else None
        self._listener: LogListener | None = None
        self._gate = FileGate(f"{path}-write") if path is not None and _GATED else None
        self.dialect = SqliteDialect(origin)
        # SQLite's bound is its busy timeout; the readers and the writer take it as it is.
        self._lock_waits = functools.partial(lock_waits, seconds=timeout)
        super().__init__(engine, timeout, origin, lines=lines, tails=tails, indexed=indexed)
        self._busy_ms = busy_ms(timeout)
        self.readers = KeptReaders(
            self._new_reader,
            wait=_wait_for_locks,
            begin="BEGIN",
            lock_taken=_busy,
            bound=self._lock_waits,
            driver_error=self.driver_error,
            busy_ms=self._busy_ms,
            timeout=timeout,
            call_bound=self.call_bound(),
            outstanding=self.outstanding,
        )

    def bound(self, connection: Any) -> AbstractContextManager[Deadline]:
        return self._lock_waits(connection)

    def size(self) -> int:
        path = self.engine.url.database
        if path in (None, "", ":memory:"):
            return 0
        return sum(os.path.getsize(name) for name in (path, f"{path}-wal") if os.path.exists(name))

    def alone(self) -> AbstractContextManager[None]:
        return self._holders.alone() if self._holders is not None else nullcontext()

    def opened(self) -> None:
        """The store's hold on the file (`Holders`), then WAL mode, which the file keeps.

        Setting WAL waits for other connections' locks, so it is set once, here.
        """
        if self._holders is not None:
            self._holders.hold(self.timeout)
        try:
            connection = self.engine.raw_connection()
            try:
                dbapi_connection = connection.dbapi_connection
                assert dbapi_connection is not None
                dbapi_connection.execute("PRAGMA journal_mode=WAL")
            finally:
                connection.close()
        except self.driver_error as exc:
            raise StoreError(f"store unavailable: {exc}") from exc

    def group_writer(self) -> SqlGroups:
        """Each unit in a savepoint: SQLite's statements are calls in this process, so batching saves no round trip."""
        return SqliteGroups(
            self.connections.connect,
            dialect=self.dialect,
            gate=self._gate,
            timeout=self.timeout,
            aborted=self.tails.clear,
            bound=self._lock_waits,
        )

    def _new_reader(self, busy_ms: int) -> tuple[Any, int]:
        if busy_ms == 0:
            return self._connect_on_loop(), busy_ms
        return self.connections.connect(), self._busy_ms

    def _connect_on_loop(self) -> Any:
        """A reader opened on the event loop, which never waits for a lock (`Busy` when it would).

        Opened by the driver itself, since the engine's connections wait up to the bound.
        """
        if _file(self.engine) is None:
            # No other process can lock an in-memory database; a URI the engine interprets is opened by the engine.
            connection = self.connections.connect()
            connection.execute("PRAGMA busy_timeout=0")
            return connection
        args, options = self.engine.dialect.create_connect_args(self.engine.url)
        connection = self.engine.dialect.loaded_dbapi.connect(*args, **{**options, "timeout": 0})
        try:
            _prepare(connection, 0)
        except sqlite3.Error as exc:
            connection.close()
            if _busy(exc):
                raise Busy from exc
            raise
        return connection

    async def read(self, work: Callable[..., T], *args: Any) -> T:
        """On the event loop; one that would wait for a lock there is retried in a worker thread."""
        try:
            return self.readers.reading_on_loop(work, *args)
        except Busy:
            pass
        return await self.readers.in_thread(work, *args)

    async def read_page(
        self, session_id: str, through: int | None, before: int | None, max_messages: int, max_bytes: int | None
    ) -> PageRead:
        sql, lines = self.sql, self.lines
        args = (sql, lines, session_id, through, before, max_messages, max_bytes, _INLINE_MESSAGE_PAGES)
        try:
            read, complete = self.readers.reading_on_loop(pages.page_inline, *args)
        except Busy:
            read, complete = await self.readers.in_thread(pages.page_inline, *args)
        if complete:
            return read
        if not read.cuts:
            # The cut needs a long walk through the message index: the walk goes on in a worker thread.
            return await self.readers.in_thread(
                pages.page_walked, sql, lines, session_id, read.info, read.to_seq, max_messages, max_bytes
            )
        stored = await self.readers.in_thread(pages.stored, sql, lines, session_id, read.cuts[-1], read.to_seq)
        return PageRead(read.info, read.to_seq, read.cuts, stored)

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        sql, lines = self.sql, self.lines
        try:
            stored = self.readers.reading_on_loop(pages.stored_checked, sql, lines, session_id, from_seq, to_seq, True)
        except Busy:
            stored = None
        if stored is not None:
            return stored
        found = await self.readers.in_thread(pages.stored_checked, sql, lines, session_id, from_seq, to_seq, False)
        assert found is not None
        return found

    async def check_ready(self) -> None:
        """A connection of the probe's own, opened by the file's path (never creating it).

        Connections opened before still read a file whose directory was removed or moved.
        """
        if _file(self.engine) is None:
            await self.read(lambda cursor: cursor.execute(PROBE).fetchall())
        else:
            await anyio.to_thread.run_sync(self._probe)

    def _probe(self) -> None:
        path = _file(self.engine)
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
        """The notices log's reader, one per store; none for an in-memory database, which one process holds."""
        if self._path is None:
            return None
        if self._listener is None:
            self._listener = LogListener(self._path, self.origin, deleted=self.tails.forget)
        return self._listener

    def sweeping(self) -> AbstractAsyncContextManager[bool]:
        """The turn on ``<file>-turn``: one process of the file's sweeps at a time."""
        if self._path is None:
            return sole_sweeper()
        return FileTurn(f"{self._path}-turn").taking()

    def alone_now(self) -> bool:
        return self._holders.try_alone() if self._holders is not None else True

    async def close(self) -> None:
        pass

    def close_sync(self) -> None:
        super().close_sync()
        if self._gate is not None:
            self._gate.close()
        if self._holders is not None:
            self._holders.release()


def _file(engine: Engine) -> str | None:
    """The database file's absolute path, or ``None`` for an in-memory database or a URI the engine interprets."""
    url = engine.url
    if url.database in (None, "", ":memory:") or url.query.get("uri"):
        return None
    return os.path.abspath(url.database)


def _wait_for_locks(connection: Any, busy_ms: int) -> None:
    connection.execute(f"PRAGMA busy_timeout={busy_ms}")

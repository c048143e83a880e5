"""PostgreSQL, for several nodes: async readers, the group's appends in one statement, head notices, one sweeper.

`persistence.sql.pg_dialect` is its SQL, `PostgresBackend` its runtime (`persistence.sql.backend`).
Appends lock the session row, so two processes never duplicate or skip a seq; a group's usual
appends are one statement (`persistence.sql.pg_group`). Reads wait on the network, so a read
runs in a worker thread, in one hop for the whole read, or, for a page, on the event loop
through `AsyncReaders` (`persistence.sql.pg_pages`). Every call is bounded: connecting, each
statement (on the server) and each call (a `Watchdog` cuts a connection that answers nothing);
the connection is then replaced.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from typing import Any, Final, TypeVar

import anyio.to_thread
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

import persistence.sql.pages as pages
import persistence.sql.pg_pages as pg_pages
from codec import StoredRecord
from persistence.base import PageRead
from persistence.call_bound import call_bound, in_thread
from persistence.errors import StoreError
from persistence.group_commit import unavailable
from persistence.notify import HeadListener
from persistence.sql.backend import Backend
from persistence.sql.dialect import READERS_KEPT, Deadline, busy_ms
from persistence.sql.groups import SqlGroups
from persistence.sql.lines import Lines
from persistence.sql.pg_dialect import TABLES, PostgresDialect
from persistence.sql.pg_group import PostgresGroups
from persistence.sql.pg_listener import PostgresListener
from persistence.sql.pg_readers import AsyncReaders
from persistence.sql.pg_timeouts import Watchdog, connect_options
from persistence.sql.reads import KeptReaders
from persistence.sql.schema import PROBE
from persistence.sql.tails import Tails

__all__ = ["PostgresBackend"]

T = TypeVar("T")
# The advisory lock the sweeper holds (`PostgresBackend.sweeping`): "hstswp" in ASCII.
SWEEP_LOCK: Final = 0x687374737770


class PostgresBackend(Backend):
    """PostgreSQL's runtime: pages on async readers, other reads in one hop, the group statement, notices."""

    @classmethod
    def serves(cls, backend: str) -> bool:
        return backend == "postgresql"

    @classmethod
    def connect_args(cls, timeout: float) -> dict[str, Any]:
        return connect_options(timeout)

    @classmethod
    def prepare_engine(cls, engine: Engine, busy_ms: int) -> None:
        pass

    def __init__(
        self, engine: Engine, timeout: float, origin: str, *, lines: Lines, tails: Tails, indexed: bool = True
    ) -> None:
        self.dialect = PostgresDialect(origin)
        self._watchdog = Watchdog(timeout, name="history-sql-watchdog")
        self._listener: HeadListener | None = None
        self._async_readers: AsyncReaders | None = None
        super().__init__(engine, timeout, origin, lines=lines, tails=tails, indexed=indexed)
        self.readers = KeptReaders(
            self._new_reader,
            wait=None,
            begin=None,
            lock_taken=_never,
            bound=self._watchdog.bound,
            driver_error=self.driver_error,
            busy_ms=busy_ms(timeout),
            timeout=timeout,
            call_bound=self.call_bound(),
            outstanding=self.outstanding,
        )

    def bound(self, connection: Any) -> AbstractContextManager[Deadline]:
        return self._watchdog.bound(connection)

    def call_bound(self) -> float | None:
        # A server that answers nothing can hold a call in a phase no other bound covers.
        return call_bound(self.timeout)

    def size(self) -> int:
        with self.engine.connect() as conn:
            sizes = [sa.select(sa.func.pg_total_relation_size(sa.text(f"'{t.name}'::regclass"))) for t in TABLES]
            return sum(int(conn.execute(query).scalar_one()) for query in sizes)

    def group_writer(self) -> SqlGroups:
        return PostgresGroups(
            self._writer_connection,
            tails=self.tails,
            lines=self.lines,
            search=self.search,
            origin=self.origin,
            bound=self._watchdog.bound,
        )

    def _writer_connection(self) -> Any:
        connection = self.connections.connect()
        connection.autocommit = False
        return connection

    def _new_reader(self, busy_ms: int) -> tuple[Any, int]:
        connection = self.connections.connect()
        # Each statement reads its own snapshot, as READ COMMITTED does, without BEGIN/COMMIT round trips.
        connection.autocommit = True
        return connection, busy_ms

    async def read(self, work: Callable[..., T], *args: Any) -> T:
        """In a worker thread: the read waits on the network."""
        return await self.readers.in_thread(work, *args)

    async def read_page(
        self, session_id: str, through: int | None, before: int | None, max_messages: int, max_bytes: int | None
    ) -> PageRead:
        """On the event loop: two statements when the newest 256 messages hold the cut."""
        async with self._readers().cursor() as cursor:
            read = await pg_pages.page_rows(cursor, self.sql, session_id, through, before, max_messages, max_bytes)
        if isinstance(read, PageRead):
            return read
        info, to_seq, cuts, rows = read
        if not cuts:
            # The cut needs more messages than one read brings: page through them in a worker thread.
            return await self.readers.in_thread(
                pages.page_walked, self.sql, self.lines, session_id, info, to_seq, max_messages, max_bytes
            )
        if pg_pages.inline(rows):
            return PageRead(info, to_seq, cuts, self.lines.records(rows))
        return PageRead(info, to_seq, cuts, await anyio.to_thread.run_sync(self.lines.records, rows))

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        found = await self.readers.in_thread(
            pages.stored_checked, self.sql, self.lines, session_id, from_seq, to_seq, False
        )
        assert found is not None
        return found

    async def check_ready(self) -> None:
        """The kept async readers, as a page read uses them.

        One the server dropped is discarded and the next tried, so the answer is the database's,
        not a dead connection's.
        """
        readers = self._readers()
        failure: StoreError | None = None
        for _ in range(readers.kept + 1):
            try:
                async with readers.cursor() as cursor:
                    await cursor.execute(PROBE)
                    await cursor.fetchall()
                return
            except StoreError as exc:
                # The failed connection is closed: the next try takes another kept one, then a new one.
                failure = exc
        assert failure is not None
        raise failure

    def _conninfo(self) -> str:
        return self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    def _readers(self) -> AsyncReaders:
        if self._async_readers is None:
            self._async_readers = AsyncReaders(self._conninfo(), READERS_KEPT, watchdog=self._watchdog)
        return self._async_readers

    def listener(self) -> HeadListener | None:
        """Head notices from every process (one LISTEN connection); a deleted session's open run is forgotten."""
        if self._listener is None:
            self._listener = PostgresListener(
                self._conninfo(), self.origin, watchdog=self._watchdog, deleted=self.tails.forget
            )
        return self._listener

    @contextlib.asynccontextmanager
    async def sweeping(self) -> AsyncIterator[bool]:
        # A session-level advisory lock, on a connection of its own: one sweeper in the whole
        # cluster, and a process that dies lets another take over as its connection closes.
        # (So not through a pooler in transaction mode, which may hand the unlock another backend.)
        try:
            conn = await anyio.to_thread.run_sync(self.engine.connect)
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {exc.orig}") from exc
        try:
            mine = await anyio.to_thread.run_sync(_try_lock, conn, "pg_try_advisory_lock")
            try:
                yield mine
            finally:
                if mine:
                    with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
                        # Failing, the connection is gone, and the lock with it.
                        await anyio.to_thread.run_sync(_try_lock, conn, "pg_advisory_unlock")
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(conn.close)

    async def purge(self, session_id: str, work: Callable[[Any], bool]) -> bool:
        # Beside the writer, in a bounded transaction of its own: no group of appends waits on a
        # purge's statements, which touch only rows no read sees (a create of the same id waits
        # for one batch). Its commit need not reach the disk first: a batch a crash loses leaves
        # the id named, and whatever finishes purges (§7.3) removes the rest.
        if self.writer.closed:
            raise StoreError("the store is closed")
        bound = call_bound(self._watchdog.timeout)
        return await in_thread(bound, self._purge_apart, work, outstanding=self.outstanding)

    def _purge_apart(self, work: Callable[[Any], bool]) -> bool:
        try:
            with self.connections.read() as conn:
                conn.exec_driver_sql("SELECT set_config('synchronous_commit', 'off', true)")
                cursor = conn.connection.cursor()
                try:
                    return work(cursor)
                finally:
                    cursor.close()
        except StoreError:
            raise
        except Exception as exc:  # the driver's, raised on its own cursor, which SQLAlchemy does not wrap
            raise unavailable(exc) from exc

    async def close(self) -> None:
        if self._async_readers is not None:
            await self._async_readers.close()

    def close_sync(self) -> None:
        super().close_sync()
        self._watchdog.close()


def _never(exc: Exception) -> bool:
    return False


def _try_lock(conn: Connection, function: str) -> bool:
    try:
        taken = bool(conn.execute(sa.select(getattr(sa.func, function)(SWEEP_LOCK))).scalar_one())
        conn.commit()  # the lock is the session's: no transaction stays open while it is held
    except sa.exc.DBAPIError as exc:
        raise StoreError(f"store unavailable: {exc.orig}") from exc
    return taken

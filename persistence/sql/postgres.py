"""PostgreSQL, for several nodes: the row lock, the group's appends in one statement, async readers and head notices.

Appends lock the session row (``SELECT ... FOR UPDATE``), so two processes never duplicate
or skip a seq; a group's usual appends are one statement (`PostgresGroups`,
`persistence.sql.pg_group`). Reads wait on the network, so a read runs in a worker thread,
in one hop for the whole page, or, for a page, on the event loop through `AsyncReaders`. Every call is
bounded: connecting, each statement (on the server) and each call (a `Watchdog` cuts a
connection that answers nothing); the connection is then replaced.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple, TypeVar, cast

import anyio.to_thread
import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Select
from sqlalchemy.sql.compiler import SQLCompiler

from codec import StoredRecord
from persistence.base import TOUCH_MS, AppendResult, PageRead, SessionInfo, now_ms
from persistence.call_bound import call_bound, in_thread
from persistence.errors import SessionNotFoundError, StoreError
from persistence.group_commit import unavailable
from persistence.message_index import HiddenRange, MessageEntry, select_cuts
from persistence.notify import NOTIFY_CHANNEL, STREAM_NOTICE, HeadListener, notice
from persistence.off_loop import OFF_LOOP_BYTES
from persistence.rules import BatchPlan, dense_gap, page_span, plan_batch
from persistence.sealing import plan_append
from persistence.sql.dialect import MESSAGE_PAGE, READERS_KEPT, Deadline, Dialect, LongWalk, U
from persistence.sql.groups import Append, SessionUnit, SqlGroups
from persistence.sql.pg_group import GROUP_APPEND, GROUP_ARRAYS, INCARNATION_OF, INSERTED, SEALED
from persistence.sql.pg_listener import PostgresListener
from persistence.sql.pg_readers import AsyncReaders
from persistence.sql.pg_timeouts import Watchdog, connect_options
from persistence.sql.schema import PROBE, CodePointOrder, StoredIncarnation, bounded_rows, metadata, stored_header
from persistence.state import Lru

if TYPE_CHECKING:
    from persistence.sql.store import SqlStore

__all__ = ["PostgresDialect", "PostgresGroups"]

TABLES: Final = metadata.sorted_tables

logger = logging.getLogger(__name__)

T = TypeVar("T")


@compiles(CodePointOrder, "postgresql")
def _code_point_order(element: CodePointOrder, compiler: SQLCompiler, **kw: Any) -> str:
    # The database's collation may be a locale's; "C" compares UTF-8 bytes, that is code points.
    return f'{compiler.process(element.column, **kw)} COLLATE "C"'


@compiles(StoredIncarnation, "postgresql")
def _stored_incarnation(element: StoredIncarnation, compiler: SQLCompiler, **kw: Any) -> str:
    return INCARNATION_OF % compiler.process(element.header, **kw)


# The page's head read: the session row, its hidden ranges and its newest
# messages (a page of them) below the page's bound, as arrays, in one round trip.
_PAGE_HEAD: Final = """
SELECT s.header, s.owner, s.head_seq, s.touched_at,
    ARRAY(
        SELECT ARRAY[h.seq, h.start, h."end"] FROM history_hidden h
        WHERE h.session_id = s.id AND h.seq < %(bound)s ORDER BY h.seq
    ),
    ARRAY(
        SELECT ARRAY[m.seq, m.group_start] FROM history_messages m
        WHERE m.session_id = s.id AND m.seq < %(bound)s ORDER BY m.seq DESC LIMIT %(messages)s
    )
FROM history_sessions s WHERE s.id = %(id)s
"""
_NO_BOUND: Final = 1 << 62
# The advisory lock the sweeper holds (`PostgresDialect.sweeping`): "hstswp" in ASCII.
SWEEP_LOCK: Final = 0x687374737770


def _head_params(session_id: str, through: int | None, before: int | None) -> dict[str, Any]:
    bound = min(_NO_BOUND if through is None else through + 1, _NO_BOUND if before is None else before)
    return {"id": session_id, "bound": bound, "messages": MESSAGE_PAGE}


def _newest(first: Sequence[MessageEntry], more: bool) -> Iterator[MessageEntry]:
    """``first``, then `LongWalk` if the index holds more messages than it and the cut needs them."""
    yield from first
    if more:
        raise LongWalk


class _Unwritten(Exception):
    """A record the append rewrites whose line this writer did not keep: the store's own append reads it."""


def _written_lines(pieces: Sequence[StoredRecord]) -> Sequence[StoredRecord]:
    # A stored line is never empty: b"" is a line this writer never held.
    if not all(piece.line for piece in pieces):
        raise _Unwritten
    return pieces


class _Planned(NamedTuple):
    """A unit the group statement can write: its heads, and its records planned from the known open run."""

    at: int
    unit: Append
    plan: BatchPlan
    tail: list[StoredRecord]
    records: list[StoredRecord]
    # The seqs of the open run's records that the append rewrites (none when it only extends the run).
    rewritten: frozenset[int]


class PostgresGroups(SqlGroups):
    """The group writer: the group's appends in one statement (`GROUP_APPEND`), not one savepoint each.

    An append whose session's open run this writer knows (with the lines of what it rewrites)
    joins the statement. One that does not, or whose head had
    moved (a seq conflict, a resend, an unknown session), then runs as the store's own append in
    a savepoint, so it fails alone. A second append to a session in the group, or a create,
    waits for what came before it.
    Should the statement itself fail, the group's transaction is rolled back and the group runs
    again, every unit in a savepoint, so the unit the database refused fails alone.
    """

    def __init__(self, store: SqlStore, origin: str, bound: Callable[[Any], AbstractContextManager[Deadline]]) -> None:
        super().__init__(store._connect_writer, begin=None, aborted=store._tails.clear, bound=bound)
        self._store = store
        self._origin = origin

    def _run(self, connection: Any, cursor: Any, works: Sequence[Callable[[Any], Any]]) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any] | None] = [None] * len(works)
        # Appends to sessions of their own: those the statement writes, and those that run alone after it.
        pending: dict[str, _Planned] = {}
        alone: dict[str, int] = {}
        try:
            for index, work in enumerate(works):
                if not isinstance(work, Append) or work.session_id in pending or work.session_id in alone:
                    # What comes after must see what came before: a create, or a session's next append.
                    self._flush(connection, cursor, works, pending, alone, outcomes)
                    pending, alone = {}, {}
                if not isinstance(work, Append):
                    outcomes[index] = self._unit(connection, cursor, work)
                elif (planned := self._plan(index, work)) is not None:
                    pending[work.session_id] = planned
                else:
                    alone[work.session_id] = index
            self._flush(connection, cursor, works, pending, alone, outcomes)
        except (psycopg.IntegrityError, psycopg.DataError) as exc:
            # The database refused what a unit writes: only a unit alone can tell which.
            logger.warning("a group statement failed; its %d units run one by one: %s", len(works), exc)
            return super()._run(connection, self._restart(connection), works)
        done = [outcome for outcome in outcomes if outcome is not None]
        assert len(done) == len(works)
        return done

    def _plan(self, index: int, unit: Append) -> _Planned | None:
        """The unit as the statement writes it, when its head and open run are known and it only extends the run."""
        seqs, batch = [event.seq for event in unit.events], unit.batch
        if batch is None or dense_gap(seqs) is not None:
            return None
        tail = self._store._kept_tail(unit.session_id, unit.life, seqs[0] - 1)
        if tail is None:
            return None
        plan = plan_batch(unit.session_id, seqs, seqs[0] - 1)
        try:
            keep, records = plan_append(tail, batch.records, _written_lines)
        except _Unwritten:
            return None
        return _Planned(index, unit, plan, tail[:keep], records, frozenset(r.seq for r in tail[keep:]))

    def _flush(
        self,
        connection: Any,
        cursor: Any,
        works: Sequence[Callable[[Any], Any]],
        pending: dict[str, _Planned],
        alone: dict[str, int],
        outcomes: list[tuple[bool, Any] | None],
    ) -> None:
        """Write the pending units in one statement; then run the others, and those it could not write, each alone.

        The statement locks the sessions of every append from the first of these on, so the
        appends run alone after it take no lock out of the group's order.
        """
        moved: set[str] = set()
        if pending:
            first = min(min(planned.at for planned in pending.values()), *alone.values(), len(works))
            # A close's session too: it runs after the statement, and must not lock out of this order.
            locks = sorted(
                {work.session_id for work in works[first:] if isinstance(work, (Append, SessionUnit))}
                | {also for work in works[first:] if isinstance(work, SessionUnit) for also in work.also}
            )
            with self._within(connection):
                cursor.execute(GROUP_APPEND, self._params(pending.values(), locks))
                moved = {row[0] for row in cursor.fetchall()}
            self._check_cut()
        for planned in pending.values():
            unit = planned.unit
            if unit.session_id in moved:
                self._store._remember(unit.session_id, unit.life, planned.plan.head_seq, planned.tail, planned.records)
                outcomes[planned.at] = (True, AppendResult.of(planned.plan))
            else:
                # What the writer knew of the session is stale: the store's own append finds out why.
                self._store._tails.pop(unit.session_id)
                alone[unit.session_id] = planned.at
        for index in sorted(alone.values()):
            outcomes[index] = self._unit(connection, cursor, works[index])

    def _params(self, pending: Iterable[_Planned], locks: list[str]) -> dict[str, Any]:
        store = self._store
        params: dict[str, Any] = {"locks": locks, "channel": NOTIFY_CHANNEL, "touched": now_ms(), "touch_ms": TOUCH_MS}
        for name in GROUP_ARRAYS:
            params[name] = []
        for planned in pending:
            session, batch = planned.unit.session_id, planned.unit.batch
            assert batch is not None
            new_head = planned.plan.head_seq
            params["sessions"].append(session)
            params["expected"].append(planned.plan.first_seq - 1)
            params["heads"].append(new_head)
            params["notices"].append(notice(session, new_head, self._origin))
            life = planned.unit.life
            params["owners"].append(None if life is None else life.owner)
            params["incarnations"].append(None if life is None else life.incarnation)
            for record in planned.records:
                row = store._row(session, record)
                names = SEALED if record.seq in planned.rewritten else INSERTED
                values = (session, record.seq, record.members, row["compressed"], row["data"], record.kind)
                for name, value in zip(names, (*values, record.key, record.time0, record.time1), strict=True):
                    params[name].append(value)
            for seq in sorted(planned.rewritten - {record.seq for record in planned.records}):
                params["dropped_sessions"].append(session)
                params["dropped_seqs"].append(seq)
            for message in batch.messages:
                params["message_sessions"].append(session)
                params["message_seqs"].append(message.seq)
                params["groups"].append(message.group_start)
            for hidden in batch.hidden:
                params["hidden_sessions"].append(session)
                params["hidden_at"].append(hidden.at)
                params["starts"].append(hidden.start)
                params["ends"].append(hidden.end)
        return params


class PostgresDialect(Dialect):
    EMPTY_BYTES: ClassVar[str] = "''::bytea"
    BEGIN: ClassVar[str | None] = None

    @classmethod
    def serves(cls, backend: str) -> bool:
        return backend == "postgresql"

    @classmethod
    def connect_args(cls, timeout: float) -> dict[str, Any]:
        return connect_options(timeout)

    @classmethod
    def prepare_engine(cls, engine: Engine, busy_ms: int) -> None:
        pass

    def __init__(self, engine: Engine, timeout: float, origin: str) -> None:
        self._engine = engine
        self._origin = origin
        self._watchdog = Watchdog(timeout, name="history-sql-watchdog")
        self._listener: HeadListener | None = None
        self._async_readers: AsyncReaders | None = None
        self._tails: Lru[str, Any] | None = None

    def opened(self, store: SqlStore) -> None:
        self._tails = store._tails

    def size(self) -> int:
        with self._engine.connect() as conn:
            sizes = [sa.select(sa.func.pg_total_relation_size(sa.text(f"'{t.name}'::regclass"))) for t in TABLES]
            return sum(int(conn.execute(query).scalar_one()) for query in sizes)

    def autocommit(self, connection: Any) -> None:
        connection.autocommit = True

    def drop_default(self, conn: Connection, table: str, column: str) -> None:
        conn.exec_driver_sql(f"ALTER TABLE {table} ALTER COLUMN {column} DROP DEFAULT")

    @contextlib.asynccontextmanager
    async def sweeping(self, engine: Engine) -> AsyncIterator[bool]:
        # A session-level advisory lock, on a connection of its own: one sweeper in the whole
        # cluster, and a process that dies lets another take over as its connection closes.
        # (So not through a pooler in transaction mode, which may hand the unlock another backend.)
        try:
            conn = await anyio.to_thread.run_sync(engine.connect)
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {exc.orig}") from exc
        try:
            mine = await anyio.to_thread.run_sync(self._try_lock, conn, "pg_try_advisory_lock")
            try:
                yield mine
            finally:
                if mine:
                    with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
                        # Failing, the connection is gone, and the lock with it.
                        await anyio.to_thread.run_sync(self._try_lock, conn, "pg_advisory_unlock")
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(conn.close)

    async def purge(self, store: SqlStore, session_id: str, work: Callable[[Any], bool]) -> bool:
        # Beside the writer, in a bounded transaction of its own: no group of appends waits on a
        # purge's statements, which touch only rows no read sees (a create of the same id waits
        # for one batch). Its commit need not reach the disk first: a batch a crash loses leaves
        # the id named, and whatever finishes purges (§7.3) removes the rest.
        if store._writer.closed:
            raise StoreError("the store is closed")
        bound = call_bound(self._watchdog.timeout)
        return await in_thread(bound, self._purge_apart, store, work, outstanding=store._outstanding)

    @staticmethod
    def _purge_apart(store: SqlStore, work: Callable[[Any], bool]) -> bool:
        try:
            with store._read() as conn:
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

    @staticmethod
    def _try_lock(conn: Connection, function: str) -> bool:
        try:
            taken = bool(conn.execute(sa.select(getattr(sa.func, function)(SWEEP_LOCK))).scalar_one())
            conn.commit()  # the lock is the session's: no transaction stays open while it is held
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {exc.orig}") from exc
        return taken

    def vacuum_statements(self) -> tuple[str, ...]:
        return ("VACUUM " + ", ".join(table.name for table in TABLES),)

    def before_migration(self, conn: Connection) -> None:
        # An upgrade backfills and indexes whole tables: no statement bound applies to it.
        conn.exec_driver_sql("SET LOCAL statement_timeout = 0")

    def lock_head(self, head: Select[Any]) -> Select[Any]:
        return head.with_for_update()

    def advance(self, advance: U) -> U:
        # In the transaction and the same round trip: delivered at commit, never for a rollback.
        told = sa.func.pg_notify(sa.bindparam("channel", type_=sa.Text), sa.bindparam("notice", type_=sa.Text))
        return cast(U, advance.returning(told))

    def notify_stream(self, cursor: Any, name: str) -> None:
        # In the unit's transaction: sent at commit, never for a rollback.
        cursor.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, notice(STREAM_NOTICE + name, 0, self._origin)))

    def _forget_tail(self, session_id: str | None) -> None:
        """Drop the open run the writer keeps of a session another process deleted (``None``: of every one)."""
        if self._tails is not None:
            if session_id is None:
                self._tails.clear()
            else:
                self._tails.pop(session_id)

    def advance_params(
        self, session_id: str, new_head: int, *, closed: bool = False, deleted: bool = False, incarnation: str = ""
    ) -> dict[str, Any]:
        told = notice(session_id, new_head, self._origin, closed=closed, deleted=deleted, incarnation=incarnation)
        return {"channel": NOTIFY_CHANNEL, "notice": told}

    @contextmanager
    def bound(self, connection: Any) -> Iterator[Deadline]:
        with self._watchdog.bound(connection) as deadline:
            yield deadline

    def call_bound(self, timeout: float) -> float | None:
        # A server that answers nothing can hold a call in a phase no other bound covers.
        return call_bound(timeout)

    def writer(self, connection: Any) -> Any:
        connection.autocommit = False
        return connection

    def groups(self, store: SqlStore) -> SqlGroups:
        return PostgresGroups(store, self._origin, self.bound)

    def new_reader(self, store: SqlStore, busy_ms: int) -> tuple[Any, int]:
        connection = store._connect()
        # Each statement reads its own snapshot, as READ COMMITTED does, without BEGIN/COMMIT round trips.
        connection.autocommit = True
        return connection, store._busy_ms

    def wait_for_locks(self, connection: Any, busy: int, busy_ms: int) -> int:
        return busy

    def run_read(self, connection: Any, work: Callable[..., T], args: tuple[Any, ...]) -> T:
        return work(connection.cursor(), *args)

    def lock_taken(self, exc: Exception) -> bool:
        return False

    async def read(self, store: SqlStore, work: Callable[..., T], *args: Any) -> T:
        """In a worker thread: the read waits on the network."""
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
        """On the event loop: two statements when the newest 256 messages hold the cut."""
        async with self._readers().cursor() as cursor:
            await cursor.execute(_PAGE_HEAD, _head_params(session_id, through, before))
            head = self._head(store, await cursor.fetchone(), session_id, through, before)
            if isinstance(head, PageRead):
                return head
            info, to_seq, hidden, first, more = head
            try:
                cuts = select_cuts(_newest(first, more), hidden, to_seq=to_seq, max_messages=max_messages)
            except LongWalk:
                cuts = []
            if len(cuts) > 1 and max_bytes is not None:
                values = {"id": session_id, "from_seq": cuts[-1], "to_seq": to_seq}
                await cursor.execute(store._sql.sizes.sql, store._sql.sizes.params(values))
                cuts = bounded_rows(cuts, to_seq, await cursor.fetchall(), max_bytes)
            if cuts:
                values = {"id": session_id, "from_seq": cuts[-1], "to_seq": to_seq}
                await cursor.execute(store._sql.stored.sql, store._sql.stored.params(values))
                rows: list[Any] = await cursor.fetchall()
        if not cuts:
            # The cut needs more messages than one read brings: page through them in a worker thread.
            return await store._in_thread(store._page_walked, session_id, info, to_seq, max_messages, max_bytes)
        if sum(len(row[3]) for row in rows) < OFF_LOOP_BYTES and not any(row[2] for row in rows):
            return PageRead(info, to_seq, cuts, store._records(rows))
        return PageRead(info, to_seq, cuts, await anyio.to_thread.run_sync(store._records, rows))

    def _head(
        self, store: SqlStore, row: Any, session_id: str, through: int | None, before: int | None
    ) -> PageRead | tuple[SessionInfo, int, list[HiddenRange], list[MessageEntry], bool]:
        """A `_PAGE_HEAD` row as the session, the page's end, hidden ranges, newest messages, and if more exist."""
        if row is None:
            raise SessionNotFoundError(session_id)
        header, owner, head, touched, hidden_rows, message_rows = row
        info = SessionInfo(stored_header(header, session_id), owner, head, touched)
        span = page_span(head, through, before)
        if not span.reads:
            return PageRead.unread(info, span)
        to_seq = span.to_seq
        # Each statement reads its own snapshot: what a later append added past the head is left out.
        hidden = [HiddenRange(*entry) for entry in hidden_rows if entry[0] < to_seq]
        first = [MessageEntry(*entry) for entry in message_rows if entry[0] < to_seq]
        return info, to_seq, hidden, first, len(message_rows) == MESSAGE_PAGE

    async def read_stored(self, store: SqlStore, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        found = await store._in_thread(store._stored_checked, session_id, from_seq, to_seq, False)
        assert found is not None
        return found

    async def check_ready(self, store: SqlStore) -> None:
        """The store's kept readers, as a page read uses them.

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
        return self._engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    def _readers(self) -> AsyncReaders:
        if self._async_readers is None:
            self._async_readers = AsyncReaders(self._conninfo(), READERS_KEPT, watchdog=self._watchdog)
        return self._async_readers

    def listener(self) -> HeadListener | None:
        """Head notices from every process (one LISTEN connection)."""
        if self._listener is None:
            self._listener = PostgresListener(
                self._conninfo(), self._origin, watchdog=self._watchdog, deleted=self._forget_tail
            )
        return self._listener

    async def close(self) -> None:
        if self._async_readers is not None:
            await self._async_readers.close()

    def close_sync(self) -> None:
        self._watchdog.close()

"""PostgreSQL, for several nodes: the row lock, the one-statement append, async readers and head notices.

Appends lock the session row (``SELECT ... FOR UPDATE``), so two processes never duplicate
or skip a seq. Reads wait on the network, so a read runs in a worker thread, in one hop for
the whole page, or, for a page, on the event loop through `AsyncReaders`. Every call is
bounded: connecting, each statement (on the server) and each call (a `Watchdog` cuts a
connection that answers nothing); the connection is then replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import anyio.to_thread
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Select, Update
from sqlalchemy.sql.compiler import SQLCompiler

from codec import StoredRecord
from persistence.base import PageRead, SessionInfo
from persistence.batch import PreparedBatch
from persistence.errors import SessionNotFoundError, StoreError
from persistence.message_index import HiddenRange, MessageEntry, select_cuts
from persistence.notify import NOTIFY_CHANNEL, HeadListener, notice
from persistence.rules import page_span
from persistence.sealing import kept, plan_append
from persistence.sql.dialect import INLINE_BYTES, MESSAGE_PAGE, READERS_KEPT, Deadline, Dialect, LongWalk
from persistence.sql.pg_listener import PostgresListener
from persistence.sql.pg_readers import AsyncReaders
from persistence.sql.pg_timeouts import Watchdog, connect_options
from persistence.sql.schema import PROBE, CodePointOrder

if TYPE_CHECKING:
    from persistence.sql.store import SqlStore

__all__ = ["PostgresDialect"]

T = TypeVar("T")


@compiles(CodePointOrder, "postgresql")
def _code_point_order(element: CodePointOrder, compiler: SQLCompiler, **kw: Any) -> str:
    # The database's collation may be a locale's; "C" compares UTF-8 bytes, that is code points.
    return f'{compiler.process(element.column, **kw)} COLLATE "C"'


# Every table's insert is gated on the head having moved, so the statement does all of it or nothing; the
# NOTIFY rides the update, so PostgreSQL sends it at commit and never for a rollback.
_APPEND: Final = """
WITH moved AS (
    UPDATE history_sessions SET head_seq = %(head)s
    WHERE id = %(session)s AND head_seq = %(expected)s
    RETURNING pg_notify(%(channel)s, %(notice)s)
), records AS (
    INSERT INTO history_records (session_id, seq, members, compressed, data, kind, key, time0, time1)
    SELECT %(session)s, r.seq, r.members, r.compressed, r.data, r.kind, r.key, r.time0, r.time1
    FROM unnest(
        %(seqs)s::bigint[], %(members)s::integer[], %(compressed)s::boolean[], %(datas)s::bytea[],
        %(kinds)s::smallint[], %(keys)s::bytea[], %(time0s)s::bigint[], %(time1s)s::bigint[]
    ) AS r(seq, members, compressed, data, kind, key, time0, time1)
    WHERE EXISTS (SELECT 1 FROM moved)
), messages AS (
    INSERT INTO history_messages (session_id, seq, group_start)
    SELECT %(session)s, m.seq, m.group_start
    FROM unnest(%(message_seqs)s::bigint[], %(groups)s::bigint[]) AS m(seq, group_start)
    WHERE EXISTS (SELECT 1 FROM moved)
), hidden AS (
    INSERT INTO history_hidden (session_id, seq, start, "end")
    SELECT %(session)s, h.seq, h.start, h.stop
    FROM unnest(%(hidden_at)s::bigint[], %(starts)s::bigint[], %(ends)s::bigint[]) AS h(seq, start, stop)
    WHERE EXISTS (SELECT 1 FROM moved)
)
SELECT count(*) FROM moved
"""


# The page's head read: the session row, its hidden ranges and its newest
# messages (a page of them) below the page's bound, as arrays, in one round trip.
_PAGE_HEAD: Final = """
SELECT s.header, s.owner, s.head_seq,
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


def _head_params(session_id: str, through: int | None, before: int | None) -> dict[str, Any]:
    bound = min(_NO_BOUND if through is None else through + 1, _NO_BOUND if before is None else before)
    return {"id": session_id, "bound": bound, "messages": MESSAGE_PAGE}


def _newest(first: Sequence[MessageEntry], more: bool) -> Iterator[MessageEntry]:
    """``first``, then `LongWalk` if the index holds more messages than it and the cut needs them."""
    yield from first
    if more:
        raise LongWalk


def _no_lines(pieces: Sequence[StoredRecord]) -> Sequence[StoredRecord]:
    if pieces:
        raise AssertionError("a one-statement append never rewrites stored records")
    return pieces


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

    def opened(self, store: SqlStore) -> None:
        pass

    def before_migration(self, conn: Connection) -> None:
        # An upgrade backfills and indexes whole tables: no statement bound applies to it.
        conn.exec_driver_sql("SET LOCAL statement_timeout = 0")

    def lock_head(self, head: Select[Any]) -> Select[Any]:
        return head.with_for_update()

    def advance(self, advance: Update) -> Update:
        # In the transaction and the same round trip: delivered at commit, never for a rollback.
        return advance.returning(
            sa.func.pg_notify(sa.bindparam("channel", type_=sa.Text), sa.bindparam("notice", type_=sa.Text))
        )

    def advance_params(self, session_id: str, new_head: int) -> dict[str, Any]:
        return {"channel": NOTIFY_CHANNEL, "notice": notice(session_id, new_head, self._origin)}

    @contextmanager
    def bound(self, connection: Any) -> Iterator[Deadline]:
        with self._watchdog.bound(connection) as deadline:
            yield deadline

    def writer(self, connection: Any) -> Any:
        connection.autocommit = False
        return connection

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
                cuts = store._bounded_rows(cuts, to_seq, await cursor.fetchall(), max_bytes)
            if cuts:
                values = {"id": session_id, "from_seq": cuts[-1], "to_seq": to_seq}
                await cursor.execute(store._sql.stored.sql, store._sql.stored.params(values))
                rows: list[Any] = await cursor.fetchall()
        if not cuts:
            # The cut needs more messages than one read brings: page through them in a worker thread.
            return await store._in_thread(store._page_walked, session_id, info, to_seq, max_messages, max_bytes)
        if sum(len(row[3]) for row in rows) < INLINE_BYTES and not any(row[2] for row in rows):
            return PageRead(info, to_seq, cuts, store._records(rows))
        return PageRead(info, to_seq, cuts, await anyio.to_thread.run_sync(store._records, rows))

    def _head(
        self, store: SqlStore, row: Any, session_id: str, through: int | None, before: int | None
    ) -> PageRead | tuple[SessionInfo, int, list[HiddenRange], list[MessageEntry], bool]:
        """A `_PAGE_HEAD` row as the session, the page's end, hidden ranges, newest messages, and if more exist."""
        if row is None:
            raise SessionNotFoundError(session_id)
        header, owner, head, hidden_rows, message_rows = row
        info = SessionInfo(store._header(header, session_id), owner, head)
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

    def append_at_once(
        self, store: SqlStore, cursor: Any, session_id: str, expected: int, new_head: int, batch: PreparedBatch
    ) -> bool:
        """The usual case in one round trip.

        One statement moves the head from just before the batch, writes the batch and sends
        the notice; ``False``, changing nothing, when the head was elsewhere or when the append
        must rewrite the open run, which needs its stored lines first.
        """
        known = store._tails.get(session_id)
        if known is None or known[0] != expected:
            return False
        if kept(known[1], batch.records) < len(known[1]):
            return False
        _, records = plan_append(known[1], batch.records, _no_lines)
        rows = [store._row(session_id, record) for record in records]
        params = {
            "session": session_id,
            "expected": expected,
            "head": new_head,
            "channel": NOTIFY_CHANNEL,
            "notice": notice(session_id, new_head, self._origin),
            "seqs": [r.seq for r in records],
            "members": [r.members for r in records],
            "compressed": [row["compressed"] for row in rows],
            "datas": [row["data"] for row in rows],
            "kinds": [r.kind for r in records],
            "keys": [r.key for r in records],
            "time0s": [r.time0 for r in records],
            "time1s": [r.time1 for r in records],
            "message_seqs": [m.seq for m in batch.messages],
            "groups": [m.group_start for m in batch.messages],
            "hidden_at": [h.at for h in batch.hidden],
            "starts": [h.start for h in batch.hidden],
            "ends": [h.end for h in batch.hidden],
        }
        cursor.execute(_APPEND, params)
        if not cursor.fetchone()[0]:
            return False
        store._remember(session_id, new_head, [*known[1], *records])
        return True

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
            self._listener = PostgresListener(self._conninfo(), self._origin, watchdog=self._watchdog)
        return self._listener

    async def close(self) -> None:
        if self._async_readers is not None:
            await self._async_readers.close()

    def close_sync(self) -> None:
        self._watchdog.close()

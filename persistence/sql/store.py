"""The SQL store (SQLAlchemy 2 Core): SQLite embedded, PostgreSQL for several nodes.

The tables are `persistence.sql.schema`'s, upgraded by `persistence.sql.migrations`. Appends
serialize on the session: the dialect holds its write lock for the transaction (SQLite's
``BEGIN IMMEDIATE``, PostgreSQL's ``SELECT ... FOR UPDATE``), so two processes never
duplicate or skip a seq; the loser of a race gets `SeqConflictError`. An append seals the
session's open run in the same transaction (`persistence.sealing`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import anyio.to_thread
import msgspec
import sqlalchemy as sa
import zstandard
from sqlalchemy.engine import Connection, Engine

from codec import Event, SessionHeader, StoredRecord, encode
from persistence._zstd import ZstdContexts
from persistence.base import (
    DEFAULT_OWNER,
    DEFAULT_SESSION_CACHE,
    DEFAULT_STORE_TIMEOUT,
    AppendResult,
    HistoryStore,
    PageRead,
    SessionInfo,
    SessionKey,
    SessionSummary,
    events_in,
    expires_at_of,
    incarnated,
    now_ms,
    subagent_parent,
)
from persistence.batch import PreparedBatch, prepared
from persistence.call_bound import Outstanding, call_bound, in_thread
from persistence.errors import CorruptLogError, SessionExistsError, SessionNotFoundError, StoreError
from persistence.group_commit import GroupCommit
from persistence.message_index import HiddenRange, MessageEntry, select_cuts
from persistence.notify import HeadListener
from persistence.off_loop import OFF_LOOP_BYTES
from persistence.rules import Life, check_life, confirm_resend, dense_gap, plan_batch
from persistence.sealing import next_open_run, open_run, plan_append
from persistence.sql import space
from persistence.sql.deletion import Deletion, finish_purges
from persistence.sql.dialect import (
    MESSAGE_PAGE,
    Deadline,
    Dialect,
    Head,
    LongWalk,
    busy_ms,
)
from persistence.sql.groups import Append, SessionUnit
from persistence.sql.migrations import migrate, refuse
from persistence.sql.postgres import PostgresDialect
from persistence.sql.reads import KeptReads
from persistence.sql.schema import COMPRESS_AT, SCHEMA_VERSION, bounded_rows, stored_header
from persistence.sql.sqlite import SqliteDialect
from persistence.sql.statements import Statements, expired, listing
from persistence.sql.streams import SqlStreams
from persistence.state import Lru

__all__ = ["SCHEMA_VERSION", "SqlStore"]

_MAX_LINE: Final = 256 * 1024 * 1024
T = TypeVar("T")


def _dialect_for(backend: str) -> type[Dialect]:
    """The dialect of a SQLAlchemy backend; PostgreSQL's for any other, as a server database."""
    return SqliteDialect if SqliteDialect.serves(backend) else PostgresDialect


class SqlStore(KeptReads, HistoryStore):
    """A store on a SQLAlchemy engine. Open it with `SqlStore.open`.

    The hot path runs compiled statements (`persistence.sql.prepared`) on DBAPI connections
    the store keeps: appends and creates go through one writer thread that commits them in
    groups (`persistence.sql.groups`); reads take a kept reader connection. Where a read
    runs, and how a call is bounded, is the dialect's (`persistence.sql.sqlite`,
    `persistence.sql.postgres`). Every call is bounded by ``timeout`` seconds, and past it
    raises `StoreError`.
    """

    def __init__(
        self, engine: Engine, *, session_cache: int = DEFAULT_SESSION_CACHE, timeout: float = DEFAULT_STORE_TIMEOUT
    ) -> None:
        self._engine = engine
        self._timeout = timeout
        self._busy_ms = busy_ms(timeout)
        self._origin = uuid.uuid4().hex[:12]
        self._dialect = _dialect_for(engine.url.get_backend_name())(engine, timeout, self._origin)
        self._sql = Statements(engine.dialect, self._dialect)
        self._deletion = Deletion(engine.dialect, self._dialect)
        dbapi = engine.dialect.loaded_dbapi
        self._driver_error: type[Exception] = dbapi.Error
        self._integrity_error: type[Exception] = dbapi.IntegrityError
        self._zstd = ZstdContexts(level=3)  # zstd contexts are not thread-safe; the store's work runs in several
        # Each session's open run at the head this process last wrote (its lines; others b""), with the incarnation
        # it wrote (`_kept_tail`); writer thread only.
        self._tails: Lru[str, tuple[str | None, int, list[StoredRecord]]] = Lru(session_cache)
        # Kept reader connections, each with the busy timeout (ms) it has now (SQLite's; unused on PostgreSQL).
        self._readers: list[tuple[Any, int]] = []
        self._read_threads: anyio.CapacityLimiter | None = None
        self._outstanding = Outstanding()
        self._groups = self._dialect.groups(self)
        self._writer = GroupCommit(self._groups, name="history-sql-writer", bound=self._dialect.call_bound(timeout))
        self.streams = SqlStreams(self)

    @classmethod
    async def open(
        cls, url: str, *, session_cache: int = DEFAULT_SESSION_CACHE, timeout: float = DEFAULT_STORE_TIMEOUT
    ) -> SqlStore:
        """Connect, create the schema on an empty database, refuse an unknown version; ``timeout`` bounds each call."""
        if not timeout > 0:
            raise ValueError(f"the store timeout must be positive, got {timeout!r}")
        return await anyio.to_thread.run_sync(cls._open_sync, url, session_cache, timeout)

    @classmethod
    def _open_sync(cls, url: str, session_cache: int, timeout: float) -> SqlStore:
        try:
            dialect = _dialect_for(sa.make_url(url).get_backend_name())
            # Pinged at checkout: a pooled connection the database dropped meanwhile (the sweep's, a listing's)
            # is replaced, not handed to a read.
            engine = sa.create_engine(url, connect_args=dialect.connect_args(timeout), pool_pre_ping=True)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise StoreError(f"not a usable database URL: {exc}") from exc
        dialect.prepare_engine(engine, busy_ms(timeout))
        store = cls(engine, session_cache=session_cache, timeout=timeout)
        try:
            store._dialect.opened(store)
            store._migrate()
        except BaseException:
            engine.dispose()
            store._dialect.close_sync()
            raise
        return store

    def _migrate(self) -> None:
        with self._write() as conn:
            if (found := migrate(conn, self._dialect, stored_header, self._unpack_line)) in (None, str(SCHEMA_VERSION)):
                finish_purges(conn)
        refuse(found)

    # Connections.

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A SQLAlchemy write transaction, for schema work."""
        try:
            with self._engine.connect() as conn:
                conn = conn.execution_options(history_write=True)
                with conn.begin():
                    yield conn
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {exc.orig}") from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A bounded SQLAlchemy transaction, off the hot path: the listings' reads, and PostgreSQL's purge batches."""
        deadline: Deadline | None = None
        try:
            with self._engine.connect() as conn:
                with self._dialect.bound(conn.connection.dbapi_connection) as deadline:
                    try:
                        with conn.begin():
                            yield conn
                    finally:
                        if deadline.expired:
                            # Cut by the watchdog: the pool must not hand it out again.
                            conn.invalidate()
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {self._failure(exc.orig, deadline)}") from exc

    def _connect(self) -> Any:
        """A DBAPI connection of the store's own, set up as the engine's are (the SQLite pragmas)."""
        pooled = self._engine.raw_connection()
        connection = pooled.dbapi_connection
        pooled.detach()
        return connection

    def _connect_writer(self) -> Any:
        return self._dialect.writer(self._connect())

    # Sessions.

    async def create_session(self, header: SessionHeader, *, owner: str = DEFAULT_OWNER) -> SessionInfo:
        header = incarnated(header)
        row = {
            "id": header.id,
            "header": encode(header),
            "owner": owner,
            "parent_id": subagent_parent(header),
            "head_seq": -1,
            "created_at": header.createdAt,
            "closed_at": None,
            "expires_at": expires_at_of(header),
            "touched_at": (touched := now_ms()),
        }
        await self._writer.run(lambda cursor: self._create_unit(cursor, row), header.id)
        return SessionInfo(header, owner, -1, touched)

    def _create_unit(self, cursor: Any, row: dict[str, Any]) -> None:
        self._tails.pop(row["id"])  # what it kept of an earlier incarnation of the id
        self._deletion.before_create(cursor, row["id"])
        try:
            self._sql.create.run(cursor, **row)
        except self._integrity_error as exc:
            raise SessionExistsError(row["id"]) from exc

    async def get_session(self, session_id: str) -> SessionInfo:
        return await self._dialect.read(self, self._info, session_id)

    async def delete_session(self, session_id: str, *, life: Life | None = None) -> list[str]:
        tree = await self._dialect.read(self, self._deletion.tree, session_id)
        unit = SessionUnit(
            session_id, lambda cursor: self._deletion.run(cursor, session_id, self._tails.pop, life), tree
        )
        deleted: list[str]
        deleted, left = await self._writer.run(unit, session_id)
        await self._deletion.purge(left, lambda gone, work: self._dialect.purge(self, gone, work))
        return deleted

    async def close_session(self, session_id: str, *, closed_at: int, life: Life | None = None) -> SessionInfo:
        # Through the writer, so that it is ordered with the session's appends and durable when it returns.
        unit = SessionUnit(session_id, lambda cursor: self._close_unit(cursor, session_id, closed_at, life))
        return await self._writer.run(unit, session_id)

    def _close_unit(self, cursor: Any, session_id: str, closed_at: int, life: Life | None) -> SessionInfo:
        row = self._sql.session_for_update.run(cursor, id=session_id).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        header, owner, head, touched = stored_header(row[0], session_id), row[1], row[2], row[4]
        check_life(session_id, life, header, owner)
        if row[3] is None:
            header, touched = msgspec.structs.replace(header, closedAt=closed_at), closed_at
            extra = self._dialect.advance_params(session_id, head, closed=True)
            self._sql.close.run(cursor, id=session_id, closed_header=encode(header), at=closed_at, **extra)
        return SessionInfo(header, owner, head, touched)

    def _info(self, cursor: Any, session_id: str) -> SessionInfo:
        row = self._sql.session.run(cursor, id=session_id).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        return SessionInfo(stored_header(row[0], session_id), row[1], row[2], row[3])

    async def children(self, parent_id: str) -> list[SessionHeader]:
        rows = await self._dialect.read(self, lambda cursor: self._sql.children.run(cursor, id=parent_id).fetchall())
        return [stored_header(data, child_id) for child_id, data in rows]

    async def _rows(self, query: sa.Select[Any]) -> Sequence[sa.Row[Any]]:
        bound = self._dialect.call_bound(self._timeout)
        return await in_thread(bound, self._rows_sync, query, outstanding=self._outstanding)

    def _rows_sync(self, query: sa.Select[Any]) -> Sequence[sa.Row[Any]]:
        with self._read() as conn:
            return conn.execute(query).all()

    async def list_sessions(
        self, owner: str, *, limit: int, before: SessionKey | None = None, closed: bool | None = None
    ) -> list[SessionSummary]:
        if limit < 1:
            return []
        rows = await self._rows(listing(owner, limit, before, closed))
        return [
            SessionSummary(r.id, r.created_at, r.head_seq, r.child_count, r.closed_at, r.expires_at, r.touched_at)
            for r in rows
        ]

    async def expired(
        self, *, now: int, retention_ms: int | None, limit: int | None, skip: Collection[str] = ()
    ) -> list[str]:
        return [row.id for row in await self._rows(expired(now, retention_ms, limit, skip))]

    def sweeping(self) -> contextlib.AbstractAsyncContextManager[bool]:
        return self._dialect.sweeping(self._engine)

    # Appends.

    async def append(self, session_id: str, events: Sequence[Event], *, life: Life | None = None) -> AppendResult:
        # Packing is pure work: done before the writer, never inside its transaction.
        batch = await prepared(events)
        # The dialect's group writer commits it, beside the appends that arrive with it.
        return await self._writer.run(Append(session_id, events, batch, self._append_unit, life), session_id)

    def _append_unit(
        self, cursor: Any, session_id: str, events: Sequence[Event], batch: PreparedBatch | None, life: Life | None
    ) -> AppendResult:
        """One append, in the writer thread, inside its own savepoint of the group's transaction."""
        seqs = [event.seq for event in events]
        if batch is not None and dense_gap(seqs) is None:
            # The usual case, tried first: the head is just before the batch, in the life checked.
            hoped = plan_batch(session_id, seqs, seqs[0] - 1)
            expected, new_head = seqs[0] - 1, hoped.head_seq
            if self._advance(cursor, session_id, expected, new_head, life):
                # It was, and the row is now locked.
                self._insert(cursor, session_id, batch, life)
                return AppendResult.of(hoped)
        row = self._sql.head_for_update.run(cursor, id=session_id).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        check_life(session_id, life, stored_header(row[2], session_id), row[3])
        head = row[0]
        closed = row[1] is not None
        plan = plan_batch(session_id, seqs, head, closed=closed)
        if plan.resend:
            stored = events_in(
                self._stored(cursor, session_id, plan.first_seq, plan.to_seq), plan.first_seq, plan.to_seq
            )
            confirm_resend(session_id, events, stored, head, closed=closed)
        if plan.writes and batch is not None:
            if not self._advance(cursor, session_id, head, plan.head_seq, life):
                raise AssertionError("the locked head moved")
            self._insert(cursor, session_id, batch, life)
        return AppendResult.of(plan)

    def _remember(
        self,
        session_id: str,
        life: Life | None,
        head: int,
        kept: Sequence[StoredRecord],
        records: Sequence[StoredRecord],
    ) -> None:
        """Keep the session's open run for the next append's plan, with the lines this writer wrote (others are b"").

        ``kept`` is what the plan kept of the open run, ``records`` what it wrote after it, in ``life``.
        """
        self._tails.put(session_id, (None if life is None else life.incarnation, head, next_open_run(kept, records)))

    def _kept_tail(self, session_id: str, life: Life | None, head: int) -> list[StoredRecord] | None:
        """The open run kept of ``life`` at ``head``, if this writer last wrote it there; else ``None``.

        Only of the life named (a write that names none, of one that named none): another process
        may have deleted the id and created it again since, to the same head, before its notice said so.
        """
        known = self._tails.get(session_id)
        if known is None or known[:2] != (None if life is None else life.incarnation, head):
            return None
        return known[2]

    def _advance(self, cursor: Any, session_id: str, expected: int, new_head: int, life: Life | None) -> bool:
        """Move the head of ``life`` from ``expected`` to ``new_head``; ``False``, changing nothing, if not there."""
        extra = self._dialect.advance_params(session_id, new_head)
        owner, incarnation = (None, None) if life is None else (life.owner, life.incarnation)
        self._sql.advance.run(
            cursor,
            id=session_id,
            expected=expected,
            new_head=new_head,
            touched=now_ms(),
            owner=owner,
            incarnation=incarnation,
            **extra,
        )
        return bool(cursor.rowcount == 1)

    def _insert(self, cursor: Any, session_id: str, batch: PreparedBatch, life: Life | None) -> None:
        """Write a batch after the stored head, sealing the open run (the head is locked already)."""
        tail = self._kept_tail(session_id, life, batch.records[0].seq - 1)
        # Else the head has moved since this writer last wrote it, and so may have the open run.
        if tail is None:
            trailing = self._sql.tail.run(cursor, id=session_id).fetchall()
            tail = open_run([StoredRecord(r[0], r[1], b"", r[2], bytes(r[3]), r[4], r[5]) for r in reversed(trailing)])
        keep, records = plan_append(tail, batch.records, lambda pieces: self._lines(cursor, session_id, pieces))
        if keep < len(tail):
            self._sql.drop_from.run(cursor, id=session_id, seq=tail[keep].seq)
        self._sql.insert_record.run_many(cursor, [self._row(session_id, record) for record in records])
        if batch.messages:
            self._sql.insert_message.run_many(
                cursor, [{"session_id": session_id, "seq": m.seq, "group_start": m.group_start} for m in batch.messages]
            )
        if batch.hidden:
            self._sql.insert_hidden.run_many(
                cursor,
                [{"session_id": session_id, "seq": h.at, "start": h.start, "end": h.end} for h in batch.hidden],
            )
        self._remember(session_id, life, records[-1].end - 1, tail[:keep], records)

    def _lines(self, cursor: Any, session_id: str, pieces: Sequence[StoredRecord]) -> list[StoredRecord]:
        """``pieces`` (trailing records, columns only) with their stored lines."""
        if not pieces:
            return []
        rows = self._sql.lines.run(cursor, id=session_id, lo=pieces[0].seq, hi=pieces[-1].seq).fetchall()
        lines = {row[0]: self._unpack_line(row[0], row[1], row[2]) for row in rows}
        return [piece._replace(line=lines[piece.seq]) for piece in pieces]

    def _row(self, session_id: str, record: StoredRecord) -> dict[str, Any]:
        compressed, data = False, record.line
        if len(data) >= COMPRESS_AT:
            packed = self._zstd.compress(data)
            if len(packed) < len(data):
                compressed, data = True, packed
        return {
            "session_id": session_id,
            "seq": record.seq,
            "members": record.members,
            "compressed": compressed,
            "data": data,
            "kind": record.kind,
            "key": record.key,
            "time0": record.time0,
            "time1": record.time1,
        }

    def _unpack_line(self, seq: int, compressed: bool, data: bytes) -> bytes:
        if not compressed:
            return bytes(data)
        try:
            return self._zstd.decompressor().decompress(data, max_output_size=_MAX_LINE)
        except zstandard.ZstdError as exc:
            raise CorruptLogError(f"stored record at seq {seq} does not decompress: {exc}") from exc

    # Reads.

    async def read_page(
        self,
        session_id: str,
        *,
        through: int | None,
        before: int | None,
        max_messages: int,
        max_bytes: int | None = None,
    ) -> PageRead:
        return await self._dialect.read_page(self, session_id, through, before, max_messages, max_bytes)

    def _page_walked(
        self, cursor: Any, session_id: str, info: SessionInfo, to_seq: int, max_messages: int, max_bytes: int | None
    ) -> PageRead:
        """The rest of a read whose cut needs a long walk, after its head (the index below ``to_seq`` never changes)."""
        cuts = self._cuts(cursor, session_id, to_seq, max_messages)
        return self._page_of(cursor, session_id, Head(info, to_seq, cuts), max_bytes, False)[0]

    def _page_of(
        self, cursor: Any, session_id: str, head: Head, max_bytes: int | None, inline: bool
    ) -> tuple[PageRead, bool]:
        info, to_seq, cuts = head
        sized = None
        if max_bytes is not None and len(cuts) > 1:
            cuts, sized = self._bounded(cursor, session_id, cuts, to_seq, max_bytes)
        if inline and not self._inline(cursor, session_id, cuts[-1], to_seq, sized):
            return PageRead(info, to_seq, cuts, []), False
        return PageRead(info, to_seq, cuts, self._stored(cursor, session_id, cuts[-1], to_seq)), True

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        return await self._dialect.read_stored(self, session_id, from_seq, to_seq)

    def _stored_checked(
        self, cursor: Any, session_id: str, from_seq: int, to_seq: int, inline: bool
    ) -> list[StoredRecord] | None:
        """The records, or ``None`` when they are too large to read ``inline``; an unknown session raises."""
        if inline and not self._inline(cursor, session_id, from_seq, to_seq):
            return None
        stored = self._stored(cursor, session_id, from_seq, to_seq)
        if not stored:
            self._require(cursor, session_id)
        return stored

    def _bounded(
        self, cursor: Any, session_id: str, cuts: list[int], to_seq: int, max_bytes: int
    ) -> tuple[list[int], tuple[int, bool] | None]:
        """The cuts whose pages may fit ``max_bytes``, from the records' columns and stored sizes alone.

        A compressed line's stored size is below its own (it is kept compressed only when
        smaller), so it is a floor too. A read that surely fits is not sized row by row; it
        comes back with its stored bytes and whether any is compressed, which `_inline` needs.
        """
        values = {"id": session_id, "from_seq": cuts[-1], "to_seq": to_seq}
        size, compressed = self._sql.stored_bytes.run(cursor, **values).fetchone()
        if int(size) <= max_bytes and not compressed:
            return cuts, (int(size), bool(compressed))
        return bounded_rows(cuts, to_seq, self._sql.sizes.run(cursor, **values).fetchall(), max_bytes), None

    def _inline(
        self, cursor: Any, session_id: str, from_seq: int, to_seq: int, sized: tuple[int, bool] | None = None
    ) -> bool:
        """Whether the records may be read on the event loop: few stored bytes, none of them to decompress.

        A compressed line may decompress to any size, so a read holding one goes to a worker thread.
        ``sized`` is the range's stored bytes and compression when already read.
        """
        if sized is None:
            found = self._sql.stored_bytes.run(cursor, id=session_id, from_seq=from_seq, to_seq=to_seq).fetchone()
            sized = (int(found[0]), bool(found[1]))
        size, compressed = sized
        return size <= OFF_LOOP_BYTES and not compressed

    def _stored(self, cursor: Any, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        return self._records(self._sql.stored.run(cursor, id=session_id, from_seq=from_seq, to_seq=to_seq).fetchall())

    def _records(self, rows: Sequence[Any]) -> list[StoredRecord]:
        return [
            StoredRecord(seq, members, self._unpack_line(seq, compressed, data), kind, bytes(key), time0, time1)
            for seq, members, compressed, data, kind, key, time0, time1 in rows
        ]

    def _require(self, cursor: Any, session_id: str) -> None:
        if self._sql.exists.run(cursor, id=session_id).fetchone() is None:
            raise SessionNotFoundError(session_id)

    async def page_cuts(self, session_id: str, *, to_seq: int, max_messages: int) -> list[int]:
        return await self._dialect.read(self, self._cuts_checked, session_id, to_seq, max_messages)

    def _cuts_checked(self, cursor: Any, session_id: str, to_seq: int, max_messages: int) -> list[int]:
        self._require(cursor, session_id)
        return self._cuts(cursor, session_id, to_seq, max_messages)

    def _cuts(
        self, cursor: Any, session_id: str, to_seq: int, max_messages: int, pages: int | None = None
    ) -> list[int]:
        """The candidate cuts; with ``pages``, raise `LongWalk` rather than read more message pages than that."""
        hidden = [HiddenRange(*row) for row in self._sql.hidden.run(cursor, id=session_id, to_seq=to_seq).fetchall()]
        messages = self._messages_desc(cursor, session_id, to_seq, pages=pages)
        return select_cuts(messages, hidden, to_seq=to_seq, max_messages=max_messages)

    def _messages_desc(
        self,
        cursor: Any,
        session_id: str,
        to_seq: int,
        pages: int | None = None,
    ) -> Iterator[MessageEntry]:
        """Counted messages below ``to_seq``, newest first, read a page at a time.

        With ``pages``, reading more message pages than that raises `LongWalk`.
        """
        below = to_seq
        while True:
            if pages is not None:
                if pages == 0:
                    raise LongWalk
                pages -= 1
            rows = self._sql.messages.run(cursor, id=session_id, below=below).fetchall()
            for seq, group_start in rows:
                yield MessageEntry(seq, group_start)
            if len(rows) < MESSAGE_PAGE:
                return
            below = rows[-1][0]

    async def check_ready(self) -> None:
        """Read the sessions table through a connection that works now (the dialect says which)."""
        await self._dialect.check_ready(self)

    async def size(self) -> int | None:
        return await anyio.to_thread.run_sync(self._dialect.size)

    async def vacuum(self) -> None:
        await anyio.to_thread.run_sync(space.vacuum, self._engine, self._dialect)

    def listener(self) -> HeadListener | None:
        """Head notices from every process, where the database sends them (PostgreSQL); SQLite has none."""
        return self._dialect.listener()

    async def close(self) -> None:
        await self._dialect.close()
        await anyio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        self._writer.close()
        self._groups.close()
        # Calls whose callers gave up (`persistence.call_bound`) end within the timeout: their connections
        # come back, to be closed with the rest.
        self._outstanding.wait(call_bound(self._timeout))
        self._reads_closed = True
        self._drop_readers()
        self._engine.dispose()
        self._dialect.close_sync()

"""The SQL store (SQLAlchemy 2 Core): SQLite embedded, PostgreSQL for several nodes.

Tables, keyed ``(session_id, seq)``:

* ``history_sessions``: header (canonical JSON), owner, parent (for subagent children), the
  header's ``createdAt`` (for listings, indexed by owner) and head seq;
* ``history_records``: one row per stored record (`codec.StoredRecord`), a packed row at its
  ``seq0``: its member count, its canonical JSON line in ``data``, and the join columns
  ``kind``, ``key``, ``time0`` and ``time1``. A line of at least 4 KiB is zstd-compressed
  when that is smaller: measured on the realistic tail page, a cold read costs the same
  either way (decompressing offsets reading five times the bytes), and the file is a
  fifth of the size.
* ``history_messages`` and ``history_hidden``: the message index and ``conversationOp`` ranges;
* ``history_meta``: the schema version. A version-1 or -2 database is upgraded in place when
  opened; an unknown version refuses to open.

Appends serialize on the session: SQLite takes the write lock up front (``BEGIN
IMMEDIATE``) and PostgreSQL locks the session row (``SELECT ... FOR UPDATE``), so two
processes never duplicate or skip a seq; the loser of a race gets `SeqConflictError`. An
append seals the session's open run in the same transaction (`persistence.sealing`).
"""

from __future__ import annotations

import functools
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import anyio.to_thread
import sqlalchemy as sa
import zstandard
from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.visitors import InternalTraversal

from codec import (
    CodecError,
    Event,
    SessionHeader,
    StoredRecord,
    decode_header,
    decode_storage_line,
    encode,
    stored_record,
)
from persistence._zstd import ZstdContexts
from persistence.base import (
    DEFAULT_OWNER,
    AppendResult,
    HistoryStore,
    SessionInfo,
    SessionKey,
    SessionSummary,
    check_batch,
    events_in,
    is_resend,
    subagent_parent,
)
from persistence.errors import (
    CorruptLogError,
    SchemaVersionError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
)
from persistence.message_index import HiddenRange, MessageEntry, select_cuts
from persistence.notify import NOTIFY_CHANNEL, HeadListener, PostgresListener, notice
from persistence.sealing import MAX_TAIL, kept, open_run, plan_append
from persistence.stored import PreparedBatch, prepare_batch

__all__ = ["SCHEMA_VERSION", "SqlStore"]

SCHEMA_VERSION: Final = 3
COMPRESS_AT: Final = 4096
_MAX_LINE: Final = 256 * 1024 * 1024
_MESSAGE_PAGE: Final = 256
_BACKFILL_BATCH: Final = 1000
_TAILS_KEPT: Final = 4096
T = TypeVar("T")


class _CodePointOrder(sa.ColumnElement[str]):
    """A text column compared by code point, as Python compares str (and so every other store)."""

    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement)]
    type = sa.String()

    def __init__(self, column: sa.ColumnElement[str]) -> None:
        self.column = column


@compiles(_CodePointOrder)
def _code_point_order(element: _CodePointOrder, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLite's default BINARY collation already compares UTF-8 text by code point.
    return compiler.process(element.column, **kw)


@compiles(_CodePointOrder, "postgresql")
def _code_point_order_postgresql(element: _CodePointOrder, compiler: SQLCompiler, **kw: Any) -> str:
    # The database's collation may be a locale's; "C" compares UTF-8 bytes, that is code points.
    return f'{compiler.process(element.column, **kw)} COLLATE "C"'


metadata = sa.MetaData()
meta_table = sa.Table(
    "history_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(255), nullable=False),
)
sessions_table = sa.Table(
    "history_sessions",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("header", sa.LargeBinary, nullable=False),
    sa.Column("owner", sa.String, nullable=False),
    sa.Column("parent_id", sa.String, nullable=True, index=True),
    sa.Column("head_seq", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)
# A listing reads one owner's top-level sessions newest first: a backward range scan of this
# index that never visits a child's entry, so a page costs its length, not the owner's sessions.
listing_index = sa.Index(
    "ix_history_sessions_listing",
    sessions_table.c.owner,
    sessions_table.c.created_at,
    _CodePointOrder(sessions_table.c.id),
    sqlite_where=sessions_table.c.parent_id.is_(None),
    postgresql_where=sessions_table.c.parent_id.is_(None),
)
records_table = sa.Table(
    "history_records",
    metadata,
    sa.Column("session_id", sa.String, sa.ForeignKey("history_sessions.id"), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("members", sa.Integer, nullable=False),
    sa.Column("compressed", sa.Boolean, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("kind", sa.SmallInteger, nullable=False),
    sa.Column("key", sa.LargeBinary, nullable=False),
    sa.Column("time0", sa.BigInteger, nullable=False),
    sa.Column("time1", sa.BigInteger, nullable=False),
)
_JOIN_COLUMNS: Final = ("kind", "key", "time0", "time1")
messages_table = sa.Table(
    "history_messages",
    metadata,
    sa.Column("session_id", sa.String, sa.ForeignKey("history_sessions.id"), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("group_start", sa.BigInteger, nullable=False),
)
hidden_table = sa.Table(
    "history_hidden",
    metadata,
    sa.Column("session_id", sa.String, sa.ForeignKey("history_sessions.id"), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("start", sa.BigInteger, nullable=False),
    sa.Column("end", sa.BigInteger, nullable=False),
)


def _sqlite_setup(engine: Engine) -> None:
    @sa_event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin event, not pysqlite, open transactions.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @sa_event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        write = connection.get_execution_options().get("history_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


# Every table's insert is gated on the head having moved, so the statement does all of it or nothing; the
# NOTIFY rides the update, so PostgreSQL sends it at commit and never for a rollback.
_PG_APPEND: Final = """
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


def _no_lines(pieces: Sequence[StoredRecord]) -> Sequence[StoredRecord]:
    if pieces:
        raise AssertionError("a one-statement append never rewrites stored records")
    return pieces


def _dense(events: Sequence[Event]) -> bool:
    first = events[0].seq
    return all(event.seq == first + i for i, event in enumerate(events))


class SqlStore(HistoryStore):
    """A store on a SQLAlchemy engine. Open it with `SqlStore.open`; blocking work runs in worker threads."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        self._listener: HeadListener | None = None
        self._origin = uuid.uuid4().hex[:12]
        # zstd contexts are not thread-safe, and the store's work runs in many worker threads.
        self._zstd = ZstdContexts(level=3)
        # Each session's open run (join columns only) as of the head this process last wrote.
        self._tails: OrderedDict[str, tuple[int, list[StoredRecord]]] = OrderedDict()

    @classmethod
    async def open(cls, url: str) -> SqlStore:
        """Connect, create the schema on an empty database, and refuse an unknown schema version."""
        return await anyio.to_thread.run_sync(cls._open_sync, url)

    @classmethod
    def _open_sync(cls, url: str) -> SqlStore:
        try:
            engine = sa.create_engine(url)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise StoreError(f"not a usable database URL: {exc}") from exc
        if engine.dialect.name == "sqlite":
            _sqlite_setup(engine)
        store = cls(engine)
        try:
            store._migrate()
        except BaseException:
            engine.dispose()
            raise
        return store

    def _migrate(self) -> None:
        with self._write() as conn:
            if not sa.inspect(conn).has_table(meta_table.name):
                metadata.create_all(conn)
                conn.execute(sa.insert(meta_table).values(key="schema_version", value=str(SCHEMA_VERSION)))
                return
            # FOR UPDATE: of two processes opening a version-1 database, one upgrades it and the
            # other then reads version 2 (SQLite's write transaction already serializes them).
            version = conn.execute(
                sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version").with_for_update()
            ).scalar()
            if version == "1":
                self._upgrade_from_1(conn)
                version = "2"
            if version == "2":
                self._upgrade_from_2(conn)
                return
        if version != str(SCHEMA_VERSION):
            raise SchemaVersionError(
                f"the database has history schema version {version!r}; "
                f"this build reads version {SCHEMA_VERSION} and upgrades versions 1 and 2"
            )

    def _upgrade_from_1(self, conn: Connection) -> None:
        """Version 2 adds ``history_sessions.created_at`` and the listing index; one transaction does it all."""
        # SQLite cannot add a NOT NULL column without a default; every insert names created_at.
        conn.exec_driver_sql("ALTER TABLE history_sessions ADD COLUMN created_at BIGINT NOT NULL DEFAULT 0")
        c = sessions_table.c
        set_created_at = (
            sa.update(sessions_table).where(c.id == sa.bindparam("b_id")).values(created_at=sa.bindparam("b_created"))
        )
        after: str | None = None
        while True:
            batch = sa.select(c.id, c.header).order_by(c.id).limit(_BACKFILL_BATCH)
            rows = conn.execute(batch if after is None else batch.where(c.id > after)).all()
            if not rows:
                break
            conn.execute(
                set_created_at,
                [{"b_id": row.id, "b_created": self._header(row.header, row.id).createdAt} for row in rows],
            )
            after = rows[-1].id
        listing_index.create(conn)
        self._set_version(conn, "2")

    def _upgrade_from_2(self, conn: Connection) -> None:
        """Version 3 adds the join columns to ``history_records``, filled from each record's line."""
        empty = "X''" if self._sqlite else "''::bytea"
        for name, kind, default in (
            ("kind", sa.SmallInteger(), "0"),
            ("key", sa.LargeBinary(), empty),
            ("time0", sa.BigInteger(), "0"),
            ("time1", sa.BigInteger(), "0"),
        ):
            column_type = kind.compile(dialect=conn.dialect)
            conn.exec_driver_sql(
                f"ALTER TABLE history_records ADD COLUMN {name} {column_type} NOT NULL DEFAULT {default}"
            )
        c = records_table.c
        set_columns = (
            sa.update(records_table)
            .where(c.session_id == sa.bindparam("b_session"), c.seq == sa.bindparam("b_seq"))
            .values({name: sa.bindparam(f"b_{name}") for name in _JOIN_COLUMNS})
        )
        after: tuple[str, int] | None = None
        while True:
            batch = (
                sa.select(c.session_id, c.seq, c.compressed, c.data)
                .order_by(c.session_id, c.seq)
                .limit(_BACKFILL_BATCH)
            )
            if after is not None:
                batch = batch.where(sa.tuple_(c.session_id, c.seq) > sa.tuple_(*after))
            rows = conn.execute(batch).all()
            if not rows:
                break
            updates = []
            for row in rows:
                line = self._unpack_line(row)
                try:
                    record = stored_record(decode_storage_line(line), line)
                except CodecError as exc:
                    raise CorruptLogError(
                        f"session {row.session_id!r}: stored record at seq {row.seq} is corrupt: {exc}"
                    ) from exc
                if record.kind:
                    updates.append(
                        {
                            "b_session": row.session_id,
                            "b_seq": row.seq,
                            **{f"b_{name}": getattr(record, name) for name in _JOIN_COLUMNS},
                        }
                    )
            if updates:
                conn.execute(set_columns, updates)
            after = (rows[-1].session_id, rows[-1].seq)
        self._set_version(conn, "3")

    @staticmethod
    def _set_version(conn: Connection, version: str) -> None:
        conn.execute(sa.update(meta_table).where(meta_table.c.key == "schema_version").values(value=version))

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn:
                conn = conn.execution_options(history_write=True)
                with conn.begin():
                    yield conn
        except sa.exc.IntegrityError:
            raise
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {exc.orig}") from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn, conn.begin():
                yield conn
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {exc.orig}") from exc

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args))

    # Sessions.

    async def create_session(self, header: SessionHeader, *, owner: str = DEFAULT_OWNER) -> SessionInfo:
        return await self._run(self._create_sync, header, owner)

    def _create_sync(self, header: SessionHeader, owner: str) -> SessionInfo:
        row = {
            "id": header.id,
            "header": encode(header),
            "owner": owner,
            "parent_id": subagent_parent(header),
            "head_seq": -1,
            "created_at": header.createdAt,
        }
        try:
            with self._write() as conn:
                conn.execute(sa.insert(sessions_table).values(**row))
        except sa.exc.IntegrityError as exc:
            raise SessionExistsError(header.id) from exc
        return SessionInfo(header, owner, -1)

    async def get_session(self, session_id: str) -> SessionInfo:
        return await self._run(self._get_sync, session_id)

    def _get_sync(self, session_id: str) -> SessionInfo:
        with self._read() as conn:
            row = conn.execute(
                sa.select(sessions_table.c.header, sessions_table.c.owner, sessions_table.c.head_seq).where(
                    sessions_table.c.id == session_id
                )
            ).first()
        if row is None:
            raise SessionNotFoundError(session_id)
        return SessionInfo(self._header(row.header, session_id), row.owner, row.head_seq)

    @staticmethod
    def _header(data: bytes, session_id: str) -> SessionHeader:
        try:
            return decode_header(data)
        except CodecError as exc:
            raise CorruptLogError(f"session {session_id!r}: stored header is corrupt: {exc}") from exc

    async def children(self, parent_id: str) -> list[SessionHeader]:
        return await self._run(self._children_sync, parent_id)

    def _children_sync(self, parent_id: str) -> list[SessionHeader]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(sessions_table.c.id, sessions_table.c.header)
                .where(sessions_table.c.parent_id == parent_id)
                .order_by(sessions_table.c.id)
            ).all()
        return [self._header(row.header, row.id) for row in rows]

    async def list_sessions(self, owner: str, *, limit: int, before: SessionKey | None = None) -> list[SessionSummary]:
        if limit < 1:
            return []
        return await self._run(self._list_sync, owner, limit, before)

    def _list_sync(self, owner: str, limit: int, before: SessionKey | None) -> list[SessionSummary]:
        s, child = sessions_table.c, sessions_table.alias("child").c
        order_id = _CodePointOrder(s.id)
        # Counted per listed row through the parent_id index, never by reading headers.
        child_count = sa.select(sa.func.count()).where(child.parent_id == s.id).scalar_subquery()
        query = (
            sa.select(s.id, s.created_at, s.head_seq, child_count.label("child_count"))
            .where(s.owner == owner, s.parent_id.is_(None))
            .order_by(s.created_at.desc(), order_id.desc())
            .limit(limit)
        )
        if before is not None:
            bound = sa.tuple_(before.created_at, before.id, types=[s.created_at.type, s.id.type])
            query = query.where(sa.tuple_(s.created_at, order_id) < bound)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [SessionSummary(row.id, row.created_at, row.head_seq, row.child_count) for row in rows]

    # Appends.

    async def append(self, session_id: str, events: Sequence[Event]) -> AppendResult:
        return await self._run(self._append_sync, session_id, events)

    def _append_sync(self, session_id: str, events: Sequence[Event]) -> AppendResult:
        batch = prepare_batch(events) if events else None
        if batch and not self._sqlite and _dense(events) and self._append_in_one_statement(session_id, events, batch):
            return AppendResult(events[0].seq, events[-1].seq)
        with self._write() as conn:
            if batch and _dense(events) and self._advance(conn, session_id, events[0].seq - 1, events[-1].seq):
                # The usual case, in one round trip fewer: the head was just before the batch, and the
                # row is now locked by this transaction's update.
                self._insert(conn, session_id, batch)
                return AppendResult(events[0].seq, events[-1].seq)
            head = conn.execute(
                sa.select(sessions_table.c.head_seq).where(sessions_table.c.id == session_id).with_for_update()
            ).scalar()
            if head is None:
                raise SessionNotFoundError(session_id)
            if batch is None:
                return AppendResult(head + 1, head)
            first, to_seq = events[0].seq, events[-1].seq + 1
            if not check_batch(session_id, events, head):
                stored = events_in(self._stored(conn, session_id, first, to_seq), first, to_seq)
                is_resend(session_id, events, stored, head)
                return AppendResult(first, head, idempotent=True)
            if not self._advance(conn, session_id, head, to_seq - 1):
                raise AssertionError("the locked head moved")
            self._insert(conn, session_id, batch)
        return AppendResult(first, to_seq - 1)

    def _append_in_one_statement(self, session_id: str, events: Sequence[Event], batch: PreparedBatch) -> bool:
        """PostgreSQL's usual case in one round trip.

        One statement, so one transaction, moves the head from just before the batch, writes the
        batch and sends the notice; ``False``, changing nothing, when the head was elsewhere or
        when the append must rewrite the open run, which needs its stored lines first.
        """
        known = self._tails.get(session_id)
        expected = events[0].seq - 1
        if known is None or known[0] != expected:
            return False
        if kept(known[1], batch.records) < len(known[1]):
            return False
        _, records = plan_append(known[1], batch.records, _no_lines)
        new_head = events[-1].seq
        rows = [self._row(session_id, record) for record in records]
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
        try:
            with self._engine.connect() as conn:
                moved = conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(_PG_APPEND, params)
                if not moved.scalar():
                    return False
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {exc.orig}") from exc
        self._remember(session_id, new_head, [*known[1], *records])
        return True

    def _remember(self, session_id: str, head: int, trailing: Sequence[StoredRecord]) -> None:
        """Keep the session's open run, columns only, for the next append's plan."""
        if self._sqlite:
            return
        self._tails[session_id] = (head, [record._replace(line=b"") for record in open_run(trailing)])
        self._tails.move_to_end(session_id)
        if len(self._tails) > _TAILS_KEPT:
            self._tails.popitem(last=False)

    def _advance(self, conn: Connection, session_id: str, expected: int, new_head: int) -> bool:
        """Move the head from ``expected`` to ``new_head``; ``False``, changing nothing, if it was elsewhere."""
        c = sessions_table.c
        update = sa.update(sessions_table).where(c.id == session_id, c.head_seq == expected).values(head_seq=new_head)
        if not self._sqlite:
            # In the transaction and the same round trip: delivered at commit, never for a rollback.
            payload = notice(session_id, new_head, self._origin)
            update = update.returning(sa.func.pg_notify(NOTIFY_CHANNEL, payload))
        return conn.execute(update).rowcount == 1

    def _insert(self, conn: Connection, session_id: str, batch: PreparedBatch) -> None:
        """Write a batch after the stored head, sealing the open run (the head is locked already)."""
        c = records_table.c
        trailing = conn.execute(
            sa.select(c.seq, c.members, *(c[name] for name in _JOIN_COLUMNS))
            .where(c.session_id == session_id)
            .order_by(c.seq.desc())
            .limit(MAX_TAIL)
        ).all()
        tail = open_run(
            [StoredRecord(r.seq, r.members, b"", r.kind, bytes(r.key), r.time0, r.time1) for r in reversed(trailing)]
        )
        keep, records = plan_append(tail, batch.records, lambda pieces: self._lines(conn, session_id, pieces))
        if keep < len(tail):
            conn.execute(sa.delete(records_table).where(c.session_id == session_id, c.seq >= tail[keep].seq))
        conn.execute(sa.insert(records_table), [self._row(session_id, record) for record in records])
        if batch.messages:
            conn.execute(
                sa.insert(messages_table),
                [{"session_id": session_id, "seq": m.seq, "group_start": m.group_start} for m in batch.messages],
            )
        if batch.hidden:
            conn.execute(
                sa.insert(hidden_table),
                [{"session_id": session_id, "seq": h.at, "start": h.start, "end": h.end} for h in batch.hidden],
            )
        self._remember(session_id, records[-1].end - 1, [*tail[:keep], *records])

    def _lines(self, conn: Connection, session_id: str, pieces: Sequence[StoredRecord]) -> list[StoredRecord]:
        """``pieces`` (trailing records, columns only) with their stored lines."""
        if not pieces:
            return []
        c = records_table.c
        rows = conn.execute(
            sa.select(c.seq, c.compressed, c.data)
            .where(c.session_id == session_id, c.seq >= pieces[0].seq, c.seq <= pieces[-1].seq)
            .order_by(c.seq)
        ).all()
        lines = {row.seq: self._unpack_line(row) for row in rows}
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

    def _unpack_line(self, row: Any) -> bytes:
        if not row.compressed:
            return bytes(row.data)
        try:
            return self._zstd.decompressor().decompress(row.data, max_output_size=_MAX_LINE)
        except zstandard.ZstdError as exc:
            raise CorruptLogError(f"stored record at seq {row.seq} does not decompress: {exc}") from exc

    # Reads.

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        return await self._run(self._read_stored_sync, session_id, from_seq, to_seq)

    def _read_stored_sync(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        with self._read() as conn:
            stored = self._stored(conn, session_id, from_seq, to_seq)
            if not stored:
                self._require(conn, session_id)
        return stored

    def _stored(self, conn: Connection, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        c = records_table.c
        # From the record covering from_seq (the last one starting at or before it, one index
        # probe), in one statement: a seal that commits between two statements would move it.
        base = sa.select(sa.func.max(c.seq)).where(c.session_id == session_id, c.seq <= from_seq).scalar_subquery()
        rows = conn.execute(
            sa.select(c.seq, c.members, c.compressed, c.data, *(c[name] for name in _JOIN_COLUMNS))
            .where(c.session_id == session_id, c.seq >= sa.func.coalesce(base, from_seq), c.seq < to_seq)
            .order_by(c.seq)
        )
        return [
            StoredRecord(row.seq, row.members, self._unpack_line(row), row.kind, bytes(row.key), row.time0, row.time1)
            for row in rows
        ]

    def _require(self, conn: Connection, session_id: str) -> None:
        found = conn.execute(sa.select(sessions_table.c.id).where(sessions_table.c.id == session_id)).first()
        if found is None:
            raise SessionNotFoundError(session_id)

    async def page_cuts(self, session_id: str, *, to_seq: int, max_messages: int) -> list[int]:
        return await self._run(self._cuts_sync, session_id, to_seq, max_messages)

    def _cuts_sync(self, session_id: str, to_seq: int, max_messages: int) -> list[int]:
        with self._read() as conn:
            self._require(conn, session_id)
            h = hidden_table.c
            hidden = [
                HiddenRange(row.seq, row.start, row.end)
                for row in conn.execute(
                    sa.select(h.seq, h.start, h.end).where(h.session_id == session_id, h.seq < to_seq)
                ).all()
            ]
            return select_cuts(
                self._messages_desc(conn, session_id, to_seq), hidden, to_seq=to_seq, max_messages=max_messages
            )

    def _messages_desc(self, conn: Connection, session_id: str, to_seq: int) -> Iterator[MessageEntry]:
        m = messages_table.c
        below = to_seq
        while True:
            rows = conn.execute(
                sa.select(m.seq, m.group_start)
                .where(m.session_id == session_id, m.seq < below)
                .order_by(m.seq.desc())
                .limit(_MESSAGE_PAGE)
            ).all()
            for row in rows:
                yield MessageEntry(row.seq, row.group_start)
            if len(rows) < _MESSAGE_PAGE:
                return
            below = rows[-1].seq

    def listener(self) -> HeadListener | None:
        """On PostgreSQL, head notices from every process (one LISTEN connection); SQLite has none."""
        if self._sqlite:
            return None
        if self._listener is None:
            url = self._engine.url.set(drivername="postgresql")
            self._listener = PostgresListener(url.render_as_string(hide_password=False), self._origin)
        return self._listener

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self._engine.dispose)

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

import contextlib
import functools
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar
from urllib.parse import quote

import anyio.to_thread
import sqlalchemy as sa
import zstandard
from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement
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
    DEFAULT_SESSION_CACHE,
    DEFAULT_STORE_TIMEOUT,
    AppendResult,
    HistoryStore,
    PageRead,
    SessionInfo,
    SessionKey,
    SessionSummary,
    check_batch,
    events_in,
    is_resend,
    page_end,
    subagent_parent,
)
from persistence.errors import (
    CorruptLogError,
    SchemaVersionError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
)
from persistence.group_commit import GroupCommit, SqlGroups
from persistence.message_index import HiddenRange, MessageEntry, select_cuts
from persistence.notify import NOTIFY_CHANNEL, HeadListener, PostgresListener, notice
from persistence.page_bound import bounded_cuts, floor_sizes
from persistence.pg_readers import AsyncReaders
from persistence.pg_timeouts import Deadline, Watchdog, connect_options
from persistence.prepared import Prepared
from persistence.sealing import MAX_TAIL, kept, open_run, plan_append
from persistence.state import Lru
from persistence.stored import PreparedBatch, prepared

__all__ = ["INLINE_BYTES", "SCHEMA_VERSION", "SqlStore"]

SCHEMA_VERSION: Final = 3
COMPRESS_AT: Final = 4096
_MAX_LINE: Final = 256 * 1024 * 1024
_MESSAGE_PAGE: Final = 256
_BACKFILL_BATCH: Final = 1000
# A read whose records' stored bytes pass this, or hold a compressed line, is finished in a worker thread.
INLINE_BYTES: Final = 256 * 1024
_READERS_KEPT: Final = 8
# Message-index pages a read on the event loop may walk to find its cut (a page is 256 messages).
_INLINE_MESSAGE_PAGES: Final = 4
# SQLite's "busy" and "locked" primary result codes: another connection holds the lock a statement needs.
_SQLITE_BUSY: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
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
# The longest zstd frame header: magic, descriptor, window, dictionary id and content size.
_FRAME_HEADER: Final = 18
# The readiness probe's read: one row of the sessions table, so it reads the table itself, not only the catalog.
_PROBE: Final = f"SELECT 1 FROM {sessions_table.name} LIMIT 1"
# How long the probe's own SQLite connection waits for a lock before it reports the store busy.
_PROBE_LOCK_WAIT: Final = 2.0
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


def _sqlite_prepare(dbapi_connection: Any, busy_ms: int) -> None:
    """Every connection's pragmas, waiting up to ``busy_ms`` for a lock (WAL, which the file keeps, is set at open)."""
    # Let SQLAlchemy's begin event, not pysqlite, open transactions.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_setup(engine: Engine, busy_ms: int) -> None:
    @sa_event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        _sqlite_prepare(dbapi_connection, busy_ms)

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


# The page's head read on PostgreSQL: the session row, its hidden ranges and its newest
# messages (a page of them) below the page's bound, as arrays, in one round trip.
_PG_PAGE_HEAD: Final = """
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


def _pg_head_params(session_id: str, through: int | None, before: int | None) -> dict[str, Any]:
    bound = min(_NO_BOUND if through is None else through + 1, _NO_BOUND if before is None else before)
    return {"id": session_id, "bound": bound, "messages": _MESSAGE_PAGE}


class _LongWalk(Exception):
    """A cut that needs more of the message index than an event-loop read may walk."""


def _bounded(cuts: list[int], to_seq: int, rows: Sequence[Any], max_bytes: int) -> list[int]:
    """`bounded_cuts` over `SqlStatements.sizes` rows."""
    records = [
        StoredRecord(seq, members, b"", kind, bytes(key), time0, time1)
        for seq, members, _, _, kind, key, time0, time1 in rows
    ]
    return bounded_cuts(
        cuts, to_seq, records, floor_sizes(records, [_line_size(row[2], row[3]) for row in rows]), max_bytes
    )


def _line_size(stored: int, frame: bytes | None) -> int:
    """A line's length: its stored size, or what its compressed frame says it holds (at least its stored size)."""
    if frame is None:
        return int(stored)
    try:
        size = zstandard.frame_content_size(bytes(frame))
    except zstandard.ZstdError:
        return int(stored)
    return max(int(stored), size)


class _Busy(Exception):
    """A read on the event loop that would wait for another connection's lock: it is retried in a worker thread."""


def _sqlite_busy(exc: Exception) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode & 0xFF in _SQLITE_BUSY


def _newest(first: Sequence[MessageEntry], more: bool) -> Iterator[MessageEntry]:
    """``first``, then `_LongWalk` if the index holds more messages than it and the cut needs them."""
    yield from first
    if more:
        raise _LongWalk


def _no_lines(pieces: Sequence[StoredRecord]) -> Sequence[StoredRecord]:
    if pieces:
        raise AssertionError("a one-statement append never rewrites stored records")
    return pieces


def _dense(events: Sequence[Event]) -> bool:
    first = events[0].seq
    return all(event.seq == first + i for i, event in enumerate(events))


class _Statements:
    """The hot path's statements, compiled once for the engine's dialect."""

    def __init__(self, dialect: Dialect, sqlite: bool) -> None:
        s, r, m, h = sessions_table.c, records_table.c, messages_table.c, hidden_table.c
        b = sa.bindparam

        def prepared(statement: ClauseElement) -> Prepared:
            return Prepared(statement, dialect)

        self.session = prepared(sa.select(s.header, s.owner, s.head_seq).where(s.id == b("id")))
        self.exists = prepared(sa.select(s.id).where(s.id == b("id")))
        head = sa.select(s.head_seq).where(s.id == b("id"))
        # SQLite's BEGIN IMMEDIATE already holds the write lock; PostgreSQL locks the row.
        self.head_for_update = prepared(head if sqlite else head.with_for_update())
        advance = sa.update(sessions_table).where(s.id == b("id"), s.head_seq == b("expected"))
        advance = advance.values(head_seq=b("new_head"))
        if not sqlite:
            # In the transaction and the same round trip: delivered at commit, never for a rollback.
            advance = advance.returning(sa.func.pg_notify(b("channel", type_=sa.Text), b("notice", type_=sa.Text)))
        self.advance = prepared(advance)
        self.create = prepared(sa.insert(sessions_table))
        self.tail = prepared(
            sa.select(r.seq, r.members, *(r[name] for name in _JOIN_COLUMNS))
            .where(r.session_id == b("id"))
            .order_by(r.seq.desc())
            .limit(MAX_TAIL)
        )
        self.lines = prepared(
            sa.select(r.seq, r.compressed, r.data)
            .where(r.session_id == b("id"), r.seq >= b("lo"), r.seq <= b("hi"))
            .order_by(r.seq)
        )
        self.drop_from = prepared(sa.delete(records_table).where(r.session_id == b("id"), r.seq >= b("seq")))
        self.insert_record = prepared(sa.insert(records_table))
        self.insert_message = prepared(sa.insert(messages_table))
        self.insert_hidden = prepared(sa.insert(hidden_table))
        # From the record covering from_seq (the last one starting at or before it, one index
        # probe), in one statement: a seal that commits between two statements would move it.
        covering = sa.select(sa.func.max(r.seq)).where(r.session_id == b("id"), r.seq <= b("from_seq"))
        start = sa.func.coalesce(covering.scalar_subquery(), b("from_seq"))
        where = (r.session_id == b("id"), r.seq >= start, r.seq < b("to_seq"))
        self.stored = prepared(
            sa.select(r.seq, r.members, r.compressed, r.data, *(r[name] for name in _JOIN_COLUMNS))
            .where(*where)
            .order_by(r.seq)
        )
        # Those records' columns and stored sizes, no line: what bounds a page read by bytes.
        self.sizes = prepared(
            sa.select(
                r.seq,
                r.members,
                sa.func.length(r.data),
                # A compressed line's frame header, which tells its size (zstd writes it by default).
                sa.case((r.compressed, sa.func.substr(r.data, 1, _FRAME_HEADER)), else_=None),
                *(r[name] for name in _JOIN_COLUMNS),
            )
            .where(*where)
            .order_by(r.seq)
        )
        # The stored size of those records, and whether any is compressed, from each row's header:
        # no record is read. (SQLite only: its reads alone may run on the event loop.)
        self.stored_bytes = prepared(
            sa.select(
                sa.func.coalesce(sa.func.sum(sa.func.length(r.data)), 0),
                sa.func.coalesce(sa.func.max(r.compressed), 0),
            ).where(*where)
        )
        self.hidden = prepared(sa.select(h.seq, h.start, h.end).where(h.session_id == b("id"), h.seq < b("to_seq")))
        self.messages = prepared(
            sa.select(m.seq, m.group_start)
            .where(m.session_id == b("id"), m.seq < b("below"))
            .order_by(m.seq.desc())
            .limit(_MESSAGE_PAGE)
        )


class SqlStore(HistoryStore):
    """A store on a SQLAlchemy engine. Open it with `SqlStore.open`.

    The hot path runs compiled statements (`persistence.prepared`) on DBAPI connections the
    store keeps: appends and creates go through one writer thread that commits them in
    groups (`persistence.group_commit`); reads take a kept reader connection. On SQLite a
    read runs on the calling event loop, where a small page costs tens of microseconds, less
    than the hop to a worker thread (about 110 µs measured); a read whose records pass
    `INLINE_BYTES` is finished in a worker thread. On PostgreSQL, whose reads wait on the
    network, a read runs in a worker thread, in one hop for the whole page.

    Every call is bounded by ``timeout`` seconds, and past it raises `StoreError`. On
    PostgreSQL that bounds connecting, each statement (on the server) and each call (a
    `Watchdog` cuts a connection that answers nothing); the connection is then replaced.
    On SQLite a writer, or a read in a worker thread, waits that long for a lock; a read on
    the event loop never waits for one: it is retried in a worker thread.
    """

    def __init__(
        self, engine: Engine, *, session_cache: int = DEFAULT_SESSION_CACHE, timeout: float = DEFAULT_STORE_TIMEOUT
    ) -> None:
        self._engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        self._timeout = timeout
        self._busy_ms = _busy_ms(timeout)
        self._watchdog = None if self._sqlite else Watchdog(timeout, name="history-sql-watchdog")
        self._sql = _Statements(engine.dialect, self._sqlite)
        dbapi = engine.dialect.loaded_dbapi
        self._driver_error: type[Exception] = dbapi.Error
        self._integrity_error: type[Exception] = dbapi.IntegrityError
        self._listener: HeadListener | None = None
        self._origin = uuid.uuid4().hex[:12]
        # zstd contexts are not thread-safe, and the store's work runs in several threads.
        self._zstd = ZstdContexts(level=3)
        # Each session's open run (join columns only) as of the head this process last wrote;
        # only the writer thread touches it.
        self._tails: Lru[str, tuple[int, list[StoredRecord]]] = Lru(session_cache)
        # Kept reader connections, each with the busy timeout (ms) it has now (SQLite; 0 on PostgreSQL).
        self._readers: list[tuple[Any, int]] = []
        self._read_threads: anyio.CapacityLimiter | None = None
        self._async_readers: AsyncReaders | None = None
        self._groups = SqlGroups(
            self._connect_writer,
            begin="BEGIN IMMEDIATE" if self._sqlite else None,
            aborted=self._tails.clear,
            bound=self._bound,
        )
        self._writer = GroupCommit(self._groups, name="history-sql-writer")

    @classmethod
    async def open(
        cls, url: str, *, session_cache: int = DEFAULT_SESSION_CACHE, timeout: float = DEFAULT_STORE_TIMEOUT
    ) -> SqlStore:
        """Connect, create the schema on an empty database, and refuse an unknown schema version.

        ``timeout`` (seconds, positive) bounds every call of the store (see `SqlStore`).
        """
        if not timeout > 0:
            raise ValueError(f"the store timeout must be positive, got {timeout!r}")
        return await anyio.to_thread.run_sync(cls._open_sync, url, session_cache, timeout)

    @classmethod
    def _open_sync(cls, url: str, session_cache: int, timeout: float) -> SqlStore:
        try:
            sqlite = sa.make_url(url).get_backend_name() == "sqlite"
            options = {} if sqlite else connect_options(timeout)
            engine = sa.create_engine(url, connect_args=options)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise StoreError(f"not a usable database URL: {exc}") from exc
        if sqlite:
            _sqlite_setup(engine, _busy_ms(timeout))
        store = cls(engine, session_cache=session_cache, timeout=timeout)
        try:
            if sqlite:
                store._set_wal()
            store._migrate()
        except BaseException:
            engine.dispose()
            raise
        return store

    def _set_wal(self) -> None:
        """WAL mode, which the file keeps: it waits for other connections' locks, so it is set once, here."""
        try:
            connection = self._engine.raw_connection()
            try:
                dbapi_connection = connection.dbapi_connection
                assert dbapi_connection is not None
                dbapi_connection.execute("PRAGMA journal_mode=WAL")
            finally:
                connection.close()
        except self._driver_error as exc:
            raise StoreError(f"store unavailable: {exc}") from exc

    def _migrate(self) -> None:
        with self._write() as conn:
            if not self._sqlite:
                # An upgrade backfills and indexes whole tables: no statement bound applies to it.
                conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
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
                line = self._unpack_line(row.seq, row.compressed, row.data)
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
        """A SQLAlchemy read transaction, for the listings, which are off the hot path; bounded."""
        deadline: Deadline | None = None
        try:
            with self._engine.connect() as conn:
                with self._bound(conn.connection.dbapi_connection) as deadline:
                    try:
                        with conn.begin():
                            yield conn
                    finally:
                        if deadline.expired:
                            # Cut by the watchdog: the pool must not hand it out again.
                            conn.invalidate()
        except sa.exc.DBAPIError as exc:
            raise StoreError(f"store unavailable: {self._failure(exc.orig, deadline)}") from exc

    @contextmanager
    def _bound(self, connection: Any) -> Iterator[Deadline]:
        """Bound one call on a DBAPI connection (PostgreSQL; SQLite's bound is its busy timeout)."""
        if self._watchdog is None:
            yield Deadline(connection, self._timeout, 0.0)
        else:
            with self._watchdog.bound(connection) as deadline:
                yield deadline

    def _failure(self, exc: BaseException | None, deadline: Deadline | None) -> str:
        """What went wrong, for a `StoreError`: the bound when the watchdog cut the call, else the driver's words."""
        if deadline is not None and deadline.expired:
            return f"no answer within {self._timeout:g} s"
        return str(exc)

    def _connect(self) -> Any:
        """A DBAPI connection of the store's own, set up as the engine's are (the SQLite pragmas)."""
        pooled = self._engine.raw_connection()
        connection = pooled.dbapi_connection
        pooled.detach()
        return connection

    def _connect_on_loop(self) -> Any:
        """A SQLite reader opened on the event loop, which never waits for a lock (`_Busy` when it would).

        Opened by the driver itself, since the engine's connections wait up to the bound.
        """
        if self._sqlite_file() is None:
            # No other process can lock an in-memory database; a URI the engine interprets is opened by the engine.
            connection = self._connect()
            connection.execute("PRAGMA busy_timeout=0")
            return connection
        args, options = self._engine.dialect.create_connect_args(self._engine.url)
        connection = self._engine.dialect.loaded_dbapi.connect(*args, **{**options, "timeout": 0})
        try:
            _sqlite_prepare(connection, 0)
        except sqlite3.Error as exc:
            connection.close()
            if _sqlite_busy(exc):
                raise _Busy from exc
            raise
        return connection

    def _connect_writer(self) -> Any:
        connection = self._connect()
        if not self._sqlite:
            connection.autocommit = False
        return connection

    def _reading(self, work: Callable[..., T], *args: Any) -> T:
        """``work(cursor, *args)`` in a read transaction on a kept reader, in the calling thread, within the bound."""
        return self._read_on(work, args, self._busy_ms)

    def _reading_on_loop(self, work: Callable[..., T], *args: Any) -> T:
        """`_reading` on the event loop (SQLite): never waiting for a lock, it raises `_Busy` instead."""
        return self._read_on(work, args, 0)

    def _read_on(self, work: Callable[..., T], args: tuple[Any, ...], busy_ms: int) -> T:
        connection, busy = self._readers.pop() if self._readers else (None, busy_ms)
        deadline: Deadline | None = None
        try:
            if connection is None and self._sqlite and busy_ms == 0:
                connection = self._connect_on_loop()
            elif connection is None:
                connection = self._connect()
                if not self._sqlite:
                    # Each statement reads its own snapshot, as READ COMMITTED does, without BEGIN/COMMIT round trips.
                    connection.autocommit = True
                busy = self._busy_ms
            if self._sqlite and busy != busy_ms:
                connection.execute(f"PRAGMA busy_timeout={busy_ms}")
                busy = busy_ms
            with self._bound(connection) as deadline:
                cursor = connection.cursor()
                if not self._sqlite:
                    result = work(cursor, *args)
                else:
                    cursor.execute("BEGIN")
                    try:
                        result = work(cursor, *args)
                    finally:
                        connection.rollback()
        except (self._driver_error, sa.exc.DBAPIError) as exc:
            if connection is not None and busy_ms == 0 and _sqlite_busy(exc):
                # The connection is sound: only the lock was taken.
                self._keep(connection, busy)
                raise _Busy from exc
            if connection is not None:
                with contextlib.suppress(Exception):
                    connection.close()
            cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
            raise StoreError(f"store unavailable: {self._failure(cause, deadline)}") from exc
        except BaseException:
            if connection is not None:
                self._keep(connection, busy, deadline)
            raise
        self._keep(connection, busy, deadline)
        return result

    def _keep(self, connection: Any, busy: int, deadline: Deadline | None = None) -> None:
        if deadline is not None and deadline.expired:
            # The watchdog cut it: the next read opens a new one.
            with contextlib.suppress(Exception):
                connection.close()
        elif len(self._readers) < _READERS_KEPT:
            self._readers.append((connection, busy))
        else:
            connection.close()

    async def _read_any(self, work: Callable[..., T], *args: Any) -> T:
        """``work`` on a reader: on the event loop for SQLite, in a worker thread for PostgreSQL.

        A SQLite read that would wait for a lock on the event loop is retried in a worker thread.
        """
        if self._sqlite:
            try:
                return self._reading_on_loop(work, *args)
            except _Busy:
                pass
        return await self._in_thread(work, *args)

    async def _in_thread(self, work: Callable[..., T], *args: Any) -> T:
        if self._read_threads is None:
            # As many reads at once as connections are kept, so no read opens a connection of its own.
            self._read_threads = anyio.CapacityLimiter(_READERS_KEPT)
        return await anyio.to_thread.run_sync(functools.partial(self._reading, work, *args), limiter=self._read_threads)

    # Sessions.

    async def create_session(self, header: SessionHeader, *, owner: str = DEFAULT_OWNER) -> SessionInfo:
        row = {
            "id": header.id,
            "header": encode(header),
            "owner": owner,
            "parent_id": subagent_parent(header),
            "head_seq": -1,
            "created_at": header.createdAt,
        }
        await self._writer.run(lambda cursor: self._create_unit(cursor, row), header.id)
        return SessionInfo(header, owner, -1)

    def _create_unit(self, cursor: Any, row: dict[str, Any]) -> None:
        try:
            self._sql.create.run(cursor, **row)
        except self._integrity_error as exc:
            raise SessionExistsError(row["id"]) from exc

    async def get_session(self, session_id: str) -> SessionInfo:
        return await self._read_any(self._info, session_id)

    def _info(self, cursor: Any, session_id: str) -> SessionInfo:
        row = self._sql.session.run(cursor, id=session_id).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        return SessionInfo(self._header(row[0], session_id), row[1], row[2])

    @staticmethod
    def _header(data: bytes, session_id: str) -> SessionHeader:
        try:
            return decode_header(data)
        except CodecError as exc:
            raise CorruptLogError(f"session {session_id!r}: stored header is corrupt: {exc}") from exc

    async def children(self, parent_id: str) -> list[SessionHeader]:
        return await anyio.to_thread.run_sync(self._children_sync, parent_id)

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
        return await anyio.to_thread.run_sync(self._list_sync, owner, limit, before)

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
        # Packing is pure work: done before the writer, never inside its transaction.
        batch = await prepared(events)
        return await self._writer.run(lambda cursor: self._append_unit(cursor, session_id, events, batch), session_id)

    def _append_unit(
        self, cursor: Any, session_id: str, events: Sequence[Event], batch: PreparedBatch | None
    ) -> AppendResult:
        """One append, in the writer thread, inside its own savepoint of the group's transaction."""
        if batch is not None and _dense(events):
            expected, new_head = events[0].seq - 1, events[-1].seq
            if not self._sqlite and self._append_in_one_statement(cursor, session_id, expected, new_head, batch):
                return AppendResult(expected + 1, new_head)
            if self._advance(cursor, session_id, expected, new_head):
                # The usual case: the head was just before the batch, and the row is now locked.
                self._insert(cursor, session_id, batch)
                return AppendResult(expected + 1, new_head)
        row = self._sql.head_for_update.run(cursor, id=session_id).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        head = row[0]
        if batch is None:
            return AppendResult(head + 1, head)
        first, to_seq = events[0].seq, events[-1].seq + 1
        if not check_batch(session_id, events, head):
            stored = events_in(self._stored(cursor, session_id, first, to_seq), first, to_seq)
            is_resend(session_id, events, stored, head)
            return AppendResult(first, head, idempotent=True)
        if not self._advance(cursor, session_id, head, to_seq - 1):
            raise AssertionError("the locked head moved")
        self._insert(cursor, session_id, batch)
        return AppendResult(first, to_seq - 1)

    def _append_in_one_statement(
        self, cursor: Any, session_id: str, expected: int, new_head: int, batch: PreparedBatch
    ) -> bool:
        """PostgreSQL's usual case in one round trip.

        One statement moves the head from just before the batch, writes the batch and sends
        the notice; ``False``, changing nothing, when the head was elsewhere or when the append
        must rewrite the open run, which needs its stored lines first.
        """
        known = self._tails.get(session_id)
        if known is None or known[0] != expected:
            return False
        if kept(known[1], batch.records) < len(known[1]):
            return False
        _, records = plan_append(known[1], batch.records, _no_lines)
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
        cursor.execute(_PG_APPEND, params)
        if not cursor.fetchone()[0]:
            return False
        self._remember(session_id, new_head, [*known[1], *records])
        return True

    def _remember(self, session_id: str, head: int, trailing: Sequence[StoredRecord]) -> None:
        """Keep the session's open run, columns only, for the next append's plan."""
        self._tails.put(session_id, (head, [record._replace(line=b"") for record in open_run(trailing)]))

    def _advance(self, cursor: Any, session_id: str, expected: int, new_head: int) -> bool:
        """Move the head from ``expected`` to ``new_head``; ``False``, changing nothing, if it was elsewhere."""
        if self._sqlite:
            self._sql.advance.run(cursor, id=session_id, expected=expected, new_head=new_head)
        else:
            payload = notice(session_id, new_head, self._origin)
            self._sql.advance.run(
                cursor, id=session_id, expected=expected, new_head=new_head, channel=NOTIFY_CHANNEL, notice=payload
            )
        return bool(cursor.rowcount == 1)

    def _insert(self, cursor: Any, session_id: str, batch: PreparedBatch) -> None:
        """Write a batch after the stored head, sealing the open run (the head is locked already)."""
        known = self._tails.get(session_id)
        if known is not None and known[0] == batch.records[0].seq - 1:
            # The head has not moved since this writer last wrote it, so neither has the open run.
            tail = known[1]
        else:
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
        self._remember(session_id, records[-1].end - 1, [*tail[:keep], *records])

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
        if not self._sqlite:
            return await self._pg_read_page(session_id, through, before, max_messages, max_bytes)
        read, complete = await self._read_any(
            self._page_sync, session_id, through, before, max_messages, max_bytes, True
        )
        if complete:
            return read
        if not read.cuts:
            # The cut needs a long walk through the message index: all of the read goes to a worker thread.
            read, _ = await self._in_thread(
                self._page_sync, session_id, through, before, max_messages, max_bytes, False
            )
            return read
        stored = await self._in_thread(self._stored, session_id, read.cuts[-1], read.to_seq)
        return PageRead(read.info, read.to_seq, read.cuts, stored)

    def _page_sync(
        self,
        cursor: Any,
        session_id: str,
        through: int | None,
        before: int | None,
        max_messages: int,
        max_bytes: int | None,
        inline: bool,
    ) -> tuple[PageRead, bool]:
        """The page's read in one transaction; ``False`` when its records are too large to read ``inline``."""
        if self._sqlite:
            info = self._info(cursor, session_id)
            to_seq = page_end(info.head_seq, through, before)
            if to_seq <= 0 or (through is not None and through > info.head_seq):
                return PageRead(info, to_seq, [], []), True
            try:
                cuts = self._cuts(cursor, session_id, to_seq, max_messages, _INLINE_MESSAGE_PAGES if inline else None)
            except _LongWalk:
                return PageRead(info, to_seq, [], []), False
        else:
            found = self._pg_page_head(cursor, session_id, through, before, max_messages)
            if isinstance(found, PageRead):
                return found, True
            info, to_seq, cuts = found
        sized = None
        if max_bytes is not None and len(cuts) > 1:
            cuts, sized = self._bounded(cursor, session_id, cuts, to_seq, max_bytes)
        if inline and not self._inline(cursor, session_id, cuts[-1], to_seq, sized):
            return PageRead(info, to_seq, cuts, []), False
        return PageRead(info, to_seq, cuts, self._stored(cursor, session_id, cuts[-1], to_seq)), True

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        if self._sqlite:
            try:
                stored = self._reading_on_loop(self._stored_checked, session_id, from_seq, to_seq, True)
            except _Busy:
                stored = None
            if stored is not None:
                return stored
        found = await self._in_thread(self._stored_checked, session_id, from_seq, to_seq, False)
        assert found is not None
        return found

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
        return _bounded(cuts, to_seq, self._sql.sizes.run(cursor, **values).fetchall(), max_bytes), None

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
        return size <= INLINE_BYTES and not compressed

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
        return await self._read_any(self._cuts_checked, session_id, to_seq, max_messages)

    def _cuts_checked(self, cursor: Any, session_id: str, to_seq: int, max_messages: int) -> list[int]:
        self._require(cursor, session_id)
        return self._cuts(cursor, session_id, to_seq, max_messages)

    def _cuts(
        self, cursor: Any, session_id: str, to_seq: int, max_messages: int, pages: int | None = None
    ) -> list[int]:
        """The candidate cuts; with ``pages``, raise `_LongWalk` rather than read more message pages than that."""
        hidden = [HiddenRange(*row) for row in self._sql.hidden.run(cursor, id=session_id, to_seq=to_seq).fetchall()]
        messages = self._messages_desc(cursor, session_id, to_seq, pages=pages)
        return select_cuts(messages, hidden, to_seq=to_seq, max_messages=max_messages)

    def _pg_page_head(
        self, cursor: Any, session_id: str, through: int | None, before: int | None, max_messages: int
    ) -> PageRead | tuple[SessionInfo, int, list[int]]:
        """On PostgreSQL, the session, its hidden ranges and newest messages in one round trip; then the cuts."""
        cursor.execute(_PG_PAGE_HEAD, _pg_head_params(session_id, through, before))
        head = self._pg_head(cursor.fetchone(), session_id, through, before)
        if isinstance(head, PageRead):
            return head
        info, to_seq, hidden, first, more = head
        messages = self._messages_desc(cursor, session_id, to_seq, first, more)
        return info, to_seq, select_cuts(messages, hidden, to_seq=to_seq, max_messages=max_messages)

    def _pg_head(
        self, row: Any, session_id: str, through: int | None, before: int | None
    ) -> PageRead | tuple[SessionInfo, int, list[HiddenRange], list[MessageEntry], bool]:
        """A `_PG_PAGE_HEAD` row as the session, the page's end, hidden ranges, newest messages, and if more exist."""
        if row is None:
            raise SessionNotFoundError(session_id)
        header, owner, head, hidden_rows, message_rows = row
        info = SessionInfo(self._header(header, session_id), owner, head)
        to_seq = page_end(head, through, before)
        if to_seq <= 0 or (through is not None and through > head):
            return PageRead(info, to_seq, [], [])
        # Each statement reads its own snapshot: what a later append added past the head is left out.
        hidden = [HiddenRange(*entry) for entry in hidden_rows if entry[0] < to_seq]
        first = [MessageEntry(*entry) for entry in message_rows if entry[0] < to_seq]
        return info, to_seq, hidden, first, len(message_rows) == _MESSAGE_PAGE

    async def _pg_read_page(
        self, session_id: str, through: int | None, before: int | None, max_messages: int, max_bytes: int | None
    ) -> PageRead:
        """`read_page` on PostgreSQL, on the event loop: two statements when the newest 256 messages hold the cut."""
        async with self._pg_readers().cursor() as cursor:
            await cursor.execute(_PG_PAGE_HEAD, _pg_head_params(session_id, through, before))
            head = self._pg_head(await cursor.fetchone(), session_id, through, before)
            if isinstance(head, PageRead):
                return head
            info, to_seq, hidden, first, more = head
            try:
                cuts = select_cuts(_newest(first, more), hidden, to_seq=to_seq, max_messages=max_messages)
            except _LongWalk:
                cuts = []
            if len(cuts) > 1 and max_bytes is not None:
                values = {"id": session_id, "from_seq": cuts[-1], "to_seq": to_seq}
                await cursor.execute(self._sql.sizes.sql, self._sql.sizes.params(values))
                cuts = _bounded(cuts, to_seq, await cursor.fetchall(), max_bytes)
            if cuts:
                values = {"id": session_id, "from_seq": cuts[-1], "to_seq": to_seq}
                await cursor.execute(self._sql.stored.sql, self._sql.stored.params(values))
                rows: list[Any] = await cursor.fetchall()
        if not cuts:
            # The cut needs more messages than one read brings: page through them in a worker thread.
            read, _ = await self._in_thread(
                self._page_sync, session_id, through, before, max_messages, max_bytes, False
            )
            return read
        if sum(len(row[3]) for row in rows) < INLINE_BYTES and not any(row[2] for row in rows):
            return PageRead(info, to_seq, cuts, self._records(rows))
        return PageRead(info, to_seq, cuts, await anyio.to_thread.run_sync(self._records, rows))

    def _pg_readers(self) -> AsyncReaders:
        if self._async_readers is None:
            url = self._engine.url.set(drivername="postgresql")
            assert self._watchdog is not None
            self._async_readers = AsyncReaders(
                url.render_as_string(hide_password=False), _READERS_KEPT, watchdog=self._watchdog
            )
        return self._async_readers

    def _messages_desc(
        self,
        cursor: Any,
        session_id: str,
        to_seq: int,
        first: Sequence[MessageEntry] = (),
        more: bool = True,
        pages: int | None = None,
    ) -> Iterator[MessageEntry]:
        """Counted messages below ``to_seq``, newest first: ``first``, then, if ``more``, read a page at a time.

        With ``pages``, reading more message pages than that raises `_LongWalk`.
        """
        yield from first
        if not more:
            return
        below = first[-1].seq if first else to_seq
        while True:
            if pages is not None:
                if pages == 0:
                    raise _LongWalk
                pages -= 1
            rows = self._sql.messages.run(cursor, id=session_id, below=below).fetchall()
            for seq, group_start in rows:
                yield MessageEntry(seq, group_start)
            if len(rows) < _MESSAGE_PAGE:
                return
            below = rows[-1][0]

    # Readiness.

    async def check_ready(self) -> None:
        """Read the sessions table through a connection that works now.

        SQLite: a connection of the probe's own, opened by the file's path (never creating it),
        since connections opened before still read a file whose directory was removed or moved.
        PostgreSQL: the store's kept readers, as a page read uses them; one the server dropped
        is discarded and the next tried, so the answer is the database's, not a dead connection's.
        """
        if not self._sqlite:
            await self._probe_postgresql()
        elif self._sqlite_file() is None:
            await self._read_any(lambda cursor: cursor.execute(_PROBE).fetchall())
        else:
            await anyio.to_thread.run_sync(self._probe_sqlite)

    def _sqlite_file(self) -> str | None:
        """The database file's absolute path, or ``None`` for an in-memory database or a URI the engine interprets."""
        url = self._engine.url
        if url.database in (None, "", ":memory:") or url.query.get("uri"):
            return None
        return os.path.abspath(url.database)

    def _probe_sqlite(self) -> None:
        path = self._sqlite_file()
        assert path is not None
        try:
            # mode=rw: a missing file is an error, not a new empty database.
            connection = sqlite3.connect(f"file:{quote(path)}?mode=rw", uri=True, timeout=_PROBE_LOCK_WAIT)
            try:
                connection.execute(_PROBE).fetchall()
            finally:
                connection.close()
        except sqlite3.Error as exc:
            raise StoreError(f"store unavailable: {exc}") from exc

    async def _probe_postgresql(self) -> None:
        readers = self._pg_readers()
        failure: StoreError | None = None
        for _ in range(readers.kept + 1):
            try:
                async with readers.cursor() as cursor:
                    await cursor.execute(_PROBE)
                    await cursor.fetchall()
                return
            except StoreError as exc:
                # The failed connection is closed: the next try takes another kept one, then a new one.
                failure = exc
        assert failure is not None
        raise failure

    def listener(self) -> HeadListener | None:
        """On PostgreSQL, head notices from every process (one LISTEN connection); SQLite has none."""
        if self._sqlite:
            return None
        if self._listener is None:
            url = self._engine.url.set(drivername="postgresql")
            assert self._watchdog is not None
            self._listener = PostgresListener(
                url.render_as_string(hide_password=False), self._origin, watchdog=self._watchdog
            )
        return self._listener

    async def close(self) -> None:
        if self._async_readers is not None:
            await self._async_readers.close()
        await anyio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        self._writer.close()
        self._groups.close()
        while self._readers:
            with contextlib.suppress(Exception):
                self._readers.pop()[0].close()
        self._engine.dispose()
        if self._watchdog is not None:
            self._watchdog.close()


def _busy_ms(timeout: float) -> int:
    """SQLite's busy timeout, in whole milliseconds, for a bound in seconds."""
    return max(1, round(timeout * 1000))

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
from collections.abc import Collection, Sequence
from typing import Any

import anyio.to_thread
import sqlalchemy as sa
from sqlalchemy.engine import Engine

import persistence.sql.pages as pages
import persistence.sql.search as search
import persistence.sql.space as space
import persistence.sql.writes as writes
from codec import Event, SessionHeader, StoredRecord
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
    incarnated,
)
from persistence.batch import prepared
from persistence.call_bound import in_thread
from persistence.clock import now_ms
from persistence.errors import SearchUnsupportedError, StoreError
from persistence.notify import HeadListener
from persistence.rules import Life, next_plan
from persistence.search import SearchPage, SearchRequest
from persistence.sql.backend import Backend
from persistence.sql.deletion import Deletion, finish_purges
from persistence.sql.dialect import busy_ms
from persistence.sql.groups import SessionUnit
from persistence.sql.lines import Lines
from persistence.sql.migrations import migrate, refuse
from persistence.sql.postgres import PostgresBackend
from persistence.sql.schema import SCHEMA_VERSION, purges_table, stored_header
from persistence.sql.sqlite import SqliteBackend
from persistence.sql.statements import counting, expired, listing
from persistence.sql.streams import SqlStreams
from persistence.sql.tails import Tails
from persistence.sql.writes import Append, Writes
from persistence.synopsis import Synopsis

__all__ = ["SCHEMA_VERSION", "SqlStore"]


def _backend_for(name: str) -> type[Backend]:
    """The backend of a SQLAlchemy backend name; PostgreSQL's for any other, as a server database."""
    return SqliteBackend if SqliteBackend.serves(name) else PostgresBackend


class SqlStore(HistoryStore):
    """A store on a SQLAlchemy engine. Open it with `SqlStore.open`.

    A façade: it opens, migrates and closes, and calls its `Backend` with the units of
    `persistence.sql.writes` and `persistence.sql.pages`. The hot path runs compiled statements
    (`persistence.sql.prepared`) on DBAPI connections the backend keeps: appends and creates
    go through one writer thread that commits them in groups (`persistence.sql.groups`);
    reads take a kept reader connection. Where a read runs, and how a call is bounded, is the
    backend's (`persistence.sql.sqlite`, `persistence.sql.postgres`). Every call is bounded by
    ``timeout`` seconds, and past it raises `StoreError`.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        session_cache: int = DEFAULT_SESSION_CACHE,
        timeout: float = DEFAULT_STORE_TIMEOUT,
        indexed: bool = True,
    ) -> None:
        self._engine = engine
        self._timeout = timeout
        self._tails = Tails(session_cache)
        lines = Lines()
        backend = _backend_for(engine.url.get_backend_name())(
            engine, timeout, uuid.uuid4().hex[:12], lines=lines, tails=self._tails, indexed=indexed
        )
        self._backend = backend
        self._sql = backend.sql
        self._lines = lines
        self._deletion = Deletion(engine.dialect, backend.dialect)
        self._writes = Writes(
            backend.sql, backend.search, lines, self._tails, backend.dialect, self._deletion, backend.integrity_error
        )
        self._writer = backend.writer
        self.streams = SqlStreams(engine.dialect, backend)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        session_cache: int = DEFAULT_SESSION_CACHE,
        timeout: float = DEFAULT_STORE_TIMEOUT,
        indexed: bool = True,
    ) -> SqlStore:
        """Connect, create the schema on an empty database, refuse an unknown version; ``timeout`` bounds each call.

        ``indexed=False`` opens it without writing search passages (a benchmark's baseline):
        its searches are refused, and a later `reindex` catches the index up.
        """
        if not timeout > 0:
            raise ValueError(f"the store timeout must be positive, got {timeout!r}")
        return await anyio.to_thread.run_sync(cls._open_sync, url, session_cache, timeout, indexed)

    @classmethod
    def _open_sync(cls, url: str, session_cache: int, timeout: float, indexed: bool) -> SqlStore:
        try:
            backend = _backend_for(sa.make_url(url).get_backend_name())
            # Pinged at checkout: a pooled connection the database dropped meanwhile (the sweep's, a listing's)
            # is replaced, not handed to a read.
            engine = sa.create_engine(url, connect_args=backend.connect_args(timeout), pool_pre_ping=True)
        except (sa.exc.ArgumentError, ImportError) as exc:
            raise StoreError(f"not a usable database URL: {exc}") from exc
        backend.prepare_engine(engine, busy_ms(timeout))
        store = cls(engine, session_cache=session_cache, timeout=timeout, indexed=indexed)
        try:
            store._backend.opened()
            store._migrate()
        except BaseException:
            store._backend.close_sync()
            raise
        return store

    def _migrate(self) -> None:
        # Beside other processes, a cut purge (up to a session's every record) would stall their writes
        # for as long as it ran: it is left to `recover`, in batches, in the sweep's turn.
        alone = self._backend.alone_now()
        with self._backend.connections.write() as conn:
            found = migrate(conn, self._backend.dialect, stored_header, self._lines.unpack)
            if found in (None, str(SCHEMA_VERSION)) and alone:
                finish_purges(conn)
        refuse(found)

    # Sessions.

    async def create_session(self, header: SessionHeader, *, owner: str = DEFAULT_OWNER) -> SessionInfo:
        header = incarnated(header)
        row = writes.new_row(header, owner, touched := now_ms())
        await self._writer.run(lambda cursor: writes.create(cursor, self._writes, row), header.id)
        return SessionInfo(header, owner, -1, touched)

    async def get_session(self, session_id: str) -> SessionInfo:
        return await self._backend.read(pages.info, self._sql, session_id)

    async def delete_session(self, session_id: str, *, life: Life | None = None) -> list[str]:
        tree = await self._backend.read(self._deletion.tree, session_id)
        forget = self._tails.forget
        unit = SessionUnit(session_id, lambda cursor: self._deletion.run(cursor, session_id, forget, life), tree)
        deleted: list[str]
        deleted, left = await self._writer.run(unit, session_id)
        await self._deletion.purge(left, self._backend.purge)
        return deleted

    async def close_session(self, session_id: str, *, closed_at: int, life: Life | None = None) -> SessionInfo:
        # Through the writer, so that it is ordered with the session's appends and durable when it returns.
        unit = SessionUnit(session_id, lambda cursor: writes.close(cursor, self._writes, session_id, closed_at, life))
        return await self._writer.run(unit, session_id)

    async def children(self, parent_id: str) -> list[SessionHeader]:
        return await self._backend.read(pages.children, self._sql, parent_id)

    async def _rows(self, query: sa.Select[Any]) -> Sequence[sa.Row[Any]]:
        backend = self._backend
        return await in_thread(backend.call_bound(), self._rows_sync, query, outstanding=backend.outstanding)

    def _rows_sync(self, query: sa.Select[Any]) -> Sequence[sa.Row[Any]]:
        with self._backend.connections.read() as conn:
            return conn.execute(query).all()

    async def list_sessions(
        self,
        owner: str,
        *,
        limit: int,
        before: SessionKey | None = None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> list[SessionSummary]:
        if limit < 1:
            return []
        rows = await self._rows(listing(owner, limit, before, closed, match))
        return [
            SessionSummary(
                r.id,
                r.created_at,
                r.head_seq,
                r.child_count,
                r.closed_at,
                r.expires_at,
                r.touched_at,
                Synopsis(r.title, r.last_event_at, r.input_tokens, r.output_tokens),
            )
            for r in rows
        ]

    async def count_sessions(
        self,
        owner: str,
        *,
        now: int,
        retention_ms: int | None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> int:
        rows = await self._rows(counting(owner, now, retention_ms, closed, match))
        return int(rows[0][0])

    async def synopsis(self, session_id: str) -> Synopsis:
        return await self._backend.read(pages.synopsis, self._sql, session_id)

    async def expired(
        self, *, now: int, retention_ms: int | None, limit: int | None, skip: Collection[str] = ()
    ) -> list[str]:
        return [row.id for row in await self._rows(expired(now, retention_ms, limit, skip))]

    async def search(self, request: SearchRequest) -> SearchPage:
        if not self._backend.search.indexed:
            raise SearchUnsupportedError("this store was opened without its search index")
        backend = self._backend
        return await in_thread(backend.call_bound(), self._search_sync, request, outstanding=backend.outstanding)

    def _search_sync(self, request: SearchRequest) -> SearchPage:
        # The hits' snippets are built here too, in the worker thread: a page of them may cost milliseconds.
        found = self._backend.search
        with self._backend.connections.read() as conn:
            rows = conn.execute(found.query(request)).all()
            opened = conn.execute(found.open_query(request)).all() if found.defers else None
        return search.page(request, rows, opened)

    async def reindex(self) -> int:
        """Every session's passages rebuilt from its records, each session in a write transaction of its own."""
        return await anyio.to_thread.run_sync(self._reindex_sync)

    def _reindex_sync(self) -> int:
        total = 0
        after: str | None = None
        while True:
            with self._backend.connections.read() as conn:
                found = search.session_ids(conn, after)
            if not found:
                return total
            for session_id in found:
                with self._backend.connections.write() as conn:
                    total += search.rebuild_session(conn, self._backend.search, self._lines.unpack, session_id)
            after = found[-1]

    def sweeping(self) -> contextlib.AbstractAsyncContextManager[bool]:
        return self._backend.sweeping()

    async def recover(self) -> None:
        """Finish the purges a process cut (it died, or left them at open), a batch at a time."""
        rows = await self._rows(sa.select(purges_table.c.session_id))
        if rows:
            await self._deletion.purge([row.session_id for row in rows], self._backend.purge)

    # Appends.

    async def append(self, session_id: str, events: Sequence[Event], *, life: Life | None = None) -> AppendResult:
        # Packing is pure work: done before the writer, never inside its transaction.
        batch = await prepared(events)
        hoped = next_plan([event.seq for event in events]) if batch is not None else None
        # The backend's group writer commits it, beside the appends that arrive with it.
        return await self._writer.run(Append(self._writes, session_id, events, batch, hoped, life), session_id)

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
        return await self._backend.read_page(session_id, through, before, max_messages, max_bytes)

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        return await self._backend.read_stored(session_id, from_seq, to_seq)

    async def page_cuts(self, session_id: str, *, to_seq: int, max_messages: int) -> list[int]:
        return await self._backend.read(pages.cuts_checked, self._sql, session_id, to_seq, max_messages)

    async def check_ready(self) -> None:
        """Read the sessions table through a connection that works now (the backend says which)."""
        await self._backend.check_ready()

    async def size(self) -> int | None:
        return await anyio.to_thread.run_sync(self._backend.size)

    async def vacuum(self) -> None:
        backend = self._backend
        await anyio.to_thread.run_sync(space.vacuum, self._engine, backend.dialect, backend.alone())

    def listener(self) -> HeadListener | None:
        """Head notices from every process sharing the database (none for an in-memory SQLite database)."""
        return self._backend.listener()

    async def close(self) -> None:
        await self._backend.close()
        await anyio.to_thread.run_sync(self._backend.close_sync)

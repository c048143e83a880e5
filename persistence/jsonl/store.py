"""The JSONL file store: one directory per session, in the deepseek-harness line format.

Layout under the root::

    .history-store.json          format version and compression mode of the root
    <encoded id>/session.jsonl   header line, then one storage record per line
                                 (session.jsonl.zst in zstd mode: one checksummed frame per batch)
    <encoded id>/index.jsonl     sidecar index: a JSON head line, then one binary entry per batch
    <encoded id>/owner           the owner principal
    <encoded id>/closed          the session's closedAt, once it is closed
    <encoded id>/journal         the rollback journal of a sealing rewrite (empty when none is under way)
    <encoded id>/lock, gate      the session's lock, and the gate its holders pass first
    .history-notices.db          the notices told to the other processes (`persistence.jsonl.notices`),
    .history-notices.db-write    and the turn its writers take
    .turn                        the turn at the sweep, held by one process at a time

An append writes its index entry first and fsyncs it, then writes the batch to the log
and fsyncs that. So on open, a last index entry that reaches past the end of the log
marks a torn batch, which is cut whole; a committed batch is never dropped. Bytes after
the last indexed batch (written by another tool) are scanned and kept, and a missing or
unreadable index is rebuilt from the log: the log always wins.

An append that seals the open run (`persistence.sealing`) rewrites the log from the start
of the batch that holds the run's first piece; a rollback journal (`persistence.jsonl.journal`) makes
that all or nothing. Writers hold the session's lock exclusively and readers share it, so
no read sees a log mid-rewrite; every holder passes the session's gate first, so readers
that arrive after a waiting writer queue behind it (`persistence.jsonl.files.acquire`). An
append's unit tries its lock in the writer thread without waiting; a busy lock is waited
for in a worker thread of the append's own, which joins the next group with it, so the
writer thread never waits on a lock, except the notices log's, held for one small insert.

`JsonlStore` holds the sessions' loaded states and their lifecycle (create, close, delete),
and hands the rest to one module per job: `persistence.jsonl.appends` (the append unit in the
writer thread), `persistence.jsonl.reads` (records and pages), `persistence.jsonl.listing`,
`persistence.jsonl.deletion` and `persistence.jsonl.recovery` (loading a session's files).

A log placed in a root by hand (a recorded fixture, say) is served as it is: lines that
omit ``seq``/``time`` get them rebuilt when read, and its owner is `DEFAULT_OWNER`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import msgspec

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
    incarnated,
)
from persistence.batch import prepared
from persistence.errors import SessionExistsError, SessionNotFoundError, StoreError
from persistence.group_commit import GroupCommit, unavailable
from persistence.jsonl.appends import Appends
from persistence.jsonl.deletion import delete_tree, finish_deletes, tree_size
from persistence.jsonl.file_groups import FileGroups
from persistence.jsonl.files import SessionLock, acquire, fsync_path, locked, write_atomic, write_file
from persistence.jsonl.index import INDEX_VERSION, IndexedSession, IndexHead, index_fresh
from persistence.jsonl.layout import (
    CLOSED_NAME,
    FORMAT_VERSION,
    INDEX_NAME,
    MODES,
    OWNER_NAME,
    ROOT_MARKER,
    closed_at,
    encode_segment,
    open_root,
    read_marker,
    touched_at,
)
from persistence.jsonl.listing import Listing
from persistence.jsonl.notices import TURN_NAME, Sidecar, SidecarListener
from persistence.jsonl.reads import Reads
from persistence.jsonl.recovery import Loader
from persistence.jsonl.synopses import of_state
from persistence.notify import HeadListener, notice
from persistence.rules import Life, check_life
from persistence.state import KeyedLocks, Lru
from persistence.state.flocks import FileTurn
from persistence.synopsis import Synopsis

__all__ = ["JsonlStore"]

T = TypeVar("T")
Ids = Collection[str]


class JsonlStore(HistoryStore):
    """Sessions as JSONL logs under one root directory. Open it with `JsonlStore.open`."""

    def __init__(
        self,
        root: Path,
        compression: str,
        *,
        session_cache: int = DEFAULT_SESSION_CACHE,
        timeout: float = DEFAULT_STORE_TIMEOUT,
    ) -> None:
        self._root = root
        # Names this store instance in its notices: its own listener passes over them.
        self._sidecar = Sidecar(root, uuid.uuid4().hex[:12], timeout)
        self._listener: SidecarListener | None = None
        self._zstd = compression == "zstd"
        self._contexts = ZstdContexts(level=3, write_checksum=True)
        self._log_name = "session.jsonl.zst" if self._zstd else "session.jsonl"
        self._loader = Loader(self._zstd, self._contexts, self._log_name)
        # Loaded state of the sessions used last; an evicted one is loaded again from its index when next used.
        self._states: Lru[str, IndexedSession] = Lru(session_cache)
        # Headers and owners (by directory name) never change: these only save re-reading them for listings.
        self._headers: Lru[str, tuple[SessionHeader | None]] = Lru(session_cache)
        self._owners: Lru[str, str] = Lru(session_cache)
        self._listing = Listing(
            root,
            self._loader,
            states=self._states,
            state=self._state,
            synopsis=self._synopsis_sync,
            headers=self._headers,
            owners=self._owners,
        )
        self._locks = KeyedLocks()
        self._groups = FileGroups(self._sidecar.tell)
        self._writer = GroupCommit(self._groups, name="history-jsonl-writer")
        # The sessions of a store that failed closed: their files may look whole in the page cache and not be,
        # so their journals are undone when they load.
        self._distrusted: set[str] = set()
        self._reads = Reads(
            zstd=self._zstd,
            contexts=self._contexts,
            log_name=self._log_name,
            states=self._states,
            state=self._state,
            directory=self._directory,
        )
        self._appends = Appends(
            root=root,
            loader=self._loader,
            log_name=self._log_name,
            states=self._states,
            state=functools.partial(self._state, holding_lock=True),
            stored=self._reads.stored,
            directory=self._directory,
            distrusted=self._distrusted,
            origin=self._sidecar.origin,
        )

    @classmethod
    async def open(
        cls,
        root: str | Path,
        *,
        compression: str | None = None,
        session_cache: int = DEFAULT_SESSION_CACHE,
        timeout: float = DEFAULT_STORE_TIMEOUT,
    ) -> JsonlStore:
        """Open (creating if needed) a root; a root keeps the compression mode it was created with.

        ``None`` takes the mode the root records (``none`` for a new root); a mode that differs
        from the recorded one is refused. ``timeout`` bounds a wait for the notices log's turn.
        """
        if compression is not None and compression not in MODES:
            raise StoreError(f"unknown JSONL compression {compression!r}; expected one of {', '.join(MODES)}")
        return await anyio.to_thread.run_sync(cls._open_sync, Path(root), compression, session_cache, timeout)

    @classmethod
    def _open_sync(cls, root: Path, compression: str | None, session_cache: int, timeout: float) -> JsonlStore:
        compression = open_root(root, compression)
        store = cls(root, compression, session_cache=session_cache, timeout=timeout)
        store._finish_deletes()
        return store

    def _finish_deletes(self) -> int:
        return finish_deletes(self._root, self._loader.incarnation_in, self._sidecar.deleted)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread; an `OSError` it meets comes out as a `StoreError` (503)."""
        return await anyio.to_thread.run_sync(functools.partial(_translated, fn, *args))

    def _directory(self, session_id: str) -> Path:
        return self._root / encode_segment(session_id)

    # Sessions.

    async def create_session(self, header: SessionHeader, *, owner: str = DEFAULT_OWNER) -> SessionInfo:
        return await self._run(self._create_sync, header, owner)

    def _create_sync(self, header: SessionHeader, owner: str) -> SessionInfo:
        header = incarnated(header)
        self._forget(header.id)  # what was kept of an earlier incarnation (deleted by another process, say)
        directory = self._directory(header.id)
        if directory.exists():
            raise SessionExistsError(header.id)
        staging = self._root / f".tmp-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            line = encode(header) + b"\n"
            block = self._loader.frame(line)
            write_file(staging / self._log_name, block)
            head = IndexHead(INDEX_VERSION, "zstd" if self._zstd else "none", len(block))
            write_file(staging / INDEX_NAME, encode(head) + b"\n")
            write_file(staging / OWNER_NAME, owner.encode())
            fsync_path(staging)
            try:
                os.rename(staging, directory)
            except OSError as exc:
                raise SessionExistsError(header.id) from exc
            fsync_path(self._root)
        finally:
            if staging.exists():
                for child in staging.iterdir():
                    child.unlink()
                staging.rmdir()
        return SessionInfo(header, owner, -1, touched_at(directory))

    async def get_session(self, session_id: str) -> SessionInfo:
        state = self._fresh(session_id)
        if state is None:
            state = await self._run(self._state, session_id)
        return state.info()

    def _fresh(self, session_id: str) -> IndexedSession | None:
        """The loaded state when its index has not grown since, found without leaving the event loop; else ``None``."""
        state = self._states.get(session_id)
        if state is None or not index_fresh(state):
            return None
        state.recheck_closed()
        return state

    async def children(self, parent_id: str) -> list[SessionHeader]:
        return await self._run(self._listing.children, parent_id)

    async def list_sessions(
        self,
        owner: str,
        *,
        limit: int,
        before: SessionKey | None = None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> list[SessionSummary]:
        return await self._run(self._listing.sessions, owner, limit, before, closed, match)

    async def count_sessions(
        self,
        owner: str,
        *,
        now: int,
        retention_ms: int | None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> int:
        return await self._run(self._listing.count, owner, now, retention_ms, closed, match)

    async def synopsis(self, session_id: str) -> Synopsis:
        state = self._fresh(session_id)
        if state is not None and state.synopsis is not None:
            return state.synopsis
        return await self._run(self._synopsis_sync, session_id)

    def _synopsis_sync(self, session_id: str) -> Synopsis:
        with self._reads.reading(session_id) as state:
            return of_state(state, self._reads.stored)

    async def expired(self, *, now: int, retention_ms: int | None, limit: int | None, skip: Ids = ()) -> list[str]:
        return await self._run(self._listing.expired, now, retention_ms, limit, frozenset(skip))

    def _state(self, session_id: str, *, holding_lock: bool = False) -> IndexedSession:
        """The session's state, loaded on first use and reloaded when another writer grew the index.

        ``holding_lock`` says the caller already holds the session's lock (a second flock would wait on it): a
        writer, whose state is then checked against the header on disk too (`Loader.same_life`).
        """
        state = self._states.get(session_id)
        directory = self._directory(session_id)
        if state is not None and index_fresh(state) and (not holding_lock or self._loader.same_life(state)):
            state.recheck_closed()
            return state
        if holding_lock:
            state = self._load(directory, session_id)
        else:
            with locked(directory, session_id):
                state = self._load(directory, session_id)
        self._states.put(session_id, state)
        return state

    def _load(self, directory: Path, session_id: str) -> IndexedSession:
        state = self._loader.load(directory, session_id, distrust=session_id in self._distrusted)
        state.learn_closed(closed_at(directory))
        return state

    # Appends.

    async def append(self, session_id: str, events: Sequence[Event], *, life: Life | None = None) -> AppendResult:
        self._appends.check_writable()
        async with self._locks.hold(session_id):
            batch = await prepared(events)
            if session_id not in self._states:
                # Load a cold session here, in a worker thread, not in the writer that every session waits on;
                # and before the lock is held, which must never wait for a worker thread that readers hold.
                # (One that another process grew since is read again in the writer, under the lock.)
                await self._run(self._state, session_id)
            lock: SessionLock | None = None
            try:
                while True:
                    result = await self._writer.run(
                        functools.partial(
                            self._appends.unit, lock=lock, session_id=session_id, events=events, batch=batch, life=life
                        ),
                        session_id,
                    )
                    if result is not None:
                        return result
                    lock = await self._wait_lock(session_id)
            finally:
                # Already released by the group when the unit ran; this covers a unit that never did.
                if lock is not None:
                    lock.release()

    async def delete_session(self, session_id: str, *, life: Life | None = None) -> list[str]:
        self._appends.check_writable()
        tree = await self._run(self._tree, session_id)
        async with contextlib.AsyncExitStack() as held:
            # In one order, so two deletes of overlapping trees never wait on each other.
            for gone in sorted(tree):
                await held.enter_async_context(self._locks.hold(gone))
            return await self._run(self._delete_sync, session_id, life)

    def _tree(self, session_id: str) -> list[str]:
        # Its header alone: a session whose log is corrupt can be deleted too.
        if self._loader.peek_header(self._directory(session_id)) is None:
            raise SessionNotFoundError(session_id)
        return self._listing.tree(session_id)

    def _delete_sync(self, session_id: str, life: Life | None) -> list[str]:
        """Rename the tree's directories away under their locks (`persistence.jsonl.deletion`), if it is ``life``."""
        tree = delete_tree(
            self._root, session_id, self._tree, self._loader.peek_header, self._forget, life, tell=self._sidecar.deleted
        )
        for gone in tree:
            self._forget(gone)
        return tree

    def _forget(self, session_id: str | None) -> None:
        """Drop what is kept of a session, or of every session (``None``: notices may have been missed)."""
        if session_id is None:
            self._states.clear()
            self._listing.clear()
            return
        self._states.pop(session_id)
        self._listing.forget(encode_segment(session_id))

    async def close_session(self, session_id: str, *, closed_at: int, life: Life | None = None) -> SessionInfo:
        self._appends.check_writable()
        async with self._locks.hold(session_id):
            return await self._run(self._close_sync, session_id, closed_at, life)

    def _close_sync(self, session_id: str, at: int, life: Life | None) -> SessionInfo:
        """Write the `CLOSED_NAME` file, atomically and durably, under the lock, unless a close came first."""
        with locked(self._directory(session_id), session_id):
            state = self._state(session_id, holding_lock=True)
            check_life(session_id, life, state.header, state.owner)
            found = closed_at(state.directory)
            if found is None:
                write_atomic(state.directory / CLOSED_NAME, str(at).encode())
                found = at
                self._sidecar.tell([notice(session_id, state.head, self._sidecar.origin, closed=True)])
            state.learn_closed(found)
            return state.info()

    async def _wait_lock(self, session_id: str) -> SessionLock:
        # Shielded: a lock taken in the thread must come back here to be released.
        with anyio.CancelScope(shield=True):
            lock = await self._run(acquire, self._directory(session_id), session_id)
        return lock

    # Reads.

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        return await self._run(self._reads.read_stored, session_id, from_seq, to_seq)

    async def read_page(
        self,
        session_id: str,
        *,
        through: int | None,
        before: int | None,
        max_messages: int,
        max_bytes: int | None = None,
    ) -> PageRead:
        # A loaded session's small page is read on the event loop: the index is in memory and the
        # records are one pread, which costs less than the hop to a worker thread.
        read = _translated(self._reads.page_inline, session_id, through, before, max_messages, max_bytes)
        if read is None:
            read = await self._run(self._reads.page, session_id, through, before, max_messages, max_bytes)
        return read

    async def page_cuts(self, session_id: str, *, to_seq: int, max_messages: int) -> list[int]:
        return await self._run(self._reads.cuts, session_id, to_seq, max_messages)

    # Readiness.

    async def check_ready(self) -> None:
        """Read the root's marker through its path and list the root, as a new read would find them; and check
        that the notices log this process writes is still the root's."""
        await self._run(self._check_ready_sync)

    def _check_ready_sync(self) -> None:
        self._appends.check_writable()
        try:
            found = read_marker((self._root / ROOT_MARKER).read_bytes())
            with os.scandir(self._root) as entries:
                next(entries, None)
        except (OSError, msgspec.DecodeError) as exc:
            raise StoreError(f"store unavailable: {exc}") from exc
        if (found.format, found.compression) != (FORMAT_VERSION, "zstd" if self._zstd else "none"):
            raise StoreError(f"store unavailable: {self._root / ROOT_MARKER} now describes another store")
        self._sidecar.check()

    # Other processes.

    def listener(self) -> HeadListener:
        if self._listener is None:
            self._listener = SidecarListener(self._sidecar, deleted=self._forget)
        return self._listener

    def sweeping(self) -> contextlib.AbstractAsyncContextManager[bool]:
        return FileTurn(self._root / TURN_NAME).taking()

    async def recover(self) -> None:
        """Finish the deletes of a process that died (and tell them), as an open does."""
        await self._run(self._finish_deletes)

    async def size(self) -> int | None:
        return await self._run(tree_size, self._root)

    async def vacuum(self) -> None:
        await self._run(self._finish_deletes)

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self._writer.close)
        self._groups.close()
        self._sidecar.close()
        self._states.clear()
        self._listing.clear()


def _translated(fn: Callable[..., T], *args: Any) -> T:
    try:
        return fn(*args)
    except OSError as exc:
        raise unavailable(exc) from exc

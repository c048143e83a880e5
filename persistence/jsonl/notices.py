"""The JSONL root's notices: the log of `persistence.notice_log` in a SQLite file of the root's own (§7.2, §7.6).

A JSONL root has no database to put its notices in, so it keeps one beside the sessions,
``<root>/.history-notices.db`` (hidden: listings skip dot names). A row is written once
its change is durable and before the session's lock is let go, so the rows of one session
are in the order of its changes, and a notice never tells of a change that could still be
lost. Writers of every process take turns at the file through a `FileGate` on
``<root>/.history-notices.db-write``: one short transaction per group, with no fsync
(``synchronous=NORMAL``: a power loss can lose the newest rows, and every process then
starts again, re-reading what it follows).

A process can die between a change's last fsync and its row. Its restarted listener adds
a `JOINED` row, and every other process re-reads the heads of what it follows. A row that
cannot be written (a full disk, the gate held too long) cannot undo the change, which is
durable: the store logs it, reports its notifier ``reconnecting``, and keeps trying to add
a `JOINED` row, which mends what the others missed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import anyio
import anyio.to_thread

import persistence.notice_log as notice_log
from persistence.errors import StoreError
from persistence.jsonl.deletion import Doomed
from persistence.notice_log import JOINED, LogListener
from persistence.notify import OnConnect, OnHead, backoff, notice
from persistence.state.flocks import FileGate

__all__ = ["SIDECAR_NAME", "TURN_NAME", "Sidecar", "SidecarListener"]

logger = logging.getLogger(__name__)

SIDECAR_NAME: Final = ".history-notices.db"
TURN_NAME: Final = ".turn"
# How often a listener looks whether a write of its store's failed: the mending then backs off (`backoff`).
_LOOK_S: Final = 0.1


class Sidecar:
    """The root's notices log, opened on first use, so a read-only command never creates it."""

    def __init__(self, root: Path, origin: str, timeout: float) -> None:
        self.path = root / SIDECAR_NAME
        self.origin = origin
        self._timeout = timeout
        self._gate = FileGate(root / f"{SIDECAR_NAME}-write")
        # The writer thread, a close's or a delete's worker thread, and the mending share one connection.
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._inode: int | None = None
        self._failed = False

    def tell(self, payloads: Sequence[str]) -> None:
        """Add ``payloads`` as rows, in one transaction; a failure is logged and kept (`failed`), never raised.

        Called once the change is durable: nothing can undo it now, so its caller succeeds whatever happens here.
        """
        if payloads:
            self._kept(self._write, payloads)

    def deleted(self, doomed: list[Doomed]) -> None:
        """Tell that the sessions of a delete's entries are gone (an old intent's, which name none, go untold)."""
        told = [d for d in doomed if d.session_id]
        self.tell([notice(d.session_id, -1, self.origin, deleted=True, incarnation=d.incarnation) for d in told])

    def prepare(self) -> None:
        """Open the file, creating it, so that a listener can read it; a failure is kept (`failed`), never raised."""
        self._kept(self._write, ())

    def joined(self) -> None:
        """Add a `JOINED` row: every other process re-reads the heads it follows. Raises `sqlite3.Error` on failure."""
        try:
            self._write([notice(JOINED, -1, self.origin)])
        except (OSError, StoreError) as exc:
            raise sqlite3.OperationalError(str(exc)) from exc
        self._failed = False

    def failed(self) -> bool:
        """Whether a write failed and no `JOINED` row has been written since."""
        return self._failed

    def check(self) -> None:
        """Raise `StoreError` when the path no longer names the file this process opened (removed, replaced).

        For good: this process never opens the file now at the path, since SQLite's shared memory
        (``-shm``) beside it is still the old file's, and only a restart of every process of the root is safe.
        """
        if self._inode is None:
            return
        try:
            same = os.stat(self.path).st_ino == self._inode
        except OSError:
            same = False
        if not same:
            raise StoreError(f"store unavailable: {self.path} was removed or replaced; restart its processes")

    def close(self) -> None:
        with self._lock:
            self._drop()
        self._gate.close()

    def _kept(self, write: Callable[[Sequence[str]], None], payloads: Sequence[str]) -> None:
        try:
            write(payloads)
        except (sqlite3.Error, OSError, StoreError) as exc:
            self._failed = True
            logger.error("JSONL notices %s: a write failed; the others resync once one works: %s", self.path, exc)

    def _write(self, payloads: Sequence[str]) -> None:
        """``payloads`` in one transaction of the file's (opened first if need be); none only opens it."""
        with self._lock, self._gate.held(self._timeout):
            db = self._open()
            if not payloads:
                return
            try:
                db.execute("BEGIN IMMEDIATE")
                notice_log.tell(db.cursor(), self.origin, payloads)
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise

    def _open(self) -> sqlite3.Connection:
        """The connection, made (and the file with its table created) on first use; called under the gate."""
        if self._db is None:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=self._timeout)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute(notice_log.CREATE)
                self._inode = os.stat(self.path).st_ino
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def _drop(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
            self._inode = None


class SidecarListener(LogListener):
    """The root's `LogListener`, which says ``reconnecting`` while a write of ours failed, and mends it.

    Its (re)connects add a `JOINED` row; between them, a failed write is mended by adding one, with backoff.
    """

    def __init__(self, sidecar: Sidecar, *, deleted: Callable[[str | None], object]) -> None:
        self._sidecar = sidecar
        self._state = "connecting"
        super().__init__(sidecar.path, sidecar.origin, deleted=deleted, announce=sidecar.joined)

    @property
    def state(self) -> str:
        return "reconnecting" if self._sidecar.failed() else self._state

    @state.setter
    def state(self, value: str) -> None:
        self._state = value

    async def run(self, on_head: OnHead, on_connect: OnConnect) -> None:
        # The listener opens the file as it is, never creating it: made here, or by the mending when that fails.
        await anyio.to_thread.run_sync(self._sidecar.prepare)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._mend)
            await super().run(on_head, on_connect)

    async def _mend(self) -> None:
        failures = 0
        while True:
            await anyio.sleep(backoff(failures) if failures else _LOOK_S)
            if not self._sidecar.failed():
                failures = 0
                continue
            try:
                await anyio.to_thread.run_sync(self._sidecar.joined)
            except sqlite3.Error as exc:
                failures += 1
                logger.warning("JSONL notices %s: still failing (%s)", self._sidecar.path, exc)
            else:
                failures = 0
                logger.info("JSONL notices %s: writable again; the other processes resync", self._sidecar.path)

"""The SQL backend's kept reader connections: a read in a transaction on one, in the calling thread, within the bound.

SQLite reads on the event loop first and, should a writer hold the lock, again in a worker
thread (`Busy`); PostgreSQL's session reads take a worker thread. A reader is kept for the
next read unless the watchdog cut it; one that fails while kept may have been dropped by the
server while it waited (a restart), and the others with it: they all go, and the read runs
once more on a new connection, so it gets the database's answer rather than a dead socket's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import anyio.to_thread
import sqlalchemy as sa

from persistence.call_bound import Outstanding, in_thread
from persistence.errors import StoreError
from persistence.sql.connections import failure
from persistence.sql.dialect import READERS_KEPT, Busy, Deadline

__all__ = ["KeptReaders"]

T = TypeVar("T")


class _KeptDied(Exception):
    """A kept reader failed: perhaps the server dropped it while it waited."""


class KeptReaders:
    """Up to `READERS_KEPT` reader connections, and the reads on them.

    The backend says how: ``connect(busy_ms)`` opens a reader that waits ``busy_ms`` for a lock
    (0: never, raising `Busy`) and returns it with the wait it has; ``wait(connection, busy_ms)``
    changes a kept one's wait (``None``: readers do not wait for locks); ``begin`` opens each
    read's transaction (``None``: each statement its own snapshot); ``lock_taken(exc)`` says a
    read failed only for another connection's lock; ``bound`` bounds each read, and ``call_bound``
    a whole call in a worker thread (`persistence.call_bound`).
    """

    def __init__(
        self,
        connect: Callable[[int], tuple[Any, int]],
        *,
        wait: Callable[[Any, int], None] | None,
        begin: str | None,
        lock_taken: Callable[[Exception], bool],
        bound: Callable[[Any], AbstractContextManager[Deadline]],
        driver_error: type[Exception],
        busy_ms: int,
        timeout: float,
        call_bound: float | None,
        outstanding: Outstanding,
    ) -> None:
        self._connect = connect
        self._wait = wait
        self._begin = begin
        self._lock_taken = lock_taken
        self._bound = bound
        self._driver_error = driver_error
        self._busy_ms = busy_ms
        self._timeout = timeout
        self._call_bound = call_bound
        self._outstanding = outstanding
        # Each kept connection, with the busy timeout (ms) it has now (SQLite's; unused on PostgreSQL).
        self.connections: list[tuple[Any, int]] = []
        self._threads: anyio.CapacityLimiter | None = None
        # Set once the store closes: a read its caller gave up on (`persistence.call_bound`) may end
        # after that, and its connection is then closed, not kept where no one will close it.
        self._closed = False

    def reading(self, work: Callable[..., T], *args: Any) -> T:
        """``work(cursor, *args)`` in a read transaction on a kept reader, in the calling thread, within the bound."""
        return self._read_on(work, args, self._busy_ms)

    def reading_on_loop(self, work: Callable[..., T], *args: Any) -> T:
        """`reading` on the event loop (SQLite): never waiting for a lock, it raises `Busy` instead."""
        return self._read_on(work, args, 0)

    async def in_thread(self, work: Callable[..., T], *args: Any) -> T:
        """`reading` in a worker thread, as many at once as readers are kept."""
        if self._threads is None:
            # As many reads at once as connections are kept, so no read opens a connection of its own.
            self._threads = anyio.CapacityLimiter(READERS_KEPT)
        return await in_thread(
            self._call_bound, self.reading, work, *args, limiter=self._threads, outstanding=self._outstanding
        )

    def _read_on(self, work: Callable[..., T], args: tuple[Any, ...], busy_ms: int) -> T:
        try:
            return self._read_once(work, args, busy_ms, kept=bool(self.connections))
        except _KeptDied:
            # A kept reader the server had dropped while it waited (a restart): the others went
            # with it. Once more, on a new connection, so the read gets the database's answer.
            self.drop()
            return self._read_once(work, args, busy_ms, kept=False)

    def _read_once(self, work: Callable[..., T], args: tuple[Any, ...], busy_ms: int, *, kept: bool) -> T:
        connection, busy = self.connections.pop() if kept and self.connections else (None, busy_ms)
        deadline: Deadline | None = None
        try:
            if connection is None:
                connection, busy = self._connect(busy_ms)
            if busy != busy_ms and self._wait is not None:
                self._wait(connection, busy_ms)
                busy = busy_ms
            with self._bound(connection) as deadline:
                result = self._run(connection, work, args)
        except (self._driver_error, sa.exc.DBAPIError) as exc:
            if connection is not None and busy_ms == 0 and self._lock_taken(exc):
                # The connection is sound: only the lock was taken.
                self.keep(connection, busy)
                raise Busy from exc
            if connection is not None:
                with contextlib.suppress(Exception):
                    connection.close()
            cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
            if kept and not (deadline is not None and deadline.expired):
                raise _KeptDied from exc
            raise StoreError(f"store unavailable: {failure(cause, deadline, self._timeout)}") from exc
        except BaseException:
            if connection is not None:
                self.keep(connection, busy, deadline)
            raise
        self.keep(connection, busy, deadline)
        return result

    def _run(self, connection: Any, work: Callable[..., T], args: tuple[Any, ...]) -> T:
        cursor = connection.cursor()
        if self._begin is None:
            return work(cursor, *args)
        cursor.execute(self._begin)
        try:
            return work(cursor, *args)
        finally:
            connection.rollback()

    def keep(self, connection: Any, busy: int, deadline: Deadline | None = None) -> None:
        """Keep a reader for the next read, unless the store closed, the watchdog cut it, or enough are kept."""
        if self._closed or (deadline is not None and deadline.expired):
            # The store closed, or the watchdog cut it: the next read opens a new one.
            with contextlib.suppress(Exception):
                connection.close()
        elif len(self.connections) < READERS_KEPT:
            self.connections.append((connection, busy))
        else:
            connection.close()

    def drop(self) -> None:
        """Close every kept reader."""
        while self.connections:
            with contextlib.suppress(Exception):
                self.connections.pop()[0].close()

    def close(self) -> None:
        """Close every kept reader, and any that a read still running would keep."""
        self._closed = True
        self.drop()

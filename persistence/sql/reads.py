"""The SQL store's kept reader connections: a read in a transaction on one, in the calling thread, within the bound.

SQLite reads on the event loop first and, should a writer hold the lock, again in a worker
thread (`Busy`); PostgreSQL's session reads take a worker thread. A reader is kept for the
next read unless the watchdog cut it; one that fails while kept may have been dropped by the
server while it waited (a restart), and the others with it: they all go, and the read runs
once more on a new connection, so it gets the database's answer rather than a dead socket's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread
import sqlalchemy as sa

from persistence.call_bound import Outstanding, in_thread
from persistence.errors import StoreError
from persistence.sql.dialect import READERS_KEPT, Busy, Deadline

if TYPE_CHECKING:
    from persistence.sql.dialect import Dialect

__all__ = ["KeptReads"]

T = TypeVar("T")


class _KeptDied(Exception):
    """A kept reader failed: perhaps the server dropped it while it waited."""


class KeptReads:
    """The reads of `persistence.sql.store.SqlStore`, on the readers it keeps."""

    _readers: list[tuple[Any, int]]
    _read_threads: anyio.CapacityLimiter | None
    _dialect: Dialect
    _driver_error: type[Exception]
    _busy_ms: int
    _timeout: float
    # Set once the store closes: a read its caller gave up on (`persistence.call_bound`) may end
    # after that, and its connection is then closed, not kept where no one will close it.
    _reads_closed: bool = False
    _outstanding: Outstanding

    def _failure(self, exc: BaseException | None, deadline: Deadline | None) -> str:
        """What went wrong, for a `StoreError`: the bound when the watchdog cut the call, else the driver's words."""
        if deadline is not None and deadline.expired:
            return f"no answer within {self._timeout:g} s"
        return str(exc)

    def _drop_readers(self) -> None:
        while self._readers:
            with contextlib.suppress(Exception):
                self._readers.pop()[0].close()

    def _reading(self, work: Callable[..., T], *args: Any) -> T:
        """``work(cursor, *args)`` in a read transaction on a kept reader, in the calling thread, within the bound."""
        return self._read_on(work, args, self._busy_ms)

    def _reading_on_loop(self, work: Callable[..., T], *args: Any) -> T:
        """`_reading` on the event loop (SQLite): never waiting for a lock, it raises `Busy` instead."""
        return self._read_on(work, args, 0)

    def _read_on(self, work: Callable[..., T], args: tuple[Any, ...], busy_ms: int) -> T:
        try:
            return self._read_once(work, args, busy_ms, kept=bool(self._readers))
        except _KeptDied:
            # A kept reader the server had dropped while it waited (a restart): the others went
            # with it. Once more, on a new connection, so the read gets the database's answer.
            self._drop_readers()
            return self._read_once(work, args, busy_ms, kept=False)

    def _read_once(self, work: Callable[..., T], args: tuple[Any, ...], busy_ms: int, *, kept: bool) -> T:
        connection, busy = self._readers.pop() if kept and self._readers else (None, busy_ms)
        deadline: Deadline | None = None
        try:
            if connection is None:
                connection, busy = self._dialect.new_reader(self, busy_ms)  # type: ignore[arg-type]
            busy = self._dialect.wait_for_locks(connection, busy, busy_ms)
            with self._dialect.bound(connection) as deadline:
                result = self._dialect.run_read(connection, work, args)
        except (self._driver_error, sa.exc.DBAPIError) as exc:
            if connection is not None and busy_ms == 0 and self._dialect.lock_taken(exc):
                # The connection is sound: only the lock was taken.
                self._keep(connection, busy)
                raise Busy from exc
            if connection is not None:
                with contextlib.suppress(Exception):
                    connection.close()
            cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
            if kept and not (deadline is not None and deadline.expired):
                raise _KeptDied from exc
            raise StoreError(f"store unavailable: {self._failure(cause, deadline)}") from exc
        except BaseException:
            if connection is not None:
                self._keep(connection, busy, deadline)
            raise
        self._keep(connection, busy, deadline)
        return result

    def _keep(self, connection: Any, busy: int, deadline: Deadline | None = None) -> None:
        if self._reads_closed or (deadline is not None and deadline.expired):
            # The store closed, or the watchdog cut it: the next read opens a new one.
            with contextlib.suppress(Exception):
                connection.close()
        elif len(self._readers) < READERS_KEPT:
            self._readers.append((connection, busy))
        else:
            connection.close()

    async def _in_thread(self, work: Callable[..., T], *args: Any) -> T:
        if self._read_threads is None:
            # As many reads at once as connections are kept, so no read opens a connection of its own.
            self._read_threads = anyio.CapacityLimiter(READERS_KEPT)
        bound = self._dialect.call_bound(self._timeout)
        return await in_thread(
            bound, self._reading, work, *args, limiter=self._read_threads, outstanding=self._outstanding
        )

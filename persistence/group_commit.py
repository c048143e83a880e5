"""Group commit: writes that arrive together share one transaction, so one commit and one fsync.

A `GroupCommit` owns one writer thread and its own DBAPI connection. Callers hand it a
unit of work, a function of a cursor; the thread takes every unit waiting when it wakes
(up to `MAX_GROUP`), runs each inside its own savepoint, and commits once. A unit that
fails (a seq conflict, an unknown session, a driver error) is rolled back to its
savepoint alone and fails alone; the others commit. Every caller is answered only after
the commit returns, that is once the store has made the whole group durable at its
configured level, so grouping gives up no durability: it only shares the fsync.

While one group commits, the next gathers in the queue, so the group size follows the
load by itself: one unit at a time when idle, many under concurrency, with no timer.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

import anyio

from persistence.errors import StoreError

__all__ = ["MAX_GROUP", "GroupCommit"]

logger = logging.getLogger(__name__)

MAX_GROUP: Final = 256
T = TypeVar("T")


class _Unit(Generic[T]):
    __slots__ = ("future", "loop", "work")

    def __init__(self, work: Callable[[Any], T], loop: asyncio.AbstractEventLoop, future: asyncio.Future[T]) -> None:
        self.work = work
        self.loop = loop
        self.future = future


class GroupCommit:
    """A writer thread that commits the units of work waiting for it together.

    ``connect`` opens the writer's connection (in the writer thread); ``begin`` is the SQL
    that opens a write transaction (``None`` when the driver opens one implicitly); and
    ``aborted`` is called in the writer thread when a whole group is rolled back, so the
    store can forget what it learned from that group's units.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        begin: str | None,
        aborted: Callable[[], None],
        name: str = "history-writer",
    ) -> None:
        self._connect = connect
        self._begin = begin
        self._aborted = aborted
        self._name = name
        self._queue: queue.SimpleQueue[_Unit[Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        self.groups = 0
        self.units = 0

    async def run(self, work: Callable[[Any], T]) -> T:
        """Run ``work(cursor)`` in the next group; its result once the group has committed.

        Raises what ``work`` raised (as `StoreError` when it is not one already), or
        `StoreError` when the group's commit failed. Cancellation waits for the outcome, as
        a worker-thread hop does: the work may already be committed.
        """
        if self._closed:
            raise StoreError("the store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Unit(work, loop, future))
        if self._thread is None:
            self._start()
        with anyio.CancelScope(shield=True):
            result = await future
        return result

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()

    def close(self) -> None:
        """Finish the units already queued, then stop the thread and close its connection."""
        self._closed = True
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join()

    def _serve(self) -> None:
        connection: Any = None
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    return
                group: list[_Unit[Any]] = [first]
                stop = False
                while len(group) < MAX_GROUP:
                    try:
                        unit = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if unit is None:
                        stop = True
                        break
                    group.append(unit)
                connection = self._commit(connection, group)
                if stop:
                    return
        finally:
            if connection is not None:
                _quietly(connection.close)

    def _commit(self, connection: Any, group: list[_Unit[Any]]) -> Any:
        """Run and commit one group; the connection to use next (``None`` after a failure)."""
        outcomes: list[tuple[bool, Any]] = []
        try:
            if connection is None:
                connection = self._connect()
            cursor = connection.cursor()
            if self._begin is not None:
                cursor.execute(self._begin)
            for unit in group:
                cursor.execute("SAVEPOINT history_unit")
                try:
                    outcomes.append((True, unit.work(cursor)))
                except Exception as exc:
                    cursor.execute("ROLLBACK TO SAVEPOINT history_unit")
                    outcomes.append((False, exc if isinstance(exc, StoreError) else _unavailable(exc)))
                cursor.execute("RELEASE SAVEPOINT history_unit")
            connection.commit()
        except Exception as exc:
            logger.error("a group of %d writes was rolled back: %s", len(group), exc, exc_info=exc)
            if connection is not None:
                _quietly(connection.rollback)
                _quietly(connection.close)
            connection = None
            self._aborted()
            failure = _unavailable(exc)
            outcomes = [(False, failure)] * len(group)
        self.groups += 1
        self.units += len(group)
        _deliver(group, outcomes)
        return connection


def _unavailable(exc: BaseException) -> StoreError:
    error = StoreError(f"store unavailable: {exc}")
    error.__cause__ = exc
    return error


def _deliver(group: list[_Unit[Any]], outcomes: list[tuple[bool, Any]]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for unit, (ok, value) in zip(group, outcomes, strict=True):
        by_loop.setdefault(unit.loop, []).append((unit.future, ok, value))
    for loop, answers in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, answers)
        except RuntimeError:
            logger.warning("%d writes committed for an event loop that has closed", len(answers))


def _settle(answers: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in answers:
        if future.done():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def _quietly(action: Callable[[], object]) -> None:
    try:
        action()
    except Exception as exc:
        logger.debug("ignored while recovering the writer connection: %s", exc)

"""Group commit: writes that arrive together share one transaction, so one commit and one fsync.

A `GroupCommit` owns one writer thread. Callers hand it a unit of work; the thread takes
every unit waiting when it wakes (up to `MAX_GROUP`) and has the store commit them as one
group. On SQL (`persistence.sql.groups`) a group is one transaction in which a unit that
fails (a seq conflict, an unknown session, a driver error) is rolled back alone and the
others commit. Every caller is answered only after the group is
durable at the store's configured level, so grouping gives up no durability: it only
shares the fsync.

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

from persistence.call_bound import no_answer
from persistence.errors import StoreError

__all__ = ["MAX_GROUP", "GroupCommit", "quietly", "unavailable"]

logger = logging.getLogger(__name__)

MAX_GROUP: Final = 256
T = TypeVar("T")


class _Unit(Generic[T]):
    __slots__ = ("abandoned", "future", "key", "loop", "work")

    def __init__(
        self, work: Callable[[Any], T], key: str, loop: asyncio.AbstractEventLoop, future: asyncio.Future[T]
    ) -> None:
        self.work = work
        self.key = key
        self.loop = loop
        self.future = future
        # Its caller waited its bound and left: a group not yet begun skips it.
        self.abandoned = False


class GroupCommit:
    """A writer thread that commits the units of work waiting for it together.

    ``commit_group`` runs one group: it takes the units' work functions, in arrival
    order, and returns each one's outcome, ``(True, result)`` or ``(False, exception)``,
    once the whole group is durable. The store decides what a unit is handed and how the
    group is made durable (`persistence.sql.groups.SqlGroups` for the SQL store).
    """

    def __init__(
        self,
        commit_group: Callable[[list[Callable[[Any], Any]]], list[tuple[bool, Any]]],
        *,
        name: str,
        bound: float | None = None,
    ) -> None:
        self._commit_group = commit_group
        self._name = name
        # The most a caller waits, queued and committing (`persistence.call_bound`); ``None``, unbounded.
        self._bound = bound
        self._queue: queue.SimpleQueue[_Unit[Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        # Held to check for close and queue a unit, and to close: no unit is queued behind the stop.
        self._put_lock = threading.Lock()
        self._closed = False
        self.groups = 0
        self.units = 0

    async def run(self, work: Callable[[Any], T], key: str = "") -> T:
        """Run ``work`` in the next group; its result once the group is durable.

        ``key`` names what the unit locks (its session). A group runs its units in key order,
        arrival order within a key, so that two processes' groups take their locks in one
        order and never wait on each other in a cycle.

        Raises what ``work`` raised (as `StoreError` when it is not one already), or
        `StoreError` when the group as a whole failed, or when the outcome did not come within
        the bound: the work is then skipped if its group has not begun, else it may commit.
        Cancellation waits for the outcome, as a worker-thread hop does: the work may already be committed.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        unit = _Unit(work, key, loop, future)
        with self._put_lock:
            if self._closed:
                raise StoreError("the store is closed")
            self._queue.put(unit)
        if self._thread is None:
            self._start()
        with anyio.CancelScope(shield=True) as waiting:
            if self._bound is not None:
                waiting.deadline = anyio.current_time() + self._bound
            return await future
        assert self._bound is not None
        unit.abandoned = True
        future.cancel()
        raise no_answer(self._bound)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Finish the units already queued, then stop the thread."""
        with self._put_lock:
            self._closed = True
            self._queue.put(None)
        if self._thread is not None:
            self._thread.join()

    def _serve(self) -> None:
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
            group = [unit for unit in group if not unit.abandoned]
            if not group:
                if stop:
                    return
                continue
            group.sort(key=_key)
            try:
                outcomes = self._commit_group([unit.work for unit in group])
            except Exception as exc:
                # One line: each write's request is answered 503 and logged at the edge, whose
                # tracebacks are rate-limited; one per group here would flood the log in an outage.
                logger.error("a group of %d writes failed: %s", len(group), exc)
                outcomes = [(False, unavailable(exc))] * len(group)
            self.groups += 1
            self.units += len(group)
            _deliver(group, outcomes)
            if stop:
                return


def _key(unit: _Unit[Any]) -> str:
    return unit.key


def unavailable(exc: BaseException) -> StoreError:
    """A driver or OS failure as the `StoreError` a caller sees, caused by it."""
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


def quietly(action: Callable[[], object]) -> None:
    """Run ``action``, logging rather than raising what it raises: for cleanup after a failure."""
    try:
        action()
    except Exception as exc:
        logger.debug("ignored while recovering the writer connection: %s", exc)

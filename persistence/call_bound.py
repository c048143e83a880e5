"""A caller's bound on a whole store call: the store's timeout plus `CALL_MARGIN` (docs/deploy.md, limits).

A store bounds each phase of a call on its own: connecting, each statement, each call on a
connection (`persistence.sql.pg_timeouts`). A call can still meet a hung server where no one
bound covers it whole: a connect begun after another call's connection was cut, a wait for
the writer or a reader behind a hung one, a checkout. So the caller waits for the whole
call at most its bound, then gets `StoreError` (a 503). The work it leaves may still finish:
a write may then be committed, as after any lost answer, and an append retried with the
same seqs is idempotent. A SQL backend says whether its calls take this bound
(`persistence.sql.backend.Backend.call_bound`): PostgreSQL's do, SQLite's wait only for locks.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, TypeVar

import anyio.to_thread

from persistence.errors import StoreError

__all__ = ["CALL_MARGIN", "Outstanding", "call_bound", "in_thread", "no_answer", "within"]

# Beyond the store's timeout: a call cut by its own bound at the timeout is answered first.
CALL_MARGIN: Final = 1.0
T = TypeVar("T")


def call_bound(timeout: float) -> float:
    """The most a caller waits for one store call whose phases are each bounded by ``timeout`` seconds."""
    return timeout + CALL_MARGIN


def no_answer(seconds: float) -> StoreError:
    """The `StoreError` of a call that had no answer within ``seconds``."""
    return StoreError(f"store unavailable: no answer within {seconds:g} s")


@contextmanager
def within(seconds: float | None) -> Iterator[None]:
    """Wait for the block at most ``seconds`` (``None``: as long as it takes), then raise `StoreError`."""
    if seconds is None:
        yield
        return
    with anyio.CancelScope(deadline=anyio.current_time() + seconds) as waiting:
        yield
    if waiting.cancelled_caught:
        raise no_answer(seconds)


class Outstanding:
    """The calls running in worker threads, left behind by their callers or not: what a store's close waits for.

    A call its caller gave up on still holds its connection; a store that closed under it would
    leave that connection open, for no one to close.
    """

    def __init__(self) -> None:
        self._count = 0
        self._idle = threading.Condition()

    def run(self, work: Callable[..., T], *args: object) -> T:
        with self._idle:
            self._count += 1
        try:
            return work(*args)
        finally:
            with self._idle:
                self._count -= 1
                self._idle.notify_all()

    def wait(self, seconds: float) -> bool:
        """Wait at most ``seconds`` until no call runs; whether none does."""
        with self._idle:
            return self._idle.wait_for(lambda: self._count == 0, timeout=seconds)


async def in_thread(
    seconds: float | None,
    work: Callable[..., T],
    *args: object,
    limiter: anyio.CapacityLimiter | None = None,
    outstanding: Outstanding | None = None,
) -> T:
    """``work(*args)`` in a worker thread, waited for at most ``seconds``; a thread left behind ends on its own,
    counted in ``outstanding`` until it does.

    Unbounded, it is waited for even when cancelled, as a worker-thread hop is.
    """
    with within(seconds):
        partial = (
            functools.partial(work, *args) if outstanding is None else functools.partial(outstanding.run, work, *args)
        )
        return await anyio.to_thread.run_sync(partial, limiter=limiter, abandon_on_cancel=seconds is not None)

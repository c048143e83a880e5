"""What a live Durable Streams read waits on: a `Waker` per process, and the cursor that defeats collapsed caches.

A reader takes a `Waker.watch` ticket before it reads, then waits on it: a write that lands
between the read and the wait has already set the ticket, so no wake-up is lost. Writes
in this process and the other processes' writes (on a store several processes share, as
the store's notices) wake their stream's tickets alike, through the process's one fan-out
(`history_service.notices.Notices`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio

from codec import MAX_SAFE_INTEGER, decimal

__all__ = ["SharedReads", "Waker", "response_cursor"]

T = TypeVar("T")

# Protocol §8.1: cursors count 20 s intervals since this epoch.
_CURSOR_EPOCH_S: Final = 1728432000  # 2024-10-09T00:00:00Z
_CURSOR_INTERVAL_S: Final = 20


class Waker:
    """Tickets by stream name, set when the stream changes."""

    def __init__(self) -> None:
        self._tickets: dict[str, asyncio.Event] = {}
        # Counts wake-ups: a read begun at one count has seen every write woken before it.
        self.changes = 0

    def watch(self, name: str) -> asyncio.Event:
        """The ticket the next change of ``name`` sets."""
        ticket = self._tickets.get(name)
        if ticket is None:
            ticket = self._tickets[name] = asyncio.Event()
        return ticket

    def wake(self, name: str) -> None:
        self.changes += 1
        ticket = self._tickets.pop(name, None)
        if ticket is not None:
            ticket.set()

    def wake_all(self) -> None:
        self.changes += 1
        tickets, self._tickets = self._tickets, {}
        for ticket in tickets.values():
            ticket.set()

    @property
    def watched(self) -> int:
        return len(self._tickets)

    @staticmethod
    async def wait(ticket: asyncio.Event, timeout: float) -> bool:
        """Whether the ticket was set within ``timeout`` seconds."""
        with anyio.move_on_after(timeout):
            await ticket.wait()
            return True
        return False


class SharedReads:
    """Readers of one view at one offset, woken by one write, share one store read.

    A hundred SSE readers of a stream wake together for each append; without this each would
    read the store. A read is joined only while no wake-up has happened since it began
    (`Waker.changes` is in its key), so a reader never takes a result older than its ticket.
    """

    def __init__(self, waker: Waker) -> None:
        self._waker = waker
        self._flights: dict[tuple[object, ...], asyncio.Future[Any]] = {}

    async def read(self, key: tuple[object, ...], work: Callable[[], Awaitable[T]]) -> T:
        key = (*key, self._waker.changes)
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = asyncio.ensure_future(work())
            flight.add_done_callback(lambda done: self._landed(key, done))
        result: T = await asyncio.shield(flight)
        return result

    def _landed(self, key: tuple[object, ...], flight: asyncio.Future[Any]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.cancelled():
            flight.exception()  # retrieved, so a read no one awaits any more is not reported as lost


def response_cursor(client: str | None) -> str:
    """The ``Stream-Cursor`` of a live answer: the current interval, or past the client's if it is not behind.

    A client's cursor that is not a numeral (`codec.numerals.decimal`) counts as none, as the reference server's does.
    """
    current = int((time.time() - _CURSOR_EPOCH_S) // _CURSOR_INTERVAL_S)
    given = None if client is None else decimal(client, low=0, high=MAX_SAFE_INTEGER)
    if given is None or given < current:
        return str(current)
    jitter_s = random.randint(1, 3600)
    return str(given + max(1, -(-jitter_s // _CURSOR_INTERVAL_S)))

"""What a live Durable Streams read waits on: a `Waker` per process, and the cursor that defeats collapsed caches.

A reader takes a `Waker.watch` ticket before it reads, then waits on it: a write that lands
between the read and the wait has already set the ticket, so no wake-up is lost. Writes
in this process wake their stream's tickets directly; on a store several processes share,
the other processes' writes arrive as notices (`history_service.durable.service`).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Final

import anyio

__all__ = ["Waker", "response_cursor"]

# Protocol §8.1: cursors count 20 s intervals since this epoch.
_CURSOR_EPOCH_S: Final = 1728432000  # 2024-10-09T00:00:00Z
_CURSOR_INTERVAL_S: Final = 20


class Waker:
    """Tickets by stream name, set when the stream changes."""

    def __init__(self) -> None:
        self._tickets: dict[str, asyncio.Event] = {}

    def watch(self, name: str) -> asyncio.Event:
        """The ticket the next change of ``name`` sets."""
        ticket = self._tickets.get(name)
        if ticket is None:
            ticket = self._tickets[name] = asyncio.Event()
        return ticket

    def wake(self, name: str) -> None:
        ticket = self._tickets.pop(name, None)
        if ticket is not None:
            ticket.set()

    def wake_all(self) -> None:
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


def response_cursor(client: str | None) -> str:
    """The ``Stream-Cursor`` of a live answer: the current interval, or past the client's if it is not behind."""
    current = int((time.time() - _CURSOR_EPOCH_S) // _CURSOR_INTERVAL_S)
    if client is None or not client.isdigit() or int(client) < current:
        return str(current)
    jitter_s = random.randint(1, 3600)
    return str(int(client) + max(1, -(-jitter_s // _CURSOR_INTERVAL_S)))

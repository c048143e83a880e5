"""The process's budget of bytes in flight (docs/protocol.md §4.6): read, spliced, or buffered for a slow reader.

Every page and follow snapshot holds a `Hold` on the budget from before its store read until
its last byte is handed to the server: first its byte target (the most its read may cost
beyond its newest message), then what it really read and built. A new hold that does not
fit waits, in arrival order, up to ``wait`` seconds, then is refused with `Overloaded`
(503 with ``Retry-After``). A hold always fits an idle budget, so one page larger than
the whole budget is still served, alone.
"""

from __future__ import annotations

from collections import deque
from typing import Final

import anyio

from history_service.errors import Overloaded
from persistence import Lru

__all__ = ["SMALL_HOLD", "ByteBudget", "Hold", "InFlight"]

# So many bytes are held without waiting, whatever else is held.
SMALL_HOLD: Final = 64 * 1024


class ByteBudget:
    """At most ``limit`` bytes held at once; a hold that does not fit waits up to ``wait`` seconds.

    A hold of at most ``small`` bytes is always taken at once, and counted: a full budget
    throttles large reads, never the small pages and resumes of everyone else.
    """

    def __init__(self, limit: int, *, wait: float, small: int = SMALL_HOLD) -> None:
        self.limit = limit
        self.wait = wait
        self.small = small
        self.held = 0
        self.drained = 0
        self._waiting: deque[tuple[int, anyio.Event]] = deque()

    def _fits(self, size: int) -> bool:
        return self.held == 0 or self.held + size <= self.limit

    async def hold(self, size: int) -> Hold:
        """A hold of ``size`` bytes, once they fit; `Overloaded` if they do not within ``wait`` seconds."""
        size = min(size, self.limit)
        if size <= self.small or (not self._waiting and self._fits(size)):
            self.held += size
            return Hold(self, size)
        ready = anyio.Event()
        entry = (size, ready)
        self._waiting.append(entry)
        try:
            with anyio.move_on_after(self.wait):
                await ready.wait()
        except BaseException:
            self._give_up(entry)
            raise
        if ready.is_set():
            return Hold(self, size)
        self._give_up(entry)
        raise Overloaded(f"more than {self.limit} bytes of pages and snapshots are in flight")

    def _give_up(self, entry: tuple[int, anyio.Event]) -> None:
        if entry[1].is_set():
            self._release(entry[0])
        else:
            self._waiting.remove(entry)
            self._admit()

    def _release(self, size: int) -> None:
        self.held -= size
        self.drained += size
        self._admit()

    def _grow(self, size: int) -> None:
        self.held += size

    def _admit(self) -> None:
        # Arrival order: a large hold at the front is not overtaken by small ones behind it.
        while self._waiting and self._fits(self._waiting[0][0]):
            size, ready = self._waiting.popleft()
            self.held += size
            ready.set()


class Hold:
    """Bytes held on a `ByteBudget` until `release`; `resize` sets them to what a request really holds."""

    def __init__(self, budget: ByteBudget, size: int) -> None:
        self._budget = budget
        self.size = size

    def resize(self, size: int) -> None:
        """Hold ``size`` bytes from now on: what was read is in memory already, so growing never waits."""
        if size > self.size:
            self._budget._grow(size - self.size)
        else:
            self._budget._release(self.size - size)
        self.size = size

    def release(self) -> None:
        """Give every byte back; a second call does nothing."""
        if self.size:
            self._budget._release(self.size)
            self.size = 0


class InFlight:
    """The two budgets a read passes through, and what each shape of read last held.

    ``reading`` bounds bytes being read and spliced, ``sending`` bytes of bodies being sent.
    A reader that does not read fills only the second, so it throttles other large bodies,
    never reads or small pages. A read's first hold is its estimate (`estimate`), keyed by
    the read's shape: a page of one message says nothing of a snapshot of a thousand.
    """

    def __init__(self, limit: int, *, wait: float, shapes: int) -> None:
        self.reading = ByteBudget(limit, wait=wait)
        self.sending = ByteBudget(limit, wait=wait)
        self._sizes: Lru[tuple[object, ...], int] = Lru(shapes)

    def estimate(self, shape: tuple[object, ...], max_bytes: int, share: int) -> int:
        """What a read may hold: its byte target, capped at 1/``share`` of the budget and at its shape's last read."""
        last = self._sizes.get(shape)
        bound = min(max_bytes, self.reading.limit // share)
        return bound if last is None else min(bound, last)

    def learned(self, shape: tuple[object, ...], size: int) -> None:
        """Remember that a read of ``shape`` held ``size`` bytes, for the next one's estimate."""
        self._sizes.put(shape, size)

    async def to_send(self, size: int) -> Hold:
        """A hold of ``size`` bytes on the sending budget: they are in memory already, so it may grow."""
        hold = await self.sending.hold(size)
        hold.resize(size)
        return hold

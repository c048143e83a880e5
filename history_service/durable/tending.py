"""When the subscriptions' background work runs (docs/protocol.md §13.6): the rounds of tending.

A round comes when a write has touched a subscription, when the first open lease runs out,
and at the latest `RELOAD_S` after the store's subscriptions were last read, so one that
another process made or changed is tended here within that time. `Tending` keeps what the
rounds need between them, the subscriptions touched and the stream that did, and says at each
round whether the store is due to be read again; what a round does is
`history_service.durable.subscriptions`'.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Final

import anyio

from history_service.durable.subscription import now_ms

__all__ = ["RELOAD_S", "Tending", "Touched"]

# Seconds between two reads of every subscription: how soon one made or changed by another process is tended here.
RELOAD_S: Final = 1.0
# The least wait of a round: a lease it cannot close (the store is down) is tried again, not spun on.
_MOMENT_S: Final = 0.05

# The subscriptions (owner, id) a write has touched, and the stream that did ("" when any may have: notices were lost).
Touched = dict[tuple[str, str], str]


class Tending:
    """The rounds of the subscriptions' background work: what touched them since the last, and when the next is."""

    def __init__(self) -> None:
        self._touched: Touched = {}
        self._kick = anyio.Event()
        self._loaded_at = -math.inf
        self.closing = False

    def touch(self, owner: str, sub_id: str, name: str | None) -> None:
        """A write to ``name`` (``None``: perhaps to any stream) concerns the subscription: tend it soon."""
        if not self.closing:
            self._touched.setdefault((owner, sub_id), name or "")
            self._kick.set()

    def forget(self, owner: str, sub_id: str) -> None:
        self._touched.pop((owner, sub_id), None)

    def leased(self) -> None:
        """A lease was set: the next round waits for it to run out, not longer."""
        self._kick.set()

    def loaded(self) -> None:
        """The store's subscriptions were read (or failed to be): the next read is due `RELOAD_S` from now."""
        self._loaded_at = time.monotonic()

    def close(self) -> None:
        """Stop: the app is shutting down."""
        self.closing = True
        self._kick.set()

    async def next_round(self, leases: Iterable[int]) -> bool:
        """Wait for the next round, the first of ``leases`` (wall-clock ms) bounding the wait; whether to read the
        store again."""
        ends = list(leases)
        wait = self._loaded_at + RELOAD_S - time.monotonic()
        if ends:
            wait = min(wait, (min(ends) - now_ms()) / 1000)
        with anyio.move_on_after(max(_MOMENT_S, wait)):
            await self._kick.wait()
        self._kick = anyio.Event()
        return time.monotonic() - self._loaded_at >= RELOAD_S

    def take(self) -> Touched:
        """The subscriptions touched since the last take."""
        touched, self._touched = self._touched, {}
        return touched

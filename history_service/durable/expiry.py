"""The expiry of Durable Streams (docs/protocol.md §13.5): the streams past their TTL or Expires-At are deleted.

An expired stream answers as unknown at once; the sweep deletes it, one stream at a time,
and wakes its live readers, which then end. It runs in the ``/ds`` server's own lifespan
task (`StreamExpiry.run`), every ``HISTORY_SWEEP_INTERVAL``, in the process's sweep turn
(`history_service.sweep.Sweeper.sweeping`): beside the sweep of expired sessions, never at
once with it, and on a store several processes share, in one process at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from history_service.sweep import every
from persistence import StoreError, StreamStore, now_ms

__all__ = ["StreamExpiry"]

logger = logging.getLogger(__name__)


class StreamExpiry:
    """Deletes the expired streams of ``streams``, ``batch`` found at a time, telling ``changed`` of each."""

    def __init__(
        self,
        streams: StreamStore,
        *,
        batch: int,
        turn: Callable[[], AbstractAsyncContextManager[bool]],
        changed: Callable[[str], None],
    ) -> None:
        self._streams = streams
        self._batch = batch
        self._turn = turn
        self._changed = changed

    async def expire(self) -> list[str] | None:
        """The names of the streams deleted; ``None`` while another process sweeps the same store."""
        async with self._turn() as mine:
            if not mine:
                return None
            swept: list[str] = []
            tried: set[str] = set()
            while True:
                found = [name for name in await self._streams.expired(now_ms(), self._batch) if name not in tried]
                if not found:
                    return swept
                for name in found:
                    tried.add(name)
                    try:
                        if await self._streams.sweep(name):
                            swept.append(name)
                            self._changed(name)  # its live readers learn it is gone
                    except StoreError as exc:
                        logger.error("the sweep cannot expire stream %r: %s", name, exc)

    async def run(self, interval: float) -> None:
        """Expire every ``interval`` seconds, until cancelled; a failure waits for the next."""
        await every(interval, self.expire, "expired Durable Streams", lambda swept: len(swept or ()))

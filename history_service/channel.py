"""A session's channel in the follow runtime: its recent events, seq contiguous, in a bounded buffer, and a wake-up.

The followers of one session in one process share its channel (`history_service.follow.Hub`).
Each buffered event is kept once, as the stored record it would be alone (`codec.event_records`),
so records of one event never overlap whatever rows the store compacted them into. A write is
built from them when a follower asks: ``event`` frames, or one packed ``records`` frame (§5.5).
Followers in step ask for the same interval, so the last of each kind is kept for the next.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import anyio

from codec import StoredRecord
from history_service.follow_frames import event_frames, records_frame

__all__ = ["Channel"]


class Channel:
    """The recent events of one session, seq contiguous, the newest head heard of, and a wake-up."""

    def __init__(self, capacity: int, slot: int = 0) -> None:
        self._capacity = capacity
        self.slot = slot
        self._records: list[StoredRecord] = []
        self._built: dict[bool, tuple[int, int, bytes]] = {}
        self.first_seq = 0
        self.followers = 0
        self.anchored = False
        self.known_head = -1
        # The head at which the session was closed, once this process knows it was: followers end there.
        self.closed_head: int | None = None
        # The incarnation the channel's frames name (§2.5), once known; a deleted one ends its followers.
        self.incarnation: str | None = None
        self.deleted = False
        self.fetching = False
        self._wake = anyio.Event()
        self._last_publish = 0.0
        self.interval = 1.0  # moving average of seconds between publishes

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self._records)

    def anchor(self, head: int) -> None:
        """Learn the durable head from the store; an empty buffer starts right after it."""
        if not self.anchored:
            self.anchored = True
            if not self._records:
                self.first_seq = head + 1
        self.known_head = max(self.known_head, head)

    def publish(self, first_seq: int, records: Sequence[StoredRecord]) -> None:
        """Add durable events ``first_seq ..``, a stored record of one event each; what the buffer holds is skipped."""
        now = time.monotonic()
        if self._last_publish:
            self.interval = 0.8 * self.interval + 0.2 * (now - self._last_publish)
        self._last_publish = now
        if first_seq < self.next_seq:
            records = records[self.next_seq - first_seq :]
            first_seq = self.next_seq
        elif first_seq > self.next_seq:
            # Seqs this buffer never saw: start over there; followers behind it read the store.
            self._records = []
            self.first_seq = first_seq
        if not records:
            return
        self._records.extend(records)
        self.known_head = max(self.known_head, self.next_seq - 1)
        if len(self._records) > 2 * self._capacity:
            drop = len(self._records) - self._capacity
            del self._records[:drop]
            self.first_seq += drop
        self.wake()

    def holds(self, seq: int) -> bool:
        """Whether ``seq`` is buffered."""
        return self.first_seq <= seq < self.next_seq

    def frames(self, seq: int, to_seq: int, *, packed: bool) -> bytes:
        """The write of buffered events ``[seq, to_seq)``: their ``event`` frames, or their ``records`` frame."""
        assert self.first_seq <= seq < to_seq <= self.next_seq and self.incarnation is not None
        built = self._built.get(packed)
        if built is not None and built[:2] == (seq, to_seq):
            return built[2]
        held = self._records[seq - self.first_seq : to_seq - self.first_seq]
        frame = records_frame(held, seq, to_seq, self.incarnation) if packed else event_frames(held, self.incarnation)
        self._built[packed] = (seq, to_seq, frame)
        return frame

    async def wait(self) -> None:
        """Wait for the next publish, ping tick or shutdown."""
        await self._wake.wait()

    def wake(self) -> None:
        wake, self._wake = self._wake, anyio.Event()
        wake.set()

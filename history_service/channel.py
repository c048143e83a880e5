"""A session's channel in the follow runtime: its recent frames, seq contiguous, in a bounded buffer, and a wake-up.

The followers of one session in one process share its channel (`history_service.follow.Hub`).
Beside each event's frame it keeps the stored record that holds the event, so a packed
follower's ``records`` frame is spliced from them (§5.5); followers in step ask for the same
interval, so the last such frame is kept for the next.
It also learns the newest head heard of, and whether the session was closed or deleted, so
its followers know when to read the store and when to end.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import anyio

from codec import StoredRecord
from history_service.follow_frames import records_frame

__all__ = ["Channel"]


class Channel:
    """The recent frames of one session, seq contiguous, the newest head heard of, and a wake-up."""

    def __init__(self, capacity: int, slot: int = 0) -> None:
        self._capacity = capacity
        self.slot = slot
        self._frames: list[bytes] = []
        self._records: list[StoredRecord] = []
        self._packed: tuple[int, int, bytes] | None = None
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
        return self.first_seq + len(self._frames)

    def anchor(self, head: int) -> None:
        """Learn the durable head from the store; an empty buffer starts right after it."""
        if not self.anchored:
            self.anchored = True
            if not self._frames:
                self.first_seq = head + 1
        self.known_head = max(self.known_head, head)

    def publish(self, first_seq: int, frames: Sequence[bytes], records: Sequence[StoredRecord]) -> None:
        """Add the frames of durable events ``first_seq ..``, and the stored record of each; what the buffer
        already holds is skipped."""
        now = time.monotonic()
        if self._last_publish:
            self.interval = 0.8 * self.interval + 0.2 * (now - self._last_publish)
        self._last_publish = now
        if first_seq < self.next_seq:
            frames = frames[self.next_seq - first_seq :]
            records = records[self.next_seq - first_seq :]
            first_seq = self.next_seq
        elif first_seq > self.next_seq:
            # Seqs this buffer never saw: start over there; followers behind it read the store.
            self._frames = []
            self._records = []
            self.first_seq = first_seq
        if not frames:
            return
        self._frames.extend(frames)
        self._records.extend(records)
        self.known_head = max(self.known_head, self.next_seq - 1)
        if len(self._frames) > 2 * self._capacity:
            drop = len(self._frames) - self._capacity
            del self._frames[:drop]
            del self._records[:drop]
            self.first_seq += drop
        self.wake()

    def frames_from(self, seq: int) -> bytes | None:
        """Every buffered frame from ``seq`` on, joined; ``None`` if ``seq`` is older than the buffer."""
        if seq < self.first_seq:
            return None
        return b"".join(self._frames[seq - self.first_seq :])

    def packed_from(self, seq: int) -> bytes:
        """The ``records`` frame of every buffered event from ``seq`` on; ``seq`` must be in the buffer."""
        assert self.first_seq <= seq < self.next_seq and self.incarnation is not None
        to_seq = self.next_seq
        if self._packed is not None and self._packed[:2] == (seq, to_seq):
            return self._packed[2]
        held: list[StoredRecord] = []
        for record in self._records[seq - self.first_seq :]:
            # A row read from the store holds several seqs: it is spliced once.
            if not held or record is not held[-1]:
                held.append(record)
        frame = records_frame(held, seq, to_seq, self.incarnation)
        self._packed = (seq, to_seq, frame)
        return frame

    async def wait(self) -> None:
        """Wait for the next publish, ping tick or shutdown."""
        await self._wake.wait()

    def wake(self) -> None:
        wake, self._wake = self._wake, anyio.Event()
        wake.set()

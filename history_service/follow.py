"""``session.follow`` (docs/protocol.md §5): live SSE with exact resume.

The append path publishes each durable event to its session's `Channel` as a ready SSE
frame. A channel keeps the most recent frames in a bounded buffer shared by all its
followers, and wakes them with an event, not by polling. A follower sends everything it
is due in one write. A fixed cost per write dominates under fan-out, so while a channel
publishes faster than every quarter ``coalesce`` interval, each follower writes at most once
per interval, carrying everything published meanwhile; at lower rates nothing waits. If a
follower has fallen behind the buffer (a slow or stalled consumer), it
catches up from the store instead. So no follower blocks the appender or another
follower, and none loses an event or is disconnected for being slow.

Only appends made through this process are published here. Cross-process wake-up
(PostgreSQL LISTEN/NOTIFY) plugs into `Hub.publish`; a channel already resynchronizes
from the store when it sees a seq that does not continue its buffer.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Final

import anyio

from codec import Event, encode
from persistence import HistoryStore

__all__ = ["CATCH_UP_WINDOW", "Channel", "Hub", "event_frame", "follow_stream", "sse_frame"]

CATCH_UP_WINDOW: Final = 2000


def sse_frame(event: str, data: bytes, *, event_id: int | None = None) -> bytes:
    """One SSE frame. ``data`` is single-line JSON, so it needs no splitting."""
    head = b"" if event_id is None else b"id: %d\n" % event_id
    return head + b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def event_frame(event: Event) -> bytes:
    return sse_frame("event", encode(event), event_id=event.seq)


class Channel:
    """The recent frames of one session, seq-contiguous, and a wake-up for its followers."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._frames: list[bytes] = []
        self.first_seq = 0
        self.followers = 0
        self._wake = anyio.Event()
        self._last_publish = 0.0
        self.interval = 1.0  # moving average of seconds between publishes

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self._frames)

    def publish(self, first_seq: int, frames: Sequence[bytes]) -> None:
        now = time.monotonic()
        if self._last_publish:
            self.interval = 0.8 * self.interval + 0.2 * (now - self._last_publish)
        self._last_publish = now
        if first_seq != self.next_seq:
            # A seq this buffer did not see (another writer): start over; followers catch up from the store.
            self._frames = []
            self.first_seq = first_seq
        self._frames.extend(frames)
        if len(self._frames) > 2 * self._capacity:
            drop = len(self._frames) - self._capacity
            del self._frames[:drop]
            self.first_seq += drop
        self.wake()

    def frames_from(self, seq: int) -> bytes | None:
        """Every buffered frame from ``seq`` on, joined; ``None`` if ``seq`` is older than the buffer."""
        if seq < self.first_seq:
            return None
        return b"".join(self._frames[seq - self.first_seq :])

    async def wait(self) -> None:
        """Wait for the next publish, ping tick or shutdown."""
        await self._wake.wait()

    def wake(self) -> None:
        wake, self._wake = self._wake, anyio.Event()
        wake.set()


class Hub:
    """All channels of the process, created on first follower or publish, and the shutdown signal."""

    def __init__(self, capacity: int, *, ping_interval: float, coalesce: float = 0.0) -> None:
        self._capacity = capacity
        self._channels: dict[str, Channel] = {}
        self.closing = anyio.Event()
        self.ping_interval = ping_interval
        self.coalesce = coalesce

    async def ticker(self) -> None:
        """Wake every channel once per ping interval, so idle streams can ping without per-wait timers."""
        while not self.closing.is_set():
            await anyio.sleep(self.ping_interval)
            for channel in list(self._channels.values()):
                channel.wake()

    def channel(self, session_id: str) -> Channel:
        channel = self._channels.get(session_id)
        if channel is None:
            channel = self._channels[session_id] = Channel(self._capacity)
        return channel

    def publish(self, session_id: str, events: Sequence[Event]) -> None:
        channel = self._channels.get(session_id)
        if channel is not None and events:
            channel.publish(events[0].seq, [event_frame(e) for e in events])

    def release(self, session_id: str) -> None:
        channel = self._channels.get(session_id)
        if channel is not None and channel.followers == 0:
            del self._channels[session_id]

    def close(self) -> None:
        """Ask every stream to end; called on server shutdown."""
        self.closing.set()
        for channel in self._channels.values():
            channel.wake()


async def follow_stream(
    hub: Hub,
    store: HistoryStore,
    session_id: str,
    channel: Channel,
    *,
    opening: bytes,
    next_seq: int,
    head: int,
) -> AsyncIterator[bytes]:
    """Yield ``opening``, then every event from ``next_seq`` on, in order, once; ping when idle.

    ``head`` is the durable head read after the follower subscribed to ``channel``, so every
    seq up to it is in the store and every later one will be published to the channel.
    """
    try:
        yield opening
        last_sent = anyio.current_time()
        while not hub.closing.is_set():
            head = max(head, channel.next_seq - 1)
            if channel.first_seq <= next_seq < channel.next_seq:
                # Writes, not events, cost most under fan-out: while the channel is busy, at most
                # one write per follower per `coalesce` seconds, carrying everything published meanwhile.
                if channel.interval < hub.coalesce / 4:
                    pause = hub.coalesce - (anyio.current_time() - last_sent)
                    if pause > 0:
                        await anyio.sleep(pause)
                frames = channel.frames_from(next_seq)
                next_seq = channel.next_seq
                yield frames or b""
                last_sent = anyio.current_time()
            elif next_seq <= head:
                # Behind the buffer, or before what it holds: catch up from the store.
                upper = min(head + 1, next_seq + CATCH_UP_WINDOW)
                if next_seq < channel.first_seq:
                    upper = min(upper, channel.first_seq)
                events = await store.read_events(session_id, next_seq, upper)
                if not events:
                    break
                next_seq = events[-1].seq + 1
                yield b"".join(event_frame(e) for e in events)
                last_sent = anyio.current_time()
            else:
                await channel.wait()
                if anyio.current_time() - last_sent >= hub.ping_interval * 0.9 and not hub.closing.is_set():
                    yield b": ping\n\n"
                    last_sent = anyio.current_time()
        # Shutting down: what is already published is durable, so send it before ending.
        if channel.first_seq <= next_seq < channel.next_seq:
            yield channel.frames_from(next_seq) or b""
    finally:
        channel.followers -= 1
        hub.release(session_id)

"""``session.follow`` (docs/protocol.md §5): live SSE with exact resume, in every process of a deployment.

A session's followers in one process share a `history_service.channel.Channel`: the most
recent frames, seq contiguous, in a bounded buffer, and a wake-up. Frames reach a channel two ways:

* an append through this process publishes its events once they are durable;
* a head notice (another process's append, heard through `history_service.notices.Notices`)
  makes the channel read the new events from the store, once for all its followers.

So a follower never gets a frame that exists only in another process's memory. A follower
that has fallen behind the buffer, or joined before what it holds, catches up from the
store itself. Every seq after the cut reaches every follower once, in order, whichever
process appended it, and no follower blocks the appender or another follower.

A follower of a packed stream (§5.5) gets what it is due as one ``records`` frame, the page
records of that interval, where another gets one ``event`` frame per event.

A follower writes everything it is due in one write. A fixed cost per write dominates under
fan-out, so while a channel publishes faster than every quarter ``coalesce`` interval, each
follower writes at most once per interval, carrying everything published meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Final

import anyio
import anyio.abc

from codec import Event, StoredRecord, encode, event_id, event_records, stored_record
from history_service.bodies import FollowEnd, FollowError
from history_service.channel import Channel
from history_service.follow_frames import event_frames, records_frame, sse_frame
from history_service.metrics import Metrics
from history_service.notices import Subscriber
from persistence import HistoryStore, SessionInfo, SessionNotFoundError, StoreError

__all__ = ["CATCH_UP_WINDOW", "PING_SLOTS", "Hub", "Subscription"]

logger = logging.getLogger(__name__)

CATCH_UP_WINDOW: Final = 2000
PING_SLOTS: Final = 16

Snapshot = Callable[[SessionInfo], Awaitable[bytes]]


class Hub(Subscriber):
    """Every channel of the process, the store reads that feed them, and the shutdown signal.

    It hears of appends, closes and deletes as a subscriber of the process's `Notices`. `run`
    must be running (the app's lifespan starts it) for pings and the channel reads that head
    notices cause. ``closing`` is the app's one shutdown signal; without it, the hub's own.
    """

    def __init__(
        self,
        store: HistoryStore,
        capacity: int,
        *,
        ping_interval: float,
        coalesce: float = 0.0,
        metrics: Metrics | None = None,
        forget: Callable[[str | None, str | None], None] | None = None,
        closing: anyio.Event | None = None,
    ) -> None:
        self.store = store
        # Told of sessions deleted through another process (the id and its incarnation), so what the service
        # keeps of them goes too; ``(None, None)`` after notices may have been lost: of every session.
        self._forget = forget
        self.metrics = metrics if metrics is not None else Metrics()
        self._capacity = capacity
        self._channels: dict[str, Channel] = {}
        self._created = 0
        self._tasks: anyio.abc.TaskGroup | None = None
        self.closing = closing if closing is not None else anyio.Event()
        self.ping_interval = ping_interval
        self.coalesce = coalesce

    @property
    def followed(self) -> int:
        """How many sessions have channels: those with followers, or a store read in flight."""
        return len(self._channels)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Ping idle streams, and read what head notices announce, until `close`."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            tasks.start_soon(self._ticker)
            task_status.started()
            await self.closing.wait()
            tasks.cancel_scope.cancel()
        self._tasks = None

    async def _ticker(self) -> None:
        # One timer for every channel, instead of one per waiting follower. Channels are woken in
        # turns, twice per ping interval each, so thousands of idle streams never ping in one burst
        # that would stall every other request.
        tick = 0
        while True:
            await anyio.sleep(self.ping_interval / PING_SLOTS)
            tick += 1
            turn = tick % (PING_SLOTS // 2)
            for channel in list(self._channels.values()):
                if channel.slot % (PING_SLOTS // 2) == turn:
                    channel.wake()

    def publish(self, session_id: str, events: Sequence[Event], incarnation: str | None = None) -> None:
        """Frames for durable events appended through this process, to the session's ``incarnation``.

        Without ``incarnation``, the channel's; before a channel knows it, its followers read the store.
        """
        channel = self._channels.get(session_id)
        if channel is None or not events:
            return
        if channel.incarnation is None:
            channel.incarnation = incarnation
        if channel.incarnation is not None and incarnation in (None, channel.incarnation):
            channel.publish(events[0].seq, [stored_record(event) for event in events])

    def deleted(self, session_ids: Sequence[str]) -> None:
        """The sessions are gone: their followers get ``session_deleted`` and end, and their channels are dropped.

        A follower that comes later, of an id created again, gets a channel of its own.
        """
        for session_id in session_ids:
            channel = self._channels.pop(session_id, None)
            if channel is not None:
                channel.deleted = True
                channel.wake()

    def ended(self, session_id: str, head: int) -> None:
        """The session was closed at ``head`` (through this process): its followers end once they reach it."""
        self.advanced(session_id, head, closed=True)

    def gone(self, session_id: str, incarnation: str | None) -> None:
        """Another process deleted ``incarnation`` of the session (``None``: whichever this one knows).

        A channel of a later incarnation of the id is left alone: the notice is late, not about it.
        """
        channel = self._channels.get(session_id)
        if channel is not None and incarnation in (None, channel.incarnation):
            self.deleted([session_id])
        if self._forget is not None:
            self._forget(session_id, incarnation)

    def advanced(self, session_id: str, head: int, closed: bool = False) -> None:
        """A head notice: ``session_id`` has durable events up to ``head`` (from any process); ``closed`` at it."""
        channel = self._channels.get(session_id)
        if channel is None:
            return
        if closed:
            # Kept even before the channel is anchored: a follower whose read of the session saw it
            # open must still end, and no later notice would tell it.
            channel.closed_head = head
        if not channel.anchored:
            return
        channel.known_head = max(channel.known_head, head)
        if channel.known_head >= channel.next_seq:
            self._fetch(session_id, channel)
        channel.wake()

    async def resync(self) -> None:
        """Re-read the head of every followed session, after notices may have been lost."""
        if self._forget is not None:
            self._forget(None, None)
        for session_id, channel in list(self._channels.items()):
            if channel.followers and channel.anchored:
                try:
                    info = await self.store.get_session(session_id)
                    if channel.incarnation not in (None, info.incarnation):
                        # Deleted and created again while notices were lost.
                        self.gone(session_id, channel.incarnation)
                        continue
                    self.advanced(session_id, info.head_seq, info.closed)
                except SessionNotFoundError:
                    self.gone(session_id, channel.incarnation)
                except StoreError as exc:
                    self.metrics.store_error(exc)
                    logger.warning("cannot re-read the head of %r: %s", session_id, exc)

    def _fetch(self, session_id: str, channel: Channel) -> None:
        if channel.fetching or self._tasks is None:
            return
        channel.fetching = True
        self._tasks.start_soon(self._read_into, session_id, channel)

    async def read_events(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        """The events of ``[from_seq, to_seq)`` read from the store (clipped to its head), one stored record each."""
        return event_records(await self.store.read_stored(session_id, from_seq, to_seq), from_seq, to_seq)

    async def read_records(self, session_id: str, from_seq: int, to_seq: int, incarnation: str) -> tuple[bytes, int]:
        """The ``records`` frame of ``[from_seq, to_seq)`` read from the store (clipped to its head), and
        how many events it holds: none when the store has none there."""
        stored = await self.store.read_stored(session_id, from_seq, to_seq)
        end = min(to_seq, max((record.end for record in stored), default=from_seq))
        if end <= from_seq:
            return b"", 0
        return records_frame(stored, from_seq, end, incarnation), end - from_seq

    async def _read_into(self, session_id: str, channel: Channel) -> None:
        # One store read per channel, not per follower; a notice that lands meanwhile extends the loop.
        try:
            while channel.known_head >= channel.next_seq and not (self.closing.is_set() or channel.deleted):
                if channel.interval < self.coalesce / 4:
                    # A busy session: let a few more notices gather, so one read carries them all.
                    await anyio.sleep(self.coalesce / 4)
                first = channel.next_seq
                upper = min(channel.known_head + 1, first + CATCH_UP_WINDOW)
                records = await self.read_events(session_id, first, upper)
                if not records:
                    break
                channel.publish(first, records)
        except StoreError as exc:
            self.metrics.store_error(exc)
            logger.warning("cannot read new events of %r: %s", session_id, exc)
        finally:
            channel.fetching = False
            channel.wake()
            self._release(session_id, channel)

    @asynccontextmanager
    async def subscribe(
        self,
        session_id: str,
        *,
        after: int | None,
        snapshot: Snapshot,
        retry_ms: int,
        incarnation: str | None = None,
        packed: bool = False,
    ) -> AsyncIterator[Subscription]:
        """Follow ``session_id`` from after ``after``, or from a fresh snapshot when ``after`` is ``None``;
        its events as ``records`` frames when ``packed``.

        Owns the follower's whole lifetime: it is counted on its channel before the head is
        read (so every later seq reaches it), the opening frames are decided here, and it is
        released on exit, however the stream ends. ``incarnation`` is the one the caller was
        allowed to read (``None``: whichever the session has): if the session is another by now,
        the stream says it was deleted.
        """
        channel = self._join(session_id)
        self.metrics.follow_opened()
        try:
            info = await self.store.get_session(session_id)
            if channel.incarnation is None:
                channel.incarnation = info.incarnation
            elif channel.incarnation != info.incarnation:
                # A channel of an incarnation deleted through another process, unheard of: end it, start anew.
                self.gone(session_id, channel.incarnation)
                channel.followers -= 1
                channel = self._join(session_id)
                channel.incarnation = info.incarnation
            channel.anchor(info.head_seq)
            if info.closed:
                channel.closed_head = info.head_seq
            opening = b"retry: %d\n\n" % retry_ms
            head = info.head_seq
            if incarnation is None:
                incarnation = info.incarnation
            if info.incarnation != incarnation:
                opening += sse_frame("error", encode(FollowError("session_deleted")))
                self.metrics.follow_frames("error")
                yield Subscription(self, channel, session_id, opening, head + 1, head, ended=True)
            elif after is None:
                cursor = event_id(incarnation, head)
                opening = sse_frame("snapshot", await snapshot(info), event_id=cursor, before=opening)
                self.metrics.follow_frames("snapshot")
                yield Subscription(self, channel, session_id, opening, head + 1, head, packed=packed)
            elif after > head:
                opening += sse_frame("error", encode(FollowError("cursor_ahead", head)))
                self.metrics.follow_frames("error")
                yield Subscription(self, channel, session_id, opening, head + 1, head, ended=True)
            else:
                yield Subscription(self, channel, session_id, opening, after + 1, head, packed=packed)
        finally:
            channel.followers -= 1
            self.metrics.follow_closed()
            self._release(session_id, channel)

    def _join(self, session_id: str) -> Channel:
        """The session's channel, made if it has none, with one more follower counted."""
        channel = self._channels.get(session_id)
        if channel is None:
            self._created += 1
            channel = self._channels[session_id] = Channel(self._capacity, self._created)
        channel.followers += 1
        return channel

    def _release(self, session_id: str, channel: Channel) -> None:
        # A channel lives while it has followers or a read in flight: idle sessions cost nothing.
        if channel.followers == 0 and not channel.fetching and self._channels.get(session_id) is channel:
            del self._channels[session_id]

    def close(self) -> None:
        """Ask every stream to end; called on server shutdown."""
        self.closing.set()
        for channel in self._channels.values():
            channel.wake()


class Subscription:
    """One follower's stream: its opening frames, then every event after its cursor, in order, once; pings when idle.

    ``packed``: the events go out as ``records`` frames, one per write (§5.5).
    """

    def __init__(
        self,
        hub: Hub,
        channel: Channel,
        session_id: str,
        opening: bytes,
        next_seq: int,
        head: int,
        *,
        ended: bool = False,
        packed: bool = False,
    ) -> None:
        self._hub = hub
        self._packed = packed
        self._channel = channel
        self._session_id = session_id
        self.opening = opening
        self._next_seq = next_seq
        self._head = head
        self._ended = ended

    async def __aiter__(self) -> AsyncIterator[bytes]:
        hub, channel, metrics = self._hub, self._channel, self._hub.metrics
        next_seq, head = self._next_seq, self._head
        yield self.opening
        if self._ended:
            return
        last_sent = anyio.current_time()
        # A catch-up is counted once, when a follower turns to the store: a resume while it replays
        # what was there when it opened, else it fell behind the buffer.
        catching_up = False
        while not hub.closing.is_set():
            head = max(head, channel.known_head)
            if channel.deleted:
                yield self._deleted()
                return
            if channel.closed_head is not None and next_seq > channel.closed_head:
                # Every event up to the close is sent: the stream ends here, and says why.
                metrics.follow_frames("end")
                yield sse_frame("end", encode(FollowEnd("session_closed", channel.closed_head)))
                return
            if channel.holds(next_seq):
                # Writes, not events, cost most under fan-out: while the channel is busy, at most
                # one write per follower per `coalesce` seconds, carrying everything published meanwhile.
                if channel.interval < hub.coalesce / 4:
                    pause = hub.coalesce - (anyio.current_time() - last_sent)
                    if pause > 0:
                        await anyio.sleep(pause)
                        # The buffer may have moved on meanwhile (a gap, or its bound): look again.
                        continue
                frames, next_seq = self._buffered(next_seq)
                catching_up = False
                yield frames
                last_sent = anyio.current_time()
            elif next_seq <= head and (next_seq < channel.first_seq or not channel.fetching):
                # Behind the buffer, or before what it holds: catch up from the store. At its edge
                # while the channel reads the store for everyone, wait for that read instead.
                upper = min(head + 1, next_seq + CATCH_UP_WINDOW)
                if next_seq < channel.first_seq:
                    upper = min(upper, channel.first_seq)
                if not catching_up:
                    catching_up = True
                    metrics.follow_caught_up(behind=next_seq > self._head)
                try:
                    caught_up, count = await self._stored(next_seq, upper)
                except SessionNotFoundError:
                    yield self._deleted()
                    return
                if not count:
                    break
                next_seq += count
                yield caught_up
                last_sent = anyio.current_time()
            else:
                await channel.wait()
                if anyio.current_time() - last_sent >= hub.ping_interval * 0.9 and not hub.closing.is_set():
                    metrics.follow_frames("ping")
                    yield b": ping\n\n"
                    last_sent = anyio.current_time()
        if channel.deleted:
            yield self._deleted()
            return
        # Shutting down: what is already published is durable, so send it before ending.
        while channel.holds(next_seq):
            frames, next_seq = self._buffered(next_seq)
            yield frames

    def _buffered(self, next_seq: int) -> tuple[bytes, int]:
        """The write of the buffered events from ``next_seq`` on (at most `CATCH_UP_WINDOW`), counted, and the
        seq after it. A follower far back in a full buffer gets it in windows, each built in bounded time."""
        channel, metrics = self._channel, self._hub.metrics
        to_seq = min(channel.next_seq, next_seq + CATCH_UP_WINDOW)
        metrics.follow_frames(*(("records", 1) if self._packed else ("event", to_seq - next_seq)))
        return channel.frames(next_seq, to_seq, packed=self._packed), to_seq

    async def _stored(self, next_seq: int, upper: int) -> tuple[bytes, int]:
        """The frames of ``[next_seq, upper)`` read from the store, counted, and how many events they hold."""
        hub, incarnation = self._hub, str(self._channel.incarnation)
        if self._packed:
            frame, count = await hub.read_records(self._session_id, next_seq, upper, incarnation)
            if count:
                hub.metrics.follow_frames("records")
            return frame, count
        records = await hub.read_events(self._session_id, next_seq, upper)
        hub.metrics.follow_frames("event", len(records))
        return event_frames(records, incarnation), len(records)

    def _deleted(self) -> bytes:
        self._hub.metrics.follow_frames("error")
        return sse_frame("error", encode(FollowError("session_deleted")))

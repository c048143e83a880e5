"""The one fan-out of changes in a process: sessions appended, closed and deleted, and Durable Streams written.

Two kinds of reader wait on changes: the session follow (`history_service.follow.Hub`) and
the Durable Streams live reads (`history_service.durable.app.Durable`). Each subscribes here,
and hears every change through the one path, whichever process made it:

* a change made through this process is told here by what made it (the service for
  sessions, the ``/ds`` endpoints for streams), once it is durable;
* a change made through another process arrives as the store's notice (`persistence.HeadListener`:
  PostgreSQL LISTEN/NOTIFY, or the log of notices of a SQLite file or JSONL directory), which
  `Notices.run` hears and tells the same way. After a (re)connect, notices may have been lost,
  and every subscriber reads again what it watches.

What this process keeps of sessions (owners, pages) is consulted only after `Notices.settle`,
which hears at once what a log-reading listener has not read yet: a delete committed anywhere
before a request is never contradicted by what was kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio
import anyio.abc

from codec import Event
from persistence import HeadListener, Notice, stream_of

__all__ = ["Notices", "Subscriber"]


class Subscriber:
    """What a subscriber of `Notices` hears; each change it does not care about is left as it is here, a no-op."""

    def publish(self, session_id: str, events: Sequence[Event], incarnation: str | None = None) -> None:
        """Durable events appended through this process, to the session's ``incarnation``."""

    def advanced(self, session_id: str, head: int, closed: bool = False) -> None:
        """``session_id`` has durable events up to ``head`` (from any process); ``closed`` at it."""

    def deleted(self, session_ids: Sequence[str]) -> None:
        """The sessions were deleted through this process."""

    def gone(self, session_id: str, incarnation: str | None) -> None:
        """Another process deleted ``incarnation`` of the session (``None``: whichever this one knows)."""

    def stream_written(self, name: str) -> None:
        """A write to the stream ``name`` committed through this process's ``/ds`` endpoints."""

    def stream_changed(self, name: str | None) -> None:
        """The stream ``name`` changed where no one here saw it: another process, or the sweep (``None``: any)."""

    async def resync(self) -> None:
        """Read again what is watched: notices may have been lost."""


def _nothing() -> None:
    """`Notices.settle` when only this process writes: there is nothing to hear."""


class Notices:
    """Tells each subscriber of every change, made here or heard from another process through the store.

    ``listener`` is the store's (`HistoryStore.listener`); ``None`` when only this process writes it.
    `run` must be running (the app's lifespan starts it) for another process's changes to be heard.
    """

    def __init__(self, listener: HeadListener | None) -> None:
        self._listener = listener
        self._subscribers: tuple[Subscriber, ...] = ()
        # Bound once: the caches call it on every hit, and with no listener it is a no-op.
        self.settle: Callable[[], None] = _nothing if listener is None else listener.catch_up

    def subscribe(self, subscriber: Subscriber) -> None:
        """Tell ``subscriber`` of every change from now on, after those subscribed before it."""
        self._subscribers = (*self._subscribers, subscriber)

    @property
    def state(self) -> str:
        """``in-process`` when only this process writes; else the listener's state, for a readiness probe."""
        return "in-process" if self._listener is None else self._listener.state

    async def run(
        self, until: anyio.Event, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Hear the store's notices of other processes' changes, until ``until`` is set."""
        async with anyio.create_task_group() as tasks:
            if self._listener is not None:
                tasks.start_soon(self._listener.run, self.heard, self.resync)
            task_status.started()
            await until.wait()
            tasks.cancel_scope.cancel()

    def heard(self, notice: Notice) -> None:
        """A notice from another process: a head moved, a session was closed or deleted, or a stream changed."""
        if (stream := stream_of(notice)) is not None:
            self.stream_changed(stream)
        elif notice.deleted:
            for subscriber in self._subscribers:
                subscriber.gone(notice.session_id, notice.incarnation)
        else:
            self.advanced(notice.session_id, notice.head, notice.closed)

    async def resync(self) -> None:
        async with anyio.create_task_group() as tasks:
            for subscriber in self._subscribers:
                tasks.start_soon(subscriber.resync)

    def publish(self, session_id: str, events: Sequence[Event], incarnation: str | None = None) -> None:
        for subscriber in self._subscribers:
            subscriber.publish(session_id, events, incarnation)

    def advanced(self, session_id: str, head: int, closed: bool = False) -> None:
        for subscriber in self._subscribers:
            subscriber.advanced(session_id, head, closed)

    def deleted(self, session_ids: Sequence[str]) -> None:
        for subscriber in self._subscribers:
            subscriber.deleted(session_ids)

    def stream_written(self, name: str) -> None:
        for subscriber in self._subscribers:
            subscriber.stream_written(name)

    def stream_changed(self, name: str | None) -> None:
        for subscriber in self._subscribers:
            subscriber.stream_changed(name)

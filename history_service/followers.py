"""The follow streams of sessions as the service serves them (docs/protocol.md §5): admitted, then fed by the hub.

A stream is admitted under the process's `FollowerCap`, and its snapshot holds its estimate
on the budget of bytes in flight (§4.6), both to be read and to be sent, so a stream that
could not send it is refused with a 503 before it opens.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from codec import snapshot_body
from history_service.budget import Hold, InFlight
from history_service.follow import Hub
from history_service.follower_cap import FollowerCap
from history_service.metrics import Metrics
from history_service.pages import PageQuery, PageReader
from history_service.responses import SEND_SIZE
from history_service.settings import Settings
from persistence import SessionInfo, SessionNotFoundError, StoreError

__all__ = ["Followers"]


class Followers:
    """Admits follow streams under ``cap`` and the budget ``inflight``, and serves each from ``hub``."""

    def __init__(
        self,
        settings: Settings,
        hub: Hub,
        cap: FollowerCap,
        *,
        pages: PageReader,
        inflight: InFlight,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.hub = hub
        self.cap = cap
        self.pages = pages
        self.inflight = inflight
        self.metrics = metrics

    async def admit(self, session_id: str, *, snapshot: bool, max_messages: int) -> tuple[Hold, Hold]:
        """A place for a new follow stream, and its snapshot's holds; `Overloaded` when there is none.

        The snapshot holds its estimate both to be read and to be sent, so a stream that could
        not send it is refused with a 503 before it opens. The estimate is what the session's
        last snapshot of that size held, when this process made one, else the byte target; a
        resumed stream has no snapshot and holds nothing. The caller gives both back with
        `leave` once the stream ends (`stream` releases them as soon as the snapshot is read,
        and sent).
        """
        # Counted before the wait for the budget, so streams waiting meanwhile cannot pass the cap.
        self.cap.admit()
        reading: Hold | None = None
        try:
            estimate = self.inflight.estimate(
                (session_id, "snapshot", max_messages), self.settings.default_max_bytes, 2
            )
            reading = await self.inflight.reading.hold(estimate if snapshot else 0)
            return reading, await self.inflight.sending.hold(estimate if snapshot else 0)
        except BaseException:
            if reading is not None:
                reading.release()
            self.cap.leave()
            raise

    def leave(self, holds: tuple[Hold, Hold]) -> None:
        for hold in holds:
            hold.release()
        self.cap.leave()

    async def stream(
        self,
        info: SessionInfo,
        holds: tuple[Hold, Hold],
        *,
        after: int | None,
        max_messages: int,
        packed: bool = False,
    ) -> AsyncGenerator[bytes | memoryview, None]:
        """The follow stream of a session the caller may read: opening frames, then events (``packed``:
        as ``records`` frames, §5.5), until shutdown.

        ``holds`` are the snapshot's, to be read and to be sent (`admit`): the first is given
        back once the snapshot is read, the second once the server has taken its last piece. A
        reader that does not read keeps the second, and so keeps it counted.
        """
        reading, sending = holds
        session_id = info.header.id

        async def snapshot(info: SessionInfo) -> bytes:
            # The tail page at through = cursor, with the header and cursor in front of its own fields.
            query = PageQuery(
                through=info.head_seq,
                before=None,
                max_messages=max_messages,
                max_bytes=self.settings.default_max_bytes,
                incarnation=info.incarnation,
            )
            page = await self.pages.page(session_id, query, holds=holds, incarnation=info.incarnation)
            body = snapshot_body(info.header, info.head_seq, page.body.join())
            self.inflight.learned((session_id, "snapshot", max_messages), len(body))
            sending.resize(len(body))
            reading.release()
            return body

        try:
            async with self.hub.subscribe(
                session_id,
                after=after,
                snapshot=snapshot,
                retry_ms=self.settings.retry_ms,
                incarnation=info.incarnation,
                packed=packed,
            ) as subscription:
                opened = False
                async for chunk in subscription:
                    if opened:
                        yield chunk
                        continue
                    opened = True
                    # The opening is sent in pieces: each send waits until the socket took the one before.
                    view = memoryview(chunk)
                    for at in range(0, len(view), SEND_SIZE):
                        yield view[at : at + SEND_SIZE]
                    reading.release()
                    sending.release()
        except SessionNotFoundError:
            raise  # deleted meanwhile: not the store's failure
        except StoreError as exc:
            self.metrics.store_error(exc)
            raise

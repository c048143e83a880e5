"""Durable Streams reads (docs/protocol.md §13.4): catch-up, long-poll and SSE, over any `View`.

A view is what a read sees: a generic stream on the store, or a session read as a stream
(`history_service.durable.sessions`). The three modes share the view's ``read``, so a
session and a stream answer alike.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Final, Literal, Protocol

from msgspec import Struct
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from codec import json_array, sse_control, sse_data, sse_payload
from history_service.budget import ByteBudget, Hold
from history_service.durable.live import SharedReads, Waker, response_cursor
from history_service.errors import Overloaded
from persistence import Chunk, StoreError, StreamRequestError

__all__ = ["Reading", "Snapshot", "View", "read"]

NEXT: Final = "Stream-Next-Offset"
UP_TO_DATE: Final = "Stream-Up-To-Date"
CLOSED: Final = "Stream-Closed"
CURSOR: Final = "Stream-Cursor"


class Snapshot(Struct, frozen=True, kw_only=True):
    """One read of a view: its chunks past the offset asked for, and the view as it stood."""

    content_type: str
    tail: int
    chunks: list[Chunk]
    complete: bool
    closed: bool


class View(Protocol):
    """A readable stream: how its offsets are written, and how it is read and kept alive."""

    name: str
    # Who reads what: views with one key at one offset share their reads (`SharedReads`).
    key: tuple[object, ...]
    mode: Literal["json", "text", "base64"]
    # A representation the reader negotiated ("" for the stream's own), named in the ETag.
    variant: str

    def offset(self, position: int) -> str: ...

    def position(self, offset: str) -> int:
        """The position an offset names: `StreamRequestError` when malformed, `StreamGoneError` for another life."""

    async def read(self, after: int | None, budget: int) -> Snapshot:
        """The chunks past ``after`` (``None``: only the view's state), up to about ``budget`` bytes."""

    async def touch(self) -> None: ...


class Reading(Struct, frozen=True, kw_only=True):
    """What every read is handed: the live parts and the limits."""

    waker: Waker
    shared: SharedReads
    long_poll: float
    budget: int
    stopping: object  # an anyio.Event-like with ``is_set()``
    # The budget of bytes in flight an SSE reader's buffered events are held on (docs/protocol.md §4.6).
    sending: ByteBudget


async def _snapshot(view: View, reading: Reading, after: int | None) -> Snapshot:
    return await reading.shared.read((*view.key, after), lambda: view.read(after, reading.budget))


def _etag(view: View, start: str, end: str, closed: bool) -> str:
    name = base64.b64encode(view.name.encode()).decode()
    variant = f";{view.variant}" if view.variant else ""
    return f'"{name}:{start}:{end}{":c" if closed else ""}{variant}"'


def _body(view: View, chunks: list[Chunk]) -> bytes:
    if view.mode == "json":
        return json_array(chunk.data for chunk in chunks)
    return b"".join(chunk.data for chunk in chunks)


async def read(
    request: Request,
    view: View,
    reading: Reading,
    headers: dict[str, str],
    release: Callable[[], None] | None = None,
) -> Response:
    """GET on a view: the query's ``offset``, ``live`` and ``cursor`` decide the mode.

    ``release`` is called once an SSE stream ends, however it ends (the caller's count of live reads).
    """
    query = request.query_params
    offsets = query.getlist("offset")
    if len(offsets) > 1:
        raise StreamRequestError("send one offset")
    given = offsets[0] if offsets else None
    live = query.get("live")
    if live not in (None, "long-poll", "sse"):
        raise StreamRequestError("live is long-poll or sse")
    if given == "":
        raise StreamRequestError("the offset is empty")
    if live is not None and given is None:
        raise StreamRequestError(f"{live} needs an offset")
    after = None if given in (None, "-1", "now") else view.position(given)
    if given in (None, "-1"):
        after = 0
    cursor = query.get("cursor")
    # Taken before the first read: a write that lands after it sets the ticket (only live reads wait).
    ticket = reading.waker.watch(view.name) if live is not None else None
    snapshot = await _snapshot(view, reading, after)
    if live == "sse":
        assert ticket is not None
        # The first read's events are held before the answer starts: past the budget, it is a 503.
        opening = await reading.sending.hold(_sse_size(view, snapshot))
        return _sse(view, reading, snapshot, after, cursor, headers, ticket, release, opening)
    if after is None:
        after = snapshot.tail
        if live is None:
            await view.touch()
            headers.update({NEXT: view.offset(after), UP_TO_DATE: "true", "Cache-Control": "no-store"})
            if snapshot.closed:
                headers[CLOSED] = "true"
            headers["Content-Type"] = snapshot.content_type
            return Response(b"[]" if view.mode == "json" else b"", 200, headers)
        snapshot = await _snapshot(view, reading, after)
    if ticket is not None and not snapshot.chunks and after >= snapshot.tail:
        if not snapshot.closed and await reading.waker.wait(ticket, reading.long_poll):
            snapshot = await _snapshot(view, reading, after)
        if not snapshot.chunks:
            await view.touch()
            headers.update({NEXT: view.offset(after), UP_TO_DATE: "true"})
            if snapshot.closed:
                headers[CLOSED] = "true"
            else:
                headers[CURSOR] = response_cursor(cursor)
            return Response(None, 204, headers)
    await view.touch()
    end = snapshot.tail if snapshot.complete else (snapshot.chunks[-1].end if snapshot.chunks else after)
    end = max(end, after)
    headers[NEXT] = view.offset(end)
    if live == "long-poll":
        headers[CURSOR] = response_cursor(cursor)
    if snapshot.complete:
        headers[UP_TO_DATE] = "true"
    closed = snapshot.complete and snapshot.closed
    if closed:
        headers[CLOSED] = "true"
    etag = _etag(view, given or "-1", headers[NEXT], closed)
    headers["ETag"] = etag
    if request.headers.get("if-none-match") == etag:
        return Response(None, 304, {"ETag": etag, **_kept(headers)})
    headers["Content-Type"] = snapshot.content_type
    return Response(_body(view, snapshot.chunks), 200, headers)


def _kept(headers: dict[str, str]) -> dict[str, str]:
    """What a 304 keeps of the answer's headers: the browser ones, and ``Vary`` (RFC 9110 §15.4.5)."""
    return {
        key: value
        for key, value in headers.items()
        if key.lower().startswith(("x-content", "cross-origin", "access", "content-security", "vary"))
    }


def _sse_size(view: View, snapshot: Snapshot) -> int:
    """About the bytes of a read's events: its data, a third more in base64."""
    size = sum(len(chunk.data) for chunk in snapshot.chunks)
    return size * 4 // 3 if view.mode == "base64" else size


def _sse(
    view: View,
    reading: Reading,
    first: Snapshot,
    after: int | None,
    cursor: str | None,
    headers: dict[str, str],
    ticket: asyncio.Event,
    release: Callable[[], None] | None,
    opening: Hold,
) -> Response:
    if view.mode == "base64":
        headers["Stream-SSE-Data-Encoding"] = "base64"
    headers["Cache-Control"] = "no-cache"
    headers["Content-Type"] = "text/event-stream"
    start = first.tail if after is None else after
    events = _events(view, reading, start, cursor, first if after is not None else None, ticket)
    return _EventStream(_held(events, reading.sending, opening), headers, release, opening)


async def _held(events: AsyncGenerator[bytes, None], budget: ByteBudget, opening: Hold) -> AsyncIterator[bytes]:
    """The events, each held on the budget of bytes in flight while the server may still buffer it.

    The server takes an event once the socket has drained the one before it, so an event's
    hold is given back when the next one has been taken. A reader that does not read keeps
    its last events held; a new event that does not fit within the budget's wait ends the
    response, and the reader resumes from the last offset it was given. ``opening`` was
    taken before the answer began (a 503 then), and is the first event's.
    """
    held: Hold | None = None
    spare: Hold | None = opening
    try:
        async with aclosing(events):
            async for event in events:
                hold = spare
                spare = None
                if hold is None:
                    try:
                        hold = await budget.hold(len(event))
                    except Overloaded:
                        return
                hold.resize(len(event))
                yield event
                if held is not None:
                    held.release()
                held = hold
    finally:
        for hold in (held, spare):
            if hold is not None:
                hold.release()


class _EventStream(StreamingResponse):
    """An SSE answer that calls ``release`` and gives back ``opening`` once it is over, however it ends:
    even unstarted, on a disconnect."""

    def __init__(
        self,
        events: AsyncIterator[bytes],
        headers: dict[str, str],
        release: Callable[[], None] | None,
        opening: Hold,
    ) -> None:
        super().__init__(events, 200, headers)
        self._release = release
        self._opening = opening

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._opening.release()
            if self._release is not None:
                self._release()


async def _events(
    view: View,
    reading: Reading,
    after: int,
    cursor: str | None,
    first: Snapshot | None,
    ticket: asyncio.Event,
) -> AsyncGenerator[bytes, None]:
    """Each chunk as a data event followed by its control event; a control event on catching up and as keep-alive.

    Every read is made after the ticket its wait will use was taken, so no write is missed
    between them. The stream ends when the view closes, goes, or fails, or the server stops.
    """
    snapshot = first
    announced = False
    while not reading.stopping.is_set():  # type: ignore[attr-defined]
        if snapshot is None:
            ticket = reading.waker.watch(view.name)
            try:
                snapshot = await _snapshot(view, reading, after)
            except StoreError:
                return
        await view.touch()
        for index, chunk in enumerate(snapshot.chunks):
            after = chunk.end
            last = snapshot.complete and index == len(snapshot.chunks) - 1
            yield sse_data(sse_payload(chunk.data, mode=view.mode)) + sse_control(
                _control(view, after, cursor, up_to_date=last, closed=last and snapshot.closed)
            )
        if not snapshot.chunks:
            after = max(after, snapshot.tail)
            if not announced or snapshot.closed:
                yield sse_control(_control(view, after, cursor, up_to_date=True, closed=snapshot.closed))
        announced = True
        if snapshot.closed and (snapshot.complete or not snapshot.chunks):
            return
        # A read that stopped short goes on at once; one at the tail waits for a write.
        waits = snapshot.complete or not snapshot.chunks
        snapshot = None
        if waits and not await reading.waker.wait(ticket, reading.long_poll):
            if reading.stopping.is_set():  # type: ignore[attr-defined]
                return
            ticket = reading.waker.watch(view.name)
            try:
                snapshot = await _snapshot(view, reading, after)
            except StoreError:
                return
            if not snapshot.chunks and not snapshot.closed:
                yield sse_control(_control(view, after, cursor, up_to_date=True, closed=False))


def _control(view: View, position: int, cursor: str | None, *, up_to_date: bool, closed: bool) -> dict[str, object]:
    fields: dict[str, object] = {"streamNextOffset": view.offset(position)}
    if closed:
        fields["streamClosed"] = True
        return fields
    fields["streamCursor"] = response_cursor(cursor)
    if up_to_date:
        fields["upToDate"] = True
    return fields

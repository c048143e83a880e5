"""Wire-building helpers for client tests: pages, follow frames and mock services."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import httpx

from codec import DeltaData, Event, ReasoningDelta, SessionHeader, TextDelta, encode, pack_page

__all__ = ["Broken", "Service", "collect", "event_frame", "make_events", "page_body", "snapshot_frame", "sse"]


def make_events(count: int, *, start: int = 0) -> list[Event]:
    """A user message every 40 seqs, then text and reasoning delta runs (so pages carry rows)."""
    events = []
    for seq in range(start, start + count):
        phase = seq % 40
        if phase == 0:
            events.append(Event("user/message", seq, 1000 + seq, {"text": f"q{seq}"}, surfaceOp="append"))
        elif phase < 25:
            events.append(Event("assistant/chunk", seq, 1000 + seq, DeltaData(1, 1, TextDelta(0, f" t{seq}"))))
        elif phase < 38:
            events.append(Event("assistant/chunk", seq, 1000 + seq, DeltaData(1, 1, ReasoningDelta(1, f"r{seq}"))))
        else:
            events.append(Event("tool/result", seq, 1000 + seq, {"ok": True, "seq": seq}))
    return events


def page_body(
    events: Sequence[Event], *, from_seq: int | None = None, to_seq: int | None = None, records: Any = None
) -> bytes:
    first = events[0].seq if events else 0 if from_seq is None else from_seq
    from_seq = first if from_seq is None else from_seq
    to_seq = (events[-1].seq + 1 if events else from_seq) if to_seq is None else to_seq
    body = {
        "records": pack_page(events) if records is None else records,
        "hasMore": from_seq > 0,
        "fromSeq": from_seq,
        "toSeq": to_seq,
    }
    return encode(body)


def sse(event: str, data: bytes, event_id: int | None = None) -> bytes:
    head = b"" if event_id is None else b"id: %d\n" % event_id
    return head + b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def event_frame(event: Event) -> bytes:
    return sse("event", encode(event), event.seq)


def snapshot_frame(events: Sequence[Event], cursor: int, *, session: str = "s") -> bytes:
    page = page_body(events, to_seq=cursor + 1)
    header = encode(SessionHeader(id=session, createdAt=0))
    data = b'{"header":%b,"cursor":%d,%b' % (header, cursor, page[1:])
    return sse("snapshot", data, cursor)


Handler = Callable[[httpx.Request], httpx.Response]


class Service:
    """A scripted service for `httpx.MockTransport`: follow connections answer in turn; pages come from a log."""

    def __init__(self, log: Sequence[Event], streams: Iterable[Any] = ()) -> None:
        self.log = list(log)
        self.streams = list(streams)
        self.follows: list[httpx.Request] = []
        self.pages: list[httpx.Request] = []
        self.asynchronous = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/follow"):
            self.follows.append(request)
            if not self.streams:
                return httpx.Response(503, json={"error": {"code": "gone", "message": "no more streams"}})
            stream = self.streams.pop(0)
            if isinstance(stream, httpx.Response):
                return stream
            if isinstance(stream, Broken) and self.asynchronous:
                stream = stream.chunks_async()
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream)
        self.pages.append(request)
        through = int(request.url.params["through"]) if "through" in request.url.params else len(self.log) - 1
        # Pages of at most 10 events, ending at the cursor: the client must join several.
        start = max(0, through + 1 - 10)
        return httpx.Response(200, content=page_body(self.log[start : through + 1], from_seq=start, to_seq=through + 1))


class Broken:
    """Stream content that yields its chunks and then breaks the connection, sync or async."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def __iter__(self) -> Any:
        yield from self.chunks
        raise httpx.ReadError("connection reset by peer")

    async def chunks_async(self) -> Any:
        for chunk in self.chunks:
            yield chunk
        raise httpx.ReadError("connection reset by peer")


def collect(
    service: Service,
    *,
    mode: str,
    limit: int,
    after: int | None = None,
    backoff: Any = None,
    on_connection: Any = None,
    **options: Any,
) -> list[Event]:
    """Follow through the scripted service until ``limit`` events arrive; errors propagate."""
    from history_client import AsyncHistoryClient, Backoff, HistoryClient

    service.asynchronous = mode == "async"
    if backoff is None:
        backoff = Backoff(base=0.001, cap=0.002, max_retries=options.pop("max_retries", 3))
    received: list[Event] = []
    if mode == "sync":
        with HistoryClient("http://test", transport=httpx.MockTransport(service), backoff=backoff, **options) as client:
            for event in client.follow("s", after=after, on_connection=on_connection):
                received.append(event)
                if len(received) == limit:
                    break
        return received

    import anyio

    async def run() -> None:
        transport = httpx.MockTransport(service)
        async with AsyncHistoryClient("http://test", transport=transport, backoff=backoff, **options) as client:
            async for event in client.follow("s", after=after, on_connection=on_connection):
                received.append(event)
                if len(received) == limit:
                    break

    anyio.run(run)
    return received

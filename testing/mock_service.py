"""A scripted service for ``httpx.MockTransport``, and a follow through it with either client."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import anyio
import httpx

from codec import Event
from history_client import AsyncHistoryClient, Backoff, HistoryClient
from testing.wire import page_body

__all__ = ["Broken", "Service", "collect"]


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
    packed: bool = True,
    **options: Any,
) -> list[Event]:
    """Follow through the scripted service until ``limit`` events arrive; errors propagate."""
    service.asynchronous = mode == "async"
    if backoff is None:
        backoff = Backoff(base=0.001, cap=0.002, max_retries=options.pop("max_retries", 3))
    received: list[Event] = []
    if mode == "sync":
        with HistoryClient("http://test", transport=httpx.MockTransport(service), backoff=backoff, **options) as client:
            for event in client.follow("s", after=after, on_connection=on_connection, packed=packed):
                received.append(event)
                if len(received) == limit:
                    break
        return received

    async def run() -> None:
        transport = httpx.MockTransport(service)
        async with AsyncHistoryClient("http://test", transport=transport, backoff=backoff, **options) as client:
            async for event in client.follow("s", after=after, on_connection=on_connection, packed=packed):
                received.append(event)
                if len(received) == limit:
                    break

    anyio.run(run)
    return received

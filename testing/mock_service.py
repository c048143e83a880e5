"""A scripted service for ``httpx.MockTransport``, and a follow through it with either client."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import anyio
import httpx

from codec import Event
from history_client import AsyncHistoryClient, Backoff, HistoryClient
from testing.wire import page_body

__all__ = ["Broken", "Service", "Silent", "collect"]


class Service:
    """A scripted service for `httpx.MockTransport`: follow connections answer in turn; pages come from a log.

    A session's own address answers its header (naming ``incarnation``, if given) and
    ``head`` (the log's last seq unless given).
    """

    def __init__(
        self,
        log: Sequence[Event],
        streams: Iterable[Any] = (),
        *,
        head: int | None = None,
        incarnation: str | None = None,
    ) -> None:
        self.log = list(log)
        self.streams = list(streams)
        self.head = len(self.log) - 1 if head is None else head
        self.incarnation = incarnation
        self.follows: list[httpx.Request] = []
        self.pages: list[httpx.Request] = []
        self.states: list[httpx.Request] = []
        self.asynchronous = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith(("/follow", "/page")):
            self.states.append(request)
            header = {"type": "session", "version": 0, "id": request.url.path.rsplit("/", 1)[-1], "createdAt": 0}
            if self.incarnation is not None:
                header["incarnation"] = self.incarnation
            return httpx.Response(200, json={"header": header, "headSeq": self.head})
        if request.url.path.endswith("/follow"):
            self.follows.append(request)
            if not self.streams:
                return httpx.Response(503, json={"error": {"code": "gone", "message": "no more streams"}})
            stream = self.streams.pop(0)
            if isinstance(stream, httpx.Response):
                return stream
            if isinstance(stream, Broken | Silent) and self.asynchronous:
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


class Silent:
    """Stream content that yields its chunks and then stays open: only pings (sync), or nothing at all (async)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def __iter__(self) -> Any:
        yield from self.chunks
        while True:
            time.sleep(0.01)
            yield b": ping\n\n"

    async def chunks_async(self) -> Any:
        for chunk in self.chunks:
            yield chunk
        await anyio.sleep_forever()


def collect(
    service: Service,
    *,
    mode: str,
    limit: int,
    after: int | None = None,
    backoff: Any = None,
    on_connection: Any = None,
    packed: bool = True,
    follow: Mapping[str, Any] | None = None,
    **options: Any,
) -> list[Event]:
    """Follow through the scripted service until ``limit`` events arrive or it ends; errors propagate.

    ``follow`` holds further arguments of ``follow``; ``options`` are the client's.
    """
    extra = dict(follow or {})
    service.asynchronous = mode == "async"
    if backoff is None:
        backoff = Backoff(base=0.001, cap=0.002, max_retries=options.pop("max_retries", 3))
    received: list[Event] = []
    if mode == "sync":
        with HistoryClient("http://test", transport=httpx.MockTransport(service), backoff=backoff, **options) as client:
            for event in client.follow("s", after=after, on_connection=on_connection, packed=packed, **extra):
                received.append(event)
                if len(received) == limit:
                    break
        return received

    async def run() -> None:
        transport = httpx.MockTransport(service)
        async with AsyncHistoryClient("http://test", transport=transport, backoff=backoff, **options) as client:
            async for event in client.follow("s", after=after, on_connection=on_connection, packed=packed, **extra):
                received.append(event)
                if len(received) == limit:
                    break

    anyio.run(run)
    return received

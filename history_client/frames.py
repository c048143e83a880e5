"""The events of an open ``text/event-stream`` response, read one at a time, for either client."""

from __future__ import annotations

from collections import deque

import httpx

from history_client.sse import ServerSentEvent, SSEDecoder

__all__ = ["AsyncFrames", "SyncFrames"]


class AsyncFrames:
    """The events of an open follow response, one at a time; ``None`` once the stream ends."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks = response.aiter_bytes()
        self._decoder = SSEDecoder()
        self._ready: deque[ServerSentEvent] = deque()

    async def next(self) -> ServerSentEvent | None:
        while not self._ready:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                return None
            self._ready.extend(self._decoder.feed(chunk))
        return self._ready.popleft()

    async def aclose(self) -> None:
        await self._response.aclose()


class SyncFrames:
    """As `AsyncFrames`, for the synchronous client."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks = response.iter_bytes()
        self._decoder = SSEDecoder()
        self._ready: deque[ServerSentEvent] = deque()

    def next(self) -> ServerSentEvent | None:
        while not self._ready:
            chunk = next(self._chunks, None)
            if chunk is None:
                return None
            self._ready.extend(self._decoder.feed(chunk))
        return self._ready.popleft()

    def close(self) -> None:
        self._response.close()

"""The events of an open ``text/event-stream`` response, read one at a time, for either client.

``next(deadline)`` answers `IDLE` when ``deadline`` (``time.monotonic()``) passes before an
event does. The async reader stops waiting at the deadline; the sync one can only look
between reads, after each chunk (a ping is one) or a read that timed out.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

import httpx

from history_client.follow import IDLE, Idle
from history_client.sse import ServerSentEvent, SSEDecoder

__all__ = ["AsyncFrames", "SyncFrames"]


class AsyncFrames:
    """The events of an open follow response, one at a time; ``None`` once the stream ends."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks = response.aiter_bytes()
        self._decoder = SSEDecoder()
        self._ready: deque[ServerSentEvent] = deque()

    async def next(self, deadline: float | None = None) -> ServerSentEvent | Idle | None:
        while not self._ready:
            try:
                if deadline is None:
                    chunk = await anext(self._chunks)
                else:
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        chunk = await anext(self._chunks)
            except StopAsyncIteration:
                return None
            except (TimeoutError, httpx.ReadTimeout):
                if deadline is not None and time.monotonic() >= deadline:
                    return IDLE
                raise
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

    def next(self, deadline: float | None = None) -> ServerSentEvent | Idle | None:
        while not self._ready:
            if deadline is not None and time.monotonic() >= deadline:
                return IDLE
            try:
                chunk = next(self._chunks, None)
            except httpx.ReadTimeout:
                if deadline is not None and time.monotonic() >= deadline:
                    return IDLE
                raise
            if chunk is None:
                return None
            self._ready.extend(self._decoder.feed(chunk))
        return self._ready.popleft()

    def close(self) -> None:
        self._response.close()

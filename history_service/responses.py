"""Responses that say when they are over: a page sent as the parts it was spliced from (docs/protocol.md §4.3),
and a follow stream."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from typing import Any, Final

from starlette.responses import Response, StreamingResponse

from history_service.encoding import gather

__all__ = ["EndedStreamingResponse", "PartsResponse", "SEND_SIZE"]

# Parts are gathered into sends of about this size: few enough sends, and each copy small.
SEND_SIZE: Final = 256 * 1024


class PartsResponse(Response):
    """A ``Content-Length`` response whose body is ``parts`` in order, never joined into one buffer.

    A page's parts are its stored records' own bytes; joining them would hold the page
    twice. Runs of small parts are joined into sends of about `SEND_SIZE`.
    """

    def __init__(
        self,
        parts: Sequence[bytes | memoryview],
        size: int,
        *,
        media_type: str,
        headers: Mapping[str, str],
        sent: Callable[[], None] | None = None,
    ) -> None:
        self.parts = parts
        self._sent = sent
        super().__init__(None, media_type=media_type, headers={**headers, "Content-Length": str(size)})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            if scope.get("method") != "HEAD":
                for chunk in gather(self.parts, SEND_SIZE):
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.parts = ()
            if self._sent is not None:
                self._sent()


class EndedStreamingResponse(StreamingResponse):
    """A streaming response that calls ``ended`` once it is over, however it ends."""

    def __init__(self, content: AsyncIterable[bytes | memoryview], *, ended: Callable[[], None], **kwargs: Any) -> None:
        self._ended = ended
        super().__init__(content, **kwargs)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._ended()

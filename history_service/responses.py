"""Responses that say when they are over: a page sent as the parts it was spliced from (docs/protocol.md §4.3),
and a follow stream."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Mapping, Sequence
from typing import Any, Final

from starlette.responses import Response, StreamingResponse

from history_service.encoding import gather

__all__ = ["EndedStreamingResponse", "JsonResponse", "PartsResponse", "SEND_SIZE"]

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
            last: bytes | memoryview = b""
            if scope.get("method") != "HEAD":
                # The last chunk goes with the end of the body: a small page is one send.
                for i, chunk in enumerate(gather(self.parts, SEND_SIZE)):
                    if i:
                        await send({"type": "http.response.body", "body": last, "more_body": True})
                    last = chunk
            await send({"type": "http.response.body", "body": last, "more_body": False})
        finally:
            self.parts = ()
            if self._sent is not None:
                self._sent()


class JsonResponse(Response):
    """An ``application/json`` body already encoded: Starlette's `Response` with its two headers made directly.

    The headers are those `Response` makes for it (``content-length``, then ``content-type``),
    without its general header handling, which a small answer such as an append's pays for.
    """

    media_type = "application/json"

    def __init__(self, body: bytes, status_code: int = 200) -> None:
        if status_code < 200 or status_code in (204, 304):
            raise ValueError(f"a {status_code} answer has no body")
        self.status_code = status_code
        self.body = body
        self.background = None
        self.raw_headers = [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]


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

"""A response whose body is sent as the parts it was spliced from (docs/protocol.md §4.3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from starlette.responses import Response

from history_service.encoding import gather

__all__ = ["PartsResponse"]

# Parts are gathered into sends of about this size: few enough sends, and each copy small.
SEND_SIZE: Final = 256 * 1024


class PartsResponse(Response):
    """A ``Content-Length`` response whose body is ``parts`` in order, never joined into one buffer.

    A page's parts are its stored records' own bytes; joining them would hold the page
    twice. Runs of small parts are joined into sends of about `SEND_SIZE`.
    """

    def __init__(
        self, parts: Sequence[bytes | memoryview], size: int, *, media_type: str, headers: Mapping[str, str]
    ) -> None:
        self.parts = parts
        super().__init__(None, media_type=media_type, headers={**headers, "Content-Length": str(size)})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        if scope.get("method") != "HEAD":
            for chunk in gather(self.parts, SEND_SIZE):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

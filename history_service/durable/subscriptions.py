"""The reserved subscription API under ``/ds/v1/stream/__ds/`` (docs/protocol.md §10.6): webhooks and pull-wake.

Not written yet: every request here answers 501.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from history_service.settings import Settings
from persistence.streams import StreamStore

__all__ = ["Subscriptions"]


class Subscriptions:
    """Subscriptions of this process: matched against every write to a generic stream."""

    def __init__(self, settings: Settings, streams: StreamStore | None, changed: Callable[[str], None]) -> None:
        self._settings = settings
        self._streams = streams
        self._changed = changed

    async def handle(self, request: Request, path: str, owner: str, headers: dict[str, str]) -> Response:
        """A request to ``__ds/<path>``."""
        return PlainTextResponse("subscriptions are not served yet", 501, headers)

    def on_append(self, name: str, owner: str) -> None:
        """A write to the stream ``name`` committed (a create with a body, an append, a close)."""

    def on_delete(self, name: str, owner: str) -> None:
        """The stream ``name`` was deleted."""

    async def run(self) -> None:
        """The deliveries' background work, for the app's lifespan to run until it cancels it."""

    def close(self) -> None:
        """Stop taking work: the app is shutting down."""

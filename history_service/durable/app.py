"""The Durable Streams server, mounted at ``/ds`` (docs/protocol.md §13): its routes, headers and refusals.

``/ds/v1/stream/{name}`` is a generic stream on the store; ``/ds/v1/stream/__ds/...`` the
reserved subscription API (`history_service.durable.subscriptions`);
``/ds/v1/session/{id}`` a session read as a stream (`history_service.durable.sessions`).
Every answer carries the protocol's browser headers, errors included. A refusal is plain
text, as the protocol's peers answer; credentials are checked as on the rest of the API.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route

from codec import CodecError, stream_offset
from history_service.auth import principal
from history_service.durable.live import SharedReads, Waker
from history_service.durable.reading import NEXT, Reading, View, read
from history_service.durable.sessions import SESSION_KEY, session
from history_service.durable.streams import StreamView, append, create, delete, head
from history_service.durable.subscriptions import Subscriptions
from history_service.errors import BodyTooLarge, Overloaded
from history_service.requests import read_body
from history_service.service import HistoryService
from history_service.settings import Settings
from persistence import (
    ProducerFencedError,
    ProducerGapError,
    StreamClosedError,
    StreamConflictError,
    StreamError,
    StreamGoneError,
    StreamNotFoundError,
    StreamRequestError,
)

__all__ = ["Durable", "durable_mount"]

logger = logging.getLogger(__name__)

PREFIX: Final = "/ds"
# Stream names under this prefix are the protocol's own API (`history_service.durable.subscriptions`).
RESERVED: Final = "__ds/"
_METHODS: Final = ["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"]
_MAX_NAME: Final = 1024
_BROWSER: Final = {
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Resource-Policy": "cross-origin",
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Expose-Headers": (
        "Stream-Next-Offset, Stream-Cursor, Stream-Up-To-Date, Stream-Closed, Stream-TTL, Stream-Expires-At, "
        "Stream-SSE-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, "
        "ETag, Content-Type, Location"
    ),
}
_PREFLIGHT: Final = {
    "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, HEAD, OPTIONS",
    "Access-Control-Allow-Headers": (
        "Content-Type, Authorization, X-Principal, If-None-Match, Stream-Seq, Stream-TTL, Stream-Expires-At, "
        "Stream-Closed, Producer-Id, Producer-Epoch, Producer-Seq, Stream-Forked-From, Stream-Fork-Offset, "
        "Stream-Fork-Sub-Offset"
    ),
    "Access-Control-Max-Age": "600",
}


class Durable:
    """One app's Durable Streams: the store's streams, the waker, and the read limits."""

    def __init__(self, settings: Settings, service: HistoryService) -> None:
        self.settings = settings
        self.service = service
        self.streams = service.store.streams
        self.waker = Waker()
        self.stopping = anyio.Event()
        self.reading = Reading(
            waker=self.waker,
            shared=SharedReads(self.waker),
            long_poll=settings.ds_long_poll,
            budget=settings.ds_read_bytes,
            stopping=self.stopping,
        )
        self.subscriptions = Subscriptions(settings, self.streams, self.changed)
        self.live = 0

    def changed(self, name: str | None) -> None:
        """A write to ``name`` committed, here or in another process (``None``: perhaps to any): wake its readers."""
        if name is None:
            self.waker.wake_all()
        else:
            self.waker.wake(name)

    async def read(self, request: Request, view: View, headers: dict[str, str]) -> Response:
        """A read within the service's bounds: a live one counts as a follow stream (`Settings.follower_cap`),
        a catch-up one holds its bytes in the budget of bytes in flight (§4.6) until they are sent."""
        service = self.service
        if request.query_params.get("live") in ("long-poll", "sse"):
            if self.live + service.followers >= self.settings.follower_cap:
                raise Overloaded(f"{self.live + service.followers} live reads are open, the most this server keeps")
            self.live += 1
            try:
                response = await read(request, view, self.reading, headers)
            except BaseException:
                self.live -= 1
                raise
            response.background = BackgroundTask(self._left)
            return response
        held = await service.reading.hold(self.settings.ds_read_bytes)
        try:
            response = await read(request, view, self.reading, headers)
        finally:
            held.release()
        sending = await service.sending.hold(len(response.body))
        response.background = BackgroundTask(sending.release)
        return response

    def _left(self) -> None:
        self.live -= 1

    def session_changed(self, session_id: str) -> None:
        """A session's head moved, or it closed or went: wake its readers."""
        self.waker.wake(SESSION_KEY + session_id)

    def close(self) -> None:
        self.stopping.set()
        self.waker.wake_all()
        self.subscriptions.close()


def _headers() -> dict[str, str]:
    return dict(_BROWSER)


def _refusal(exc: Exception, headers: dict[str, str]) -> Response:
    status = 400
    if isinstance(exc, StreamNotFoundError):
        status = 404
    elif isinstance(exc, StreamGoneError):
        status = 410
    elif isinstance(exc, ProducerFencedError):
        status = 403
        headers["Producer-Epoch"] = str(exc.epoch)
    elif isinstance(exc, ProducerGapError):
        status = 409
        headers["Producer-Expected-Seq"] = str(exc.expected)
        headers["Producer-Received-Seq"] = str(exc.received)
    elif isinstance(exc, StreamClosedError):
        status = 409
        headers["Stream-Closed"] = "true"
        headers[NEXT] = stream_offset(exc.tail)
    elif isinstance(exc, StreamConflictError):
        status = 409
    elif isinstance(exc, BodyTooLarge):
        status = 413
    return PlainTextResponse(str(exc), status, headers)


Handler = Callable[[Request, Durable, str, dict[str, str]], Awaitable[Response]]


def _guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        headers = _headers()
        if request.method == "OPTIONS":
            return Response(None, 204, {**headers, **_PREFLIGHT})
        durable: Durable = request.state.durable
        try:
            owner = principal(request, durable.settings)
            return await handler(request, durable, owner, headers)
        except (StreamError, CodecError, BodyTooLarge) as exc:
            if request.method == "HEAD":
                return Response(None, _refusal(exc, headers).status_code, headers)
            return _refusal(exc, headers)

    return endpoint


def _name(request: Request) -> str:
    name: str = request.path_params["name"]
    if not name or len(name) > _MAX_NAME or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise StreamRequestError("a stream name is 1 to 1024 characters, none of them control characters")
    return name


async def _stream(request: Request, durable: Durable, owner: str, headers: dict[str, str]) -> Response:
    name = _name(request)
    if name.startswith(RESERVED):
        return await durable.subscriptions.handle(request, name[len(RESERVED) :], owner, headers)
    streams = durable.streams
    if streams is None:
        return PlainTextResponse("this store keeps no Durable Streams (docs/protocol.md §13)", 501, headers)
    method = request.method
    if method == "GET":
        meta = await streams.head(name, owner)
        return await durable.read(request, StreamView(streams, name, owner, meta), headers)
    if method == "HEAD":
        response = await head(streams, name, owner)
    elif method == "PUT":
        body = bytes(await read_body(request, durable.settings.max_body_bytes))
        response, created = await create(request, streams, name, owner, body)
        if created and body:
            durable.changed(name)
            durable.subscriptions.on_append(name, owner)
    elif method == "POST":
        body = bytes(await read_body(request, durable.settings.max_body_bytes))
        response = await append(request, streams, name, owner, body)
        durable.changed(name)
        durable.subscriptions.on_append(name, owner)
    elif method == "DELETE":
        response = await delete(streams, name, owner)
        durable.changed(name)
        durable.subscriptions.on_delete(name, owner)
    else:
        return PlainTextResponse("method not allowed", 405, {**headers, "Allow": "GET, HEAD, PUT, POST, DELETE"})
    response.headers.update(headers)
    return response


async def _session(request: Request, durable: Durable, owner: str, headers: dict[str, str]) -> Response:
    return await session(request, durable.service, durable.read, owner, headers)


def durable_mount() -> Mount:
    """The ``/ds`` mount; the app's lifespan puts its `Durable` in the request state."""
    sessions = _guarded(_session)
    return Mount(
        PREFIX,
        routes=[
            Route("/v1/stream/{name:path}", _guarded(_stream), methods=_METHODS),
            Route("/v1/session/{session_id}", sessions, methods=_METHODS),
            Route("/v1/session/{session_id}/subagents/{child_id}", sessions, methods=_METHODS),
        ],
    )

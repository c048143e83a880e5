"""The Durable Streams server, mounted at ``/ds`` (docs/protocol.md §13): its routes, headers and refusals.

``/ds/v1/stream/{name}`` is a generic stream on the store; ``/ds/v1/stream/__ds/...`` the
reserved subscription API (`history_service.durable.subscriptions`);
``/ds/v1/session/{id}`` a session read as a stream (`history_service.durable.sessions`).
Every answer carries the protocol's browser headers, errors included. A refusal is plain
text, as the protocol's peers answer; credentials are checked as on the rest of the API.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import anyio
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from codec import CodecError, Event, stream_offset
from history_service.auth import principal
from history_service.cors import ALLOW_HEADERS, ALLOW_METHODS, MAX_AGE
from history_service.durable.expiry import StreamExpiry
from history_service.durable.live import SharedReads, Waker
from history_service.durable.reading import NEXT, Reading, View, read
from history_service.durable.sessions import SESSION_KEY, session
from history_service.durable.streams import StreamView, append, checked_name, create, delete, head
from history_service.durable.subscriptions import Subscriptions
from history_service.errors import BodyTooLarge, answer_for
from history_service.notices import Subscriber
from history_service.requests import read_body
from history_service.service import HistoryService
from history_service.settings import Settings
from persistence import (
    ProducerFencedError,
    ProducerGapError,
    StreamClosedError,
    StreamError,
)

__all__ = ["Durable", "durable_mount"]

logger = logging.getLogger(__name__)

PREFIX: Final = "/ds"
# Stream names under this prefix are the protocol's own API (`history_service.durable.subscriptions`).
RESERVED: Final = "__ds/"
_METHODS: Final = ["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"]
# A session read as a stream takes no writes: the router answers them 405.
_READS: Final = ["GET", "HEAD", "OPTIONS"]
# The protocol's browser headers, on every answer. Cross-origin access is the app's CORS policy
# (`history_service.cors`, ``HISTORY_CORS_ORIGINS``), as on every route: never a wildcard of our own.
# A stream holds what its writers sent, HTML included: served in a sandbox, it runs nothing on our origin.
_BROWSER: Final = {
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Resource-Policy": "cross-origin",
    "Content-Security-Policy": "sandbox",
}
# A preflight the CORS middleware did not answer (no origins configured): what the protocol allows,
# and no Access-Control-Allow-Origin, so a browser on another origin still may not go on.
_PREFLIGHT: Final = {
    "Access-Control-Allow-Methods": ", ".join(ALLOW_METHODS),
    "Access-Control-Allow-Headers": ", ".join(ALLOW_HEADERS),
    "Access-Control-Max-Age": str(MAX_AGE),
}


class Durable(Subscriber):
    """One app's Durable Streams: the store's streams, the waker, the read limits, and the stream sweep.

    It subscribes to the service's `Notices`, the one fan-out the session follow hears too: a write
    through this process (`changed`) and another process's notice wake its readers the same way.
    Live reads count under the service's `FollowerCap`, and end on the service's one shutdown signal.
    """

    def __init__(self, settings: Settings, service: HistoryService) -> None:
        self.settings = settings
        self.service = service
        self.streams = service.store.streams
        self.waker = Waker()
        self.reading = Reading(
            waker=self.waker,
            shared=SharedReads(self.waker),
            long_poll=settings.ds_long_poll,
            budget=settings.ds_read_bytes,
            stopping=service.closing,
            sending=service.sending,
        )
        self.subscriptions = Subscriptions(settings, self.streams, self.changed)
        self.expiry = (
            None
            if self.streams is None
            else StreamExpiry(
                self.streams, batch=settings.sweep_batch, turn=service.sweeping, changed=service.notices.stream_changed
            )
        )
        service.notices.subscribe(self)

    async def run(self) -> None:
        """The background work, for the app's lifespan to run until it cancels it: deliveries, and the stream sweep."""
        async with anyio.create_task_group() as tasks:
            if self.expiry is not None and self.settings.sweep_interval > 0:
                tasks.start_soon(self.expiry.run, self.settings.sweep_interval)
            await self.subscriptions.run()
            tasks.cancel_scope.cancel()

    def changed(self, name: str) -> None:
        """A write to ``name`` committed through this process: its readers wake, through the one fan-out."""
        self.service.notices.stream_written(name)

    def stream_written(self, name: str) -> None:
        self.waker.wake(name)

    def stream_changed(self, name: str | None) -> None:
        """``name`` changed where no one here saw it (``None``: perhaps any): its readers and subscriptions wake."""
        if name is None:
            self.waker.wake_all()
        else:
            self.waker.wake(name)
        self.subscriptions.heard(name)

    async def resync(self) -> None:
        self.stream_changed(None)

    def publish(self, session_id: str, events: Sequence[Event], incarnation: str | None = None) -> None:
        self.waker.wake(SESSION_KEY + session_id)

    def advanced(self, session_id: str, head: int, closed: bool = False) -> None:
        self.waker.wake(SESSION_KEY + session_id)

    def deleted(self, session_ids: Sequence[str]) -> None:
        for session_id in session_ids:
            self.waker.wake(SESSION_KEY + session_id)

    def gone(self, session_id: str, incarnation: str | None) -> None:
        self.waker.wake(SESSION_KEY + session_id)

    async def read(self, request: Request, view: View, headers: dict[str, str]) -> Response:
        """A read within the service's bounds: a live one counts as a follow stream (`Settings.follower_cap`);
        every answer holds its bytes in the budget of bytes in flight (§4.6) until they are sent, an
        SSE one each event until the server has taken the next (`history_service.durable.reading`)."""
        service = self.service
        if request.query_params.get("live") in ("long-poll", "sse"):
            # One cap with `session.follow`'s: both kinds together stay within it.
            service.cap.admit()
            released = False

            def release() -> None:
                nonlocal released
                if not released:
                    released = True
                    service.cap.leave()

            try:
                response = await read(request, view, self.reading, headers, release)
            except BaseException:
                release()
                raise
            if isinstance(response, StreamingResponse):
                return response
            release()
            return await self._sent(response)
        held = await service.reading.hold(self.settings.ds_read_bytes)
        try:
            response = await read(request, view, self.reading, headers)
        finally:
            held.release()
        return await self._sent(response)

    async def _sent(self, response: Response) -> Response:
        """The answer, its body held on the budget of bytes in flight until the server has sent it."""
        sending = await self.service.inflight.to_send(len(response.body))
        response.background = BackgroundTask(sending.release)
        return response

    def close(self) -> None:
        """Shut down: the one shutdown signal is set (`HistoryService.closing`), and every reader wakes to see it."""
        self.service.closing.set()
        self.waker.wake_all()
        self.subscriptions.close()


def _headers() -> dict[str, str]:
    return dict(_BROWSER)


def _refusal(exc: Exception, headers: dict[str, str]) -> Response:
    """A refusal as plain text, its status the one error table's (`history_service.errors.ERRORS`)."""
    answer = answer_for(type(exc))
    status = 400 if answer is None else answer.status
    if isinstance(exc, ProducerFencedError):
        headers["Producer-Epoch"] = str(exc.epoch)
    elif isinstance(exc, ProducerGapError):
        headers["Producer-Expected-Seq"] = str(exc.expected)
        headers["Producer-Received-Seq"] = str(exc.received)
    elif isinstance(exc, StreamClosedError):
        headers["Stream-Closed"] = "true"
        headers[NEXT] = stream_offset(exc.tail, exc.life)
    return PlainTextResponse(str(exc), status, headers)


Handler = Callable[[Request, Durable, str | None, dict[str, str]], Awaitable[Response]]
_WAKE_ROUTE: Final = re.compile(r"/ds/v1/stream/__ds/subscriptions/[^/]+/(callback|ack|release)")


def _guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        headers = _headers()
        if request.method == "OPTIONS":
            return Response(None, 204, {**headers, **_PREFLIGHT})
        durable: Durable = request.state.durable
        try:
            # A wake's callback, ack or release carries the wake's token where the API's credentials
            # go (the protocol's choice): in token mode it proves itself by that token alone.
            by_token = durable.settings.auth == "token" and _WAKE_ROUTE.fullmatch(request.url.path) is not None
            owner = None if by_token else principal(request, durable.settings)
            return await handler(request, durable, owner, headers)
        except (StreamError, CodecError, BodyTooLarge) as exc:
            if request.method == "HEAD":
                return Response(None, _refusal(exc, headers).status_code, headers)
            return _refusal(exc, headers)

    return endpoint


def _name(request: Request) -> str:
    return checked_name(request.path_params["name"])


async def _stream(request: Request, durable: Durable, owner: str | None, headers: dict[str, str]) -> Response:
    name = _name(request)
    if name.startswith(RESERVED):
        return await durable.subscriptions.handle(request, name[len(RESERVED) :], owner, headers)
    assert owner is not None
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
        response, created = await create(
            request, streams, name, owner, body, max_values=durable.settings.max_body_values
        )
        if created and body:
            durable.changed(name)
            await durable.subscriptions.on_append(name, owner)
    elif method == "POST":
        body = bytes(await read_body(request, durable.settings.max_body_bytes))
        response = await append(request, streams, name, owner, body, max_values=durable.settings.max_body_values)
        durable.changed(name)
        await durable.subscriptions.on_append(name, owner)
    elif method == "DELETE":
        response = await delete(streams, name, owner)
        durable.changed(name)
        await durable.subscriptions.on_delete(name, owner)
    else:
        return PlainTextResponse("method not allowed", 405, {**headers, "Allow": "GET, HEAD, PUT, POST, DELETE"})
    response.headers.update(headers)
    return response


async def _session(request: Request, durable: Durable, owner: str | None, headers: dict[str, str]) -> Response:
    assert owner is not None
    return await session(request, durable.service, durable.read, owner, headers)


def durable_mount() -> Mount:
    """The ``/ds`` mount; the app's lifespan puts its `Durable` in the request state."""
    sessions = _guarded(_session)
    return Mount(
        PREFIX,
        routes=[
            Route("/v1/stream/{name:path}", _guarded(_stream), methods=_METHODS),
            Route("/v1/session/{session_id}", sessions, methods=_READS),
            Route("/v1/session/{session_id}/subagents/{child_id}", sessions, methods=_READS),
        ],
    )

"""The Durable Streams server, mounted at ``/ds`` (docs/protocol.md §13): its runtime, headers and refusals.

`history_service.durable.routes` declares the routes: a generic stream on the store
(`stream_handler`), the reserved subscription API (`history_service.durable.subscription_api`),
and a session read as a stream (`session_handler`). Each is `guarded`: every answer carries
the protocol's browser headers, errors included, and credentials are checked as on the rest
of the API. A refusal is plain text, as the protocol's peers answer, its status the one
error table's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import anyio
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from codec import CodecError, Event, stream_offset
from history_service.answers import answer_for
from history_service.auth import principal
from history_service.cors import ALLOW_HEADERS, ALLOW_METHODS, MAX_AGE
from history_service.durable.expiry import StreamExpiry
from history_service.durable.live import SharedReads, Waker
from history_service.durable.reading import NEXT, Reading, View, read
from history_service.durable.sessions import SESSION_KEY, session
from history_service.durable.streams import StreamView, append, checked_name, create, delete, head, unkept
from history_service.durable.subscriptions import Subscriptions
from history_service.errors import BodyTooLarge, NoAcceptableType
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

__all__ = ["METHODS", "Durable", "Handler", "guarded", "not_allowed", "session_handler", "stream_handler"]

logger = logging.getLogger(__name__)

# The methods the protocol names; any other is refused 405 before a route looks at it.
METHODS: Final = ("GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS")
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
    """A refusal as plain text, its status the one error table's (`history_service.answers.ERRORS`)."""
    answer = answer_for(type(exc))
    assert answer is not None, "every error class is in ERRORS"
    if isinstance(exc, ProducerFencedError):
        headers["Producer-Epoch"] = str(exc.epoch)
    elif isinstance(exc, ProducerGapError):
        headers["Producer-Expected-Seq"] = str(exc.expected)
        headers["Producer-Received-Seq"] = str(exc.received)
    elif isinstance(exc, StreamClosedError):
        headers["Stream-Closed"] = "true"
        headers[NEXT] = stream_offset(exc.tail, exc.life)
    return PlainTextResponse(str(exc), answer.status, headers)


def not_allowed(allowed: str, headers: dict[str, str]) -> Response:
    """A method the route does not serve, refused as the protocol's peers do: plain text, naming the ones it does."""
    return PlainTextResponse("method not allowed", 405, {**headers, "Allow": allowed})


Handler = Callable[[Request, Durable, str | None, dict[str, str]], Awaitable[Response]]


def guarded(handler: Handler, *, by_token: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of ``handler``: the preflight, the caller's principal (none when the route proves itself
    ``by_token``, in token mode), the browser headers, and the refusals."""

    async def endpoint(request: Request) -> Response:
        if request.method not in METHODS:
            raise HTTPException(405, headers={"Allow": ", ".join(METHODS)})
        headers = _headers()
        if request.method == "OPTIONS":
            return Response(None, 204, {**headers, **_PREFLIGHT})
        durable: Durable = request.state.durable
        try:
            # A wake's callback, ack or release carries the wake's token where the API's credentials
            # go (the protocol's choice): in token mode it proves itself by that token alone.
            owner = None if by_token and durable.settings.auth == "token" else principal(request, durable.settings)
            return await handler(request, durable, owner, headers)
        except (StreamError, CodecError, BodyTooLarge, NoAcceptableType) as exc:
            if request.method == "HEAD":
                return Response(None, _refusal(exc, headers).status_code, headers)
            return _refusal(exc, headers)

    return endpoint


def _name(request: Request) -> str:
    return checked_name(request.path_params["name"])


async def stream_handler(request: Request, durable: Durable, owner: str | None, headers: dict[str, str]) -> Response:
    """A generic stream: read, head, create, append and close, or delete it."""
    name = _name(request)
    assert owner is not None
    streams = durable.streams
    if streams is None:
        return unkept(headers)
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
        return not_allowed("GET, HEAD, PUT, POST, DELETE", headers)
    response.headers.update(headers)
    return response


async def session_handler(request: Request, durable: Durable, owner: str | None, headers: dict[str, str]) -> Response:
    """A session, or a subagent child through its parent, read as a stream."""
    assert owner is not None
    return await session(request, durable.service, durable.read, owner, headers)

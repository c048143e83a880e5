"""HTTP endpoints: parse (`history_service.requests`), call the service, render. Nothing else lives here.

Errors are not answered here: each is raised as it happened, and `history_service.errors`
answers it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from codec import encode
from history_service import bodies
from history_service.answers import stream_error, tracebacks_of
from history_service.auth import principal
from history_service.follow_coding import FOLLOW_CODINGS, frame_coder
from history_service.follow_frames import sse_frame
from history_service.listing import Listed
from history_service.logs import Tracebacks
from history_service.params import SearchParams
from history_service.readiness import readiness
from history_service.requests import (
    accepted_coding,
    address,
    create_params,
    cursor_for,
    follow_params,
    list_params,
    matches_etag,
    no_params,
    page_query,
    query,
    read_events,
    read_header,
)
from history_service.responses import EndedStreamingResponse, JsonResponse, PartsResponse
from history_service.service import HistoryService
from persistence import SessionNotFoundError, StoreError

__all__ = [
    "IMMUTABLE",
    "INCARNATION_HEADER",
    "REVALIDATED",
    "append_events",
    "create_session",
    "document",
    "follow",
    "get_session",
    "healthz",
    "list_sessions",
    "list_subagents",
    "page",
    "readyz",
]

IMMUTABLE: Final = "private, max-age=31536000, immutable"
# Under token auth a browser may not reuse a page for another caller, or for one with no token:
# it revalidates every time, and the 304 passes the same checks as the page.
REVALIDATED: Final = "private, no-cache"
# The page's incarnation (§2.5), which a client names in its next page and follow addresses.
INCARNATION_HEADER: Final = "Session-Incarnation"


def _service(request: Request) -> HistoryService:
    service: HistoryService = request.state.service
    return service


def _json(value: object, status: int = 200) -> Response:
    return JsonResponse(encode(value), status)


async def healthz(request: Request) -> Response:
    return _json(bodies.Health("ok"))


async def readyz(request: Request) -> Response:
    service = _service(request)
    ready, body = await readiness(service.store, service.notices)
    return _json(bodies.Readiness(**body), 200 if ready else 503)


async def document(request: Request) -> Response:
    """``GET /openapi.json``: the app's own document, which its lifespan holds (`history_service.openapi.Served`)."""
    return Response(request.state.document.body, media_type="application/json")


async def list_sessions(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    listing = list_params(request)
    found = await service.sessions(who, listing.limit + 1, listing.before, listing.closed, listing.match)
    return _listing(found, listing.limit)


async def list_subagents(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    session_id, _ = address(request)
    listing = list_params(request)
    found = await service.subagents(who, session_id, listing.limit + 1, listing.before, listing.closed, listing.match)
    return _listing(found, listing.limit)


def _listing(found: Listed, limit: int) -> Response:
    """A listing's page from up to ``limit + 1`` sessions: the extra one only says that more follow."""
    listed = found.sessions[:limit]
    sessions = [bodies.ListedSession.of(s) for s in listed]
    next_cursor = cursor_for(listed[-1].key) if len(found.sessions) > limit else None
    return _json(bodies.SessionList(sessions, next_cursor, found.total))


async def search(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    return _json(await service.search(who, query(request, SearchParams)))


async def get_session(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    no_params(request)
    info = await service.readable(who, *address(request))
    expires_at = await service.tree_expires_at(info.header, info.touched_at)
    return _json(bodies.SessionState.of(info, expires_at, await service.synopsis(info.header.id)))


async def create_session(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    ttl_ms = create_params(request)
    info = await service.create(who, await read_header(request, service.settings), ttl_ms=ttl_ms)
    # A new session has no event yet: its head is -1.
    return _json(bodies.SessionCreated(info.header.id, -1, info.incarnation), 201)


async def append_events(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    session_id, _ = address(request)
    result = await service.append(who, session_id, await read_events(request, service.settings))
    if result.idempotent:
        return _json(bodies.Appended(result.first_seq, result.head_seq, idempotent=True), 200)
    return _json(bodies.Appended(result.first_seq, result.head_seq), 201)


async def close_session(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    no_params(request)
    session_id, _ = address(request)
    info = await service.close(who, session_id)
    return _json(bodies.Closed.of(info))


async def delete_session(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    no_params(request)
    session_id, _ = address(request)
    await service.delete(who, session_id)
    return Response(status_code=204)


async def page(request: Request) -> Response:
    started = time.perf_counter()
    service = _service(request)
    who = principal(request, service.settings)
    query = page_query(request, service.settings)
    coding = accepted_coding(request)
    served = await service.page(who, *address(request), query, coding)
    sent = served.hold.release if served.hold is not None else None
    headers = {"Vary": "Accept-Encoding", "Server-Timing": f"app;dur={(time.perf_counter() - started) * 1000:.2f}"}
    if served.incarnation is not None:
        headers[INCARNATION_HEADER] = served.incarnation
    if served.coding != "identity":
        headers["Content-Encoding"] = served.coding
    if served.etag is not None:
        caching = REVALIDATED if service.settings.auth == "token" else IMMUTABLE
        if query.through is None or query.incarnation is None:
            # Stable, but its address does not name it whole: a closed session's newest page names no seq
            # (§6.3), and an address without the incarnation may name another session once its id is reused.
            caching = REVALIDATED
        headers.update({"ETag": served.etag, "Cache-Control": caching})
        if matches_etag(request, served.etag):
            if sent is not None:
                sent()
            return Response(status_code=304, headers=headers)
    else:
        headers["Cache-Control"] = "no-cache"
    return PartsResponse(served.body.parts, served.body.size, media_type="application/json", headers=headers, sent=sent)


async def follow(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    after, incarnation, max_messages, packed = follow_params(request)
    coding = accepted_coding(request, FOLLOW_CODINGS)
    info = await service.readable(who, *address(request), incarnation=incarnation)
    holds = await service.admit_follower(info.header.id, snapshot=after is None, max_messages=max_messages)
    frames = service.follow(info, holds, after=after, max_messages=max_messages, packed=packed)
    stream = _ended_by_error(frames, tracebacks_of(request))
    coder = frame_coder(coding)
    content: AsyncIterator[bytes | memoryview] = stream if coder is None else coder.coded(stream)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Vary": "Accept-Encoding"}
    if coder is not None:
        headers["Content-Encoding"] = coding
    return EndedStreamingResponse(
        content, ended=lambda: service.follower_left(holds), media_type="text/event-stream", headers=headers
    )


async def _ended_by_error(
    frames: AsyncGenerator[bytes | memoryview, None], tracebacks: Tracebacks
) -> AsyncGenerator[bytes | memoryview, None]:
    # The status line is sent already: a store failure ends the stream with an error frame the
    # client retries on. Closing ``frames`` here ends its subscription with the response.
    async with aclosing(frames):
        try:
            async for chunk in frames:
                yield chunk
        except SessionNotFoundError:
            # Deleted while the stream opened: the same last frame as for a follower it found open (§6.4).
            yield sse_frame("error", encode(bodies.FollowError("session_deleted")))
        except StoreError as exc:
            yield sse_frame("error", stream_error(exc, tracebacks))

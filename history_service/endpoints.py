"""HTTP endpoints: parse, call the service, render. Nothing else lives here."""

from __future__ import annotations

import time
from typing import Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from codec import MAX_SAFE_INTEGER, encode
from history_service.auth import principal
from history_service.encoding import CODINGS, choose_encoding
from history_service.errors import ApiError
from history_service.pages import PageQuery
from history_service.requests import (
    check_params,
    cursor_for,
    integer,
    list_cursor,
    parse_events,
    parse_header,
    path_session_id,
    read_json_body,
)
from history_service.responses import PartsResponse
from history_service.service import HistoryService

__all__ = [
    "append_events",
    "create_session",
    "follow",
    "get_session",
    "healthz",
    "list_sessions",
    "page",
    "readyz",
]

_PAGE_PARAMS: Final = frozenset({"through", "before", "maxMessages", "maxBytes", "expand"})
_FOLLOW_PARAMS: Final = frozenset({"after", "maxMessages"})
_LIST_PARAMS: Final = frozenset({"limit", "cursor"})
# Bodies this large are parsed in a worker thread, so the event loop keeps serving meanwhile.
_PARSE_IN_THREAD: Final = 1 << 20
IMMUTABLE: Final = "private, max-age=31536000, immutable"


def _service(request: Request) -> HistoryService:
    service: HistoryService = request.state.service
    return service


def _address(request: Request) -> tuple[str, str | None]:
    """The session and, on a ``/subagents/`` route, the child a page or follow address names."""
    session_id = path_session_id(request, "session_id")
    assert session_id is not None
    return session_id, path_session_id(request, "child_id")


def _json(value: object, status: int = 200) -> Response:
    return Response(encode(value), status_code=status, media_type="application/json")


async def healthz(request: Request) -> Response:
    return _json({"status": "ok"})


async def readyz(request: Request) -> Response:
    # Ready while follow can see every append: in-process, or listening for other processes' notices.
    notifier = _service(request).hub.notifier
    if notifier in ("in-process", "listening"):
        return _json({"status": "ready", "notifier": notifier})
    return _json({"status": "not_ready", "notifier": notifier}, 503)


async def list_sessions(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    check_params(request, _LIST_PARAMS)
    limit = integer(request.query_params.get("limit"), "limit", 1, 1000) or 50
    before = list_cursor(request.query_params.get("cursor"))
    found = await service.sessions(who, limit + 1, before)
    listed = found[:limit]
    sessions = [
        {"id": s.id, "createdAt": s.created_at, "headSeq": s.head_seq, "childCount": s.child_count} for s in listed
    ]
    next_cursor = cursor_for(listed[-1].key) if len(found) > limit else None
    return _json({"sessions": sessions, "nextCursor": next_cursor})


async def get_session(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    check_params(request, frozenset())
    info = await service.readable(who, *_address(request))
    return _json({"header": info.header, "headSeq": info.head_seq})


async def create_session(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    header = parse_header(await read_json_body(request, service.settings))
    info = await service.create(who, header)
    return _json({"id": info.header.id, "headSeq": info.head_seq}, 201)


async def append_events(request: Request) -> Response:
    service = _service(request)
    settings = service.settings
    who = principal(request, settings)
    session_id, _ = _address(request)
    body = await read_json_body(request, settings)
    if len(body) < _PARSE_IN_THREAD:
        events = parse_events(body, settings)
    else:
        events = await anyio.to_thread.run_sync(parse_events, body, settings)
    result = await service.append(who, session_id, events)
    reply = {"firstSeq": result.first_seq, "headSeq": result.head_seq}
    if result.idempotent:
        return _json({**reply, "idempotent": True}, 200)
    return _json(reply, 201)


async def page(request: Request) -> Response:
    started = time.perf_counter()
    service = _service(request)
    settings = service.settings
    who = principal(request, settings)
    check_params(request, _PAGE_PARAMS)
    params = request.query_params
    expand = params.get("expand")
    if expand not in (None, "raw"):
        raise ApiError(400, "invalid_parameter", "expand must be 'raw'")
    query = PageQuery(
        through=integer(params.get("through"), "through", -1, MAX_SAFE_INTEGER),
        before=integer(params.get("before"), "before", 0, MAX_SAFE_INTEGER),
        max_messages=integer(params.get("maxMessages"), "maxMessages", 1, 1000) or 50,
        max_bytes=integer(params.get("maxBytes"), "maxBytes", 1, MAX_SAFE_INTEGER) or settings.default_max_bytes,
        raw=expand == "raw",
    )
    coding = choose_encoding(request.headers.get("accept-encoding"), CODINGS)
    if coding is None:
        raise ApiError(406, "not_acceptable", "no acceptable content coding; identity is refused")
    served = await service.page(who, *_address(request), query, coding)
    headers = {"Vary": "Accept-Encoding", "Server-Timing": f"app;dur={(time.perf_counter() - started) * 1000:.2f}"}
    if served.coding != "identity":
        headers["Content-Encoding"] = served.coding
    if served.etag is not None:
        headers.update({"ETag": served.etag, "Cache-Control": IMMUTABLE})
        matches = {tag.strip() for tag in request.headers.get("if-none-match", "").split(",")}
        if served.etag in matches or "*" in matches:
            return Response(status_code=304, headers=headers)
    else:
        headers["Cache-Control"] = "no-cache"
    return PartsResponse(served.body.parts, served.body.size, media_type="application/json", headers=headers)


async def follow(request: Request) -> Response:
    service = _service(request)
    settings = service.settings
    who = principal(request, settings)
    check_params(request, _FOLLOW_PARAMS)
    header = request.headers.get("last-event-id")
    name, resume = ("Last-Event-ID", header) if header else ("after", request.query_params.get("after"))
    after = integer(resume, name, -1, MAX_SAFE_INTEGER)
    max_messages = integer(request.query_params.get("maxMessages"), "maxMessages", 1, 1000) or 50
    info = await service.readable(who, *_address(request))
    return _sse_response(service.follow(info.header.id, after=after, max_messages=max_messages))


def _sse_response(content: object) -> Response:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(content, media_type="text/event-stream", headers=headers)  # type: ignore[arg-type]

"""HTTP endpoints: parse, call the service, render. Nothing else lives here."""

from __future__ import annotations

import re
import time
from typing import Final

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from codec import CODINGS, MAX_SAFE_INTEGER, choose_encoding, encode
from history_service.auth import principal
from history_service.errors import ApiError
from history_service.follow import follow_stream, sse_frame
from history_service.pages import PageQuery, encoded_body
from history_service.service import HistoryService, decode_body, parse_events, parse_header

__all__ = ["append_events", "create_session", "follow", "healthz", "page", "read_body"]

_INTEGER: Final = re.compile(r"-?[0-9]{1,16}")
_PAGE_PARAMS: Final = frozenset({"through", "before", "maxMessages", "maxBytes", "expand"})
_FOLLOW_PARAMS: Final = frozenset({"after", "maxMessages"})
IMMUTABLE: Final = "private, max-age=31536000, immutable"


def _service(request: Request) -> HistoryService:
    service: HistoryService = request.state.service
    return service


def _integer(value: str | None, name: str, low: int, high: int) -> int | None:
    if value is None:
        return None
    if not _INTEGER.fullmatch(value) or not low <= int(value) <= high:
        raise ApiError(400, "invalid_parameter", f"{name} must be an integer from {low} to {high}, got {value[:40]!r}")
    return int(value)


def _check_params(request: Request, allowed: frozenset[str]) -> None:
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise ApiError(400, "invalid_parameter", f"unknown query parameter(s): {', '.join(unknown)}")


async def read_body(request: Request) -> bytes:
    """The request body, refused with 413 as soon as it passes the limit, then decoded."""
    settings = _service(request).settings
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > settings.max_body_bytes:
        raise ApiError(413, "body_too_large", f"the body exceeds {settings.max_body_bytes} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > settings.max_body_bytes:
            raise ApiError(413, "body_too_large", f"the body exceeds {settings.max_body_bytes} bytes")
        chunks.append(chunk)
    return decode_body(b"".join(chunks), request.headers.get("content-encoding"), settings)


def _json(value: object, status: int = 200) -> Response:
    return Response(encode(value), status_code=status, media_type="application/json")


async def healthz(request: Request) -> Response:
    return _json({"status": "ok"})


async def create_session(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    info = await service.create(who, parse_header(await read_body(request)))
    return _json({"id": info.header.id, "headSeq": info.head_seq}, 201)


async def append_events(request: Request) -> Response:
    service = _service(request)
    who = principal(request, service.settings)
    events = parse_events(await read_body(request), service.settings)
    result = await service.append(who, request.path_params["session_id"], events)
    body = {"firstSeq": result.first_seq, "headSeq": result.head_seq}
    if result.idempotent:
        return _json({**body, "idempotent": True}, 200)
    return _json(body, 201)


async def page(request: Request) -> Response:
    started = time.perf_counter()
    service = _service(request)
    settings = service.settings
    who = principal(request, settings)
    _check_params(request, _PAGE_PARAMS)
    params = request.query_params
    expand = params.get("expand")
    if expand not in (None, "raw"):
        raise ApiError(400, "invalid_parameter", "expand must be 'raw'")
    info = await service.readable(who, request.path_params["session_id"], request.path_params.get("child_id"))
    query = PageQuery(
        through=_integer(params.get("through"), "through", -1, MAX_SAFE_INTEGER),
        before=_integer(params.get("before"), "before", 0, MAX_SAFE_INTEGER),
        max_messages=_integer(params.get("maxMessages"), "maxMessages", 1, 1000) or 50,
        max_bytes=_integer(params.get("maxBytes"), "maxBytes", 1, MAX_SAFE_INTEGER) or settings.default_max_bytes,
        raw=expand == "raw",
    )
    encoded = await service.page(info, query)
    coding = choose_encoding(request.headers.get("accept-encoding"), CODINGS)
    if coding is None:
        raise ApiError(406, "not_acceptable", "no acceptable content coding; identity is refused")
    body = await encoded_body(encoded, coding)
    if body is encoded.identity:
        coding = "identity"
    headers = {"Vary": "Accept-Encoding", "Server-Timing": f"app;dur={(time.perf_counter() - started) * 1000:.2f}"}
    if coding != "identity":
        headers["Content-Encoding"] = coding
    if query.through is not None:
        etag = encoded.etag if coding == "identity" else f'{encoded.etag[:-1]}-{coding}"'
        headers.update({"ETag": etag, "Cache-Control": IMMUTABLE})
        service.cache.trim()
        matches = {tag.strip() for tag in request.headers.get("if-none-match", "").split(",")}
        if etag in matches or "*" in matches:
            return Response(status_code=304, headers=headers)
    else:
        headers["Cache-Control"] = "no-cache"
    return Response(body, media_type="application/json", headers=headers)


async def follow(request: Request) -> Response:
    service = _service(request)
    settings = service.settings
    who = principal(request, settings)
    _check_params(request, _FOLLOW_PARAMS)
    resume = request.headers.get("last-event-id") or request.query_params.get("after")
    after = _integer(resume, "after", -1, MAX_SAFE_INTEGER)
    max_messages = _integer(request.query_params.get("maxMessages"), "maxMessages", 1, 1000) or 50
    info = await service.readable(who, request.path_params["session_id"], request.path_params.get("child_id"))
    session_id = info.header.id
    channel = service.hub.channel(session_id)
    channel.followers += 1
    # Subscribed before the head is read: every later seq reaches this follower.
    try:
        info = await service.store.get_session(session_id)
        opening = b"retry: %d\n\n" % settings.retry_ms
        if after is None:
            query = PageQuery(
                through=info.head_seq, before=None, max_messages=max_messages, max_bytes=settings.default_max_bytes
            )
            snapshot = service.snapshot(info, (await service.page(info, query)).identity)
            opening += sse_frame("snapshot", snapshot, event_id=info.head_seq)
            next_seq = info.head_seq + 1
        elif after > info.head_seq:
            channel.followers -= 1
            service.hub.release(session_id)
            error = encode({"code": "cursor_ahead", "headSeq": info.head_seq})
            return _sse_response(iter([opening + sse_frame("error", error)]))
        else:
            next_seq = after + 1
    except BaseException:
        channel.followers -= 1
        service.hub.release(session_id)
        raise
    stream = follow_stream(
        service.hub,
        service.store,
        session_id,
        channel,
        opening=opening,
        next_seq=next_seq,
        head=info.head_seq,
    )
    return _sse_response(stream)


def _sse_response(content: object) -> Response:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(content, media_type="text/event-stream", headers=headers)  # type: ignore[arg-type]

"""Reading requests: bodies, session ids in paths, and query parameters, each checked before use.

A JSON body is refused before it is decoded when it is not ``application/json``, when it
passes the byte limit (before or after its content coding), or when it holds more values
than the value limit; an append body also when it holds more logical events than the batch
limit, counting a packed row as its members (docs/protocol.md §11). So the work a request
costs is bounded by the limits, not by what a body claims.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final, TypeVar

import anyio.to_thread
import msgspec
from starlette.requests import Request

from codec import (
    DECODE_FAILURES,
    MAX_SAFE_INTEGER,
    BatchTooLargeError,
    CodecError,
    Event,
    InvalidJsonError,
    SessionHeader,
    SessionIdError,
    check_session_id,
    decode_header,
    decode_json,
    decode_storage_line,
    expand_records,
    split_batch,
    values_within,
)
from history_service.encoding import decompress
from history_service.errors import ApiError, ContentEncodingError, ContentTooLargeError
from history_service.settings import Settings
from persistence import SessionKey

__all__ = [
    "DECODINGS",
    "check_params",
    "cursor_for",
    "integer",
    "list_cursor",
    "parse_events",
    "parse_json",
    "parse_header",
    "path_session_id",
    "read_json_body",
    "session_id",
]

DECODINGS: Final = ("zstd", "br", "gzip")
_INTEGER: Final = re.compile(r"-?[0-9]{1,16}")
# Bodies this large, and every coded body, are decoded and measured in a worker thread, so
# the event loop keeps serving other requests meanwhile.
_OFF_THE_LOOP: Final = 256 * 1024
T = TypeVar("T")


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


async def read_json_body(request: Request, settings: Settings) -> bytes | bytearray:
    """The request body, decoded from its content coding, if it is JSON within every limit.

    Only ``application/json`` is read: a browser on another origin cannot send it without a
    CORS preflight, so a cross-site form or ``text/plain`` POST never reaches a handler.
    """
    if _media_type(request) != "application/json":
        raise ApiError(415, "unsupported_media_type", "request bodies must be sent as Content-Type: application/json")
    limit = settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"the body exceeds {limit} bytes")
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > limit:
            raise ApiError(413, "body_too_large", f"the body exceeds {limit} bytes")
    coding = request.headers.get("content-encoding")
    if coding is None and len(received) < _OFF_THE_LOOP:
        return _measured(received, coding, settings)
    return await anyio.to_thread.run_sync(_measured, received, coding, settings)


def _measured(received: bytearray, coding: str | None, settings: Settings) -> bytes | bytearray:
    # The body stays the bytearray it arrived in: the counts and msgspec read it as it is.
    body = _decode_coding(received, coding, settings.max_body_bytes)
    if not values_within(body, settings.max_body_values):
        raise ApiError(413, "body_too_large", f"the body holds more than {settings.max_body_values} JSON values")
    return body


def _decode_coding(body: bytearray, content_encoding: str | None, limit: int) -> bytes | bytearray:
    coding = (content_encoding or "identity").strip().lower()
    if coding == "identity":
        return body
    if coding not in DECODINGS:
        raise ApiError(
            415, "unsupported_encoding", f"Content-Encoding {coding[:40]!r} is not supported; use zstd, br or gzip"
        )
    try:
        return decompress(body, coding, max_size=limit)
    except ContentTooLargeError as exc:
        raise ApiError(413, "body_too_large", f"the decoded body exceeds {limit} bytes") from exc
    except ContentEncodingError as exc:
        raise ApiError(400, "bad_encoding", str(exc)) from exc


def _malformed(exc: CodecError) -> ApiError:
    return ApiError(400, "malformed_json", f"the body is not valid JSON: {exc}")


def parse_json(body: bytes | bytearray, decoder: msgspec.json.Decoder[T], *, invalid: str) -> T:
    """A body decoded as one typed value: 400 ``malformed_json`` if it is not JSON, 422 ``invalid`` if not that type."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise ApiError(422, invalid, str(exc)) from exc
    except DECODE_FAILURES as exc:
        raise ApiError(400, "malformed_json", f"the body is not valid JSON: {exc}") from exc


def parse_header(body: bytes | bytearray) -> SessionHeader:
    """A create body's session header; its id and ``parentSession`` must follow the id rule."""
    try:
        header = decode_header(body)
    except InvalidJsonError as exc:
        raise _malformed(exc) from exc
    except CodecError as exc:
        raise ApiError(422, "invalid_header", str(exc)) from exc
    session_id(header.id, where="id")
    if isinstance(header.parentSession, str):
        session_id(header.parentSession, where="parentSession")
    return header


def parse_events(body: bytes | bytearray, settings: Settings) -> list[Event]:
    """An append body's logical events, packed rows expanded; 413 past the batch limit, 422 names the bad item.

    Both counts, items and a row's members, are taken from the bytes before anything is
    decoded into lists or expanded into events.
    """
    try:
        lines = split_batch(body, max_events=settings.max_batch_events)
    except BatchTooLargeError as exc:
        raise ApiError(413, "batch_too_large", str(exc)) from exc
    except InvalidJsonError as exc:
        raise _malformed(exc) from exc
    except CodecError as exc:
        raise ApiError(422, "invalid_batch", str(exc)) from exc
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(decode_storage_line(line, where=f"events[{i}]"))
        except InvalidJsonError as exc:
            raise _malformed(exc) from exc
        except CodecError as exc:
            raise ApiError(422, "invalid_event", str(exc), index=i) from exc
    return expand_records(records)


def session_id(value: str, *, where: str = "session id") -> str:
    """``value`` if it follows the session id rule, else 422 ``invalid_session_id``."""
    try:
        return check_session_id(value, where=where)
    except SessionIdError as exc:
        raise ApiError(422, "invalid_session_id", str(exc)) from exc


def path_session_id(request: Request, name: str) -> str | None:
    """A session id path parameter (``None`` when the route has no such parameter), checked like any id."""
    value = request.path_params.get(name)
    return None if value is None else session_id(value)


def integer(value: str | None, name: str, low: int, high: int) -> int | None:
    """A decimal integer query parameter within ``[low, high]``, or ``None`` when absent; 400 otherwise."""
    if value is None:
        return None
    if not _INTEGER.fullmatch(value) or not low <= int(value) <= high:
        raise ApiError(400, "invalid_parameter", f"{name} must be an integer from {low} to {high}, got {value[:40]!r}")
    return int(value)


def check_params(request: Request, allowed: frozenset[str]) -> None:
    """400 for any query parameter outside ``allowed``."""
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        shown = ", ".join(name[:40] for name in unknown[:10])
        raise ApiError(400, "invalid_parameter", f"unknown query parameter(s): {shown}")


def cursor_for(key: SessionKey) -> str:
    """The opaque ``nextCursor`` that continues a session listing after ``key``."""
    return base64.urlsafe_b64encode(msgspec.json.encode((key.created_at, key.id))).rstrip(b"=").decode()


def list_cursor(value: str | None) -> SessionKey | None:
    """The listing position a ``cursor`` parameter names, or ``None`` for the first page; 400 if it is not ours."""
    if value is None:
        return None
    forged = ApiError(400, "invalid_parameter", "cursor is not a cursor this service returned")
    try:
        decoded = decode_json(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise forged from exc
    if not (type(decoded) is list and len(decoded) == 2 and type(decoded[0]) is int and type(decoded[1]) is str):
        raise forged
    created_at, session = decoded
    if abs(created_at) > MAX_SAFE_INTEGER:
        raise forged
    try:
        check_session_id(session)
    except SessionIdError as exc:
        raise forged from exc
    return SessionKey(created_at, session)

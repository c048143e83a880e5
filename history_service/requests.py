"""Reading requests: bodies, headers, session ids in paths, and query parameters, each checked before use.

A JSON body is refused before it is decoded when it is not ``application/json``, when it
passes the byte limit (before or after its content coding), or when it holds more values
than the value limit; an append body also when it holds more logical events than the batch
limit, counting a packed row as its members (docs/protocol.md §11). So the work a request
costs is bounded by the limits, not by what a body claims.

What is wrong with a request is raised as a `history_service.errors.RequestError`, or as
the codec error that says it wherever it occurs (`InvalidJsonError`, `SessionIdError`,
`BatchTooLargeError`); a codec error that depends on where it occurs is placed here, as the
header's, the batch's or an item's.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, TypeVar

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
    decimal,
    decode_header,
    decode_json,
    decode_storage_line,
    expand_records,
    parse_event_id,
    split_batch,
    values_within,
)
from history_service.encoding import CODINGS, choose_encoding, decompress, spoken
from history_service.errors import (
    BodyTooLarge,
    InvalidBatch,
    InvalidEvent,
    InvalidHeader,
    InvalidParameter,
    NoAcceptableCoding,
    NotJson,
    RequestError,
    UnsupportedEncoding,
)
from history_service.pages import PageQuery
from history_service.params import (
    LAST_EVENT_ID,
    CreateParams,
    FollowParams,
    ListParams,
    NoParams,
    PageParams,
    Param,
    parameter,
    parameters,
)
from history_service.settings import Settings
from persistence import OFF_LOOP_BYTES, SessionKey

__all__ = [
    "accepted_coding",
    "address",
    "create_params",
    "cursor_for",
    "follow_params",
    "integer",
    "ListQuery",
    "list_cursor",
    "list_params",
    "no_params",
    "matches_etag",
    "page_query",
    "parse_events",
    "read_body",
    "parse_header",
    "parse_json",
    "path_session_id",
    "query",
    "read_events",
    "read_header",
    "read_json",
    "read_json_body",
    "session_id",
]

# Append bodies this large are parsed in a worker thread, so the event loop keeps serving
# other requests meanwhile (smaller bodies, and every coded body, leave it at OFF_LOOP_BYTES).
_PARSE_IN_THREAD: Final = 1 << 20
_HEADERS: Final = {LAST_EVENT_ID.name: parameter(LAST_EVENT_ID.name, LAST_EVENT_ID.type)}
T = TypeVar("T")
Q = TypeVar("Q", bound=msgspec.Struct)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


async def read_json_body(request: Request, settings: Settings) -> bytes | bytearray:
    """The request body, decoded from its content coding, if it is JSON within every limit.

    Only ``application/json`` is read: a browser on another origin cannot send it without a
    CORS preflight, so a cross-site form or ``text/plain`` POST never reaches a handler.
    """
    if _media_type(request) != "application/json":
        raise NotJson("request bodies must be sent as Content-Type: application/json")
    received = await read_body(request, settings.max_body_bytes)
    coding = request.headers.get("content-encoding")
    if coding is None and len(received) < OFF_LOOP_BYTES:
        return _measured(received, coding, settings)
    return await anyio.to_thread.run_sync(_measured, received, coding, settings)


async def read_body(request: Request, limit: int) -> bytearray:
    """The request body as sent, or `BodyTooLarge` as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    # A length past any safe integer is not read here: the body itself is then counted as it arrives.
    if declared is not None and (decimal(declared, low=0, high=MAX_SAFE_INTEGER) or 0) > limit:
        raise BodyTooLarge(f"the body exceeds {limit} bytes")
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > limit:
            raise BodyTooLarge(f"the body exceeds {limit} bytes")
    return received


def _measured(received: bytearray, coding: str | None, settings: Settings) -> bytes | bytearray:
    # The body stays the bytearray it arrived in: the counts and msgspec read it as it is.
    body = _decode_coding(received, coding, settings.max_body_bytes)
    if not values_within(body, settings.max_body_values):
        raise BodyTooLarge(f"the body holds more than {settings.max_body_values} JSON values")
    return body


def _decode_coding(body: bytearray, content_encoding: str | None, limit: int) -> bytes | bytearray:
    coding = (content_encoding or "identity").strip().lower()
    if coding == "identity":
        return body
    if coding not in CODINGS:
        raise UnsupportedEncoding(f"Content-Encoding {coding[:40]!r} is not supported; use {spoken()}")
    return decompress(body, coding, max_size=limit)


async def read_json(
    request: Request, settings: Settings, decoder: msgspec.json.Decoder[T], *, invalid: type[RequestError]
) -> T:
    """The body as one typed value (`read_json_body`, then `parse_json`)."""
    return parse_json(await read_json_body(request, settings), decoder, invalid=invalid)


def parse_json(body: bytes | bytearray, decoder: msgspec.json.Decoder[T], *, invalid: type[RequestError]) -> T:
    """A body decoded as one typed value: `InvalidJsonError` if it is not JSON, ``invalid`` if not that type."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise invalid(str(exc)) from exc
    except DECODE_FAILURES as exc:
        raise InvalidJsonError(str(exc)) from exc


async def read_header(request: Request, settings: Settings) -> SessionHeader:
    """A create body's session header (`read_json_body`, then `parse_header`)."""
    return parse_header(await read_json_body(request, settings))


def parse_header(body: bytes | bytearray) -> SessionHeader:
    """A create body's session header; its id and ``parentSession`` must follow the id rule."""
    try:
        header = decode_header(body)
    except InvalidJsonError:
        raise  # not JSON at all: the same answer wherever it is
    except CodecError as exc:
        raise InvalidHeader(str(exc)) from exc
    session_id(header.id, where="id")
    if header.closedAt is not msgspec.UNSET:
        raise InvalidHeader("closedAt is set by closing the session (§6.3), never at create")
    if header.incarnation is not msgspec.UNSET:
        raise InvalidHeader("incarnation is set by the service when it creates the session (§2.5)")
    if isinstance(header.parentSession, str):
        session_id(header.parentSession, where="parentSession")
    return header


async def read_events(request: Request, settings: Settings) -> list[Event]:
    """An append body's logical events (`read_json_body`, then `parse_events`, in a worker thread when large)."""
    body = await read_json_body(request, settings)
    if len(body) < _PARSE_IN_THREAD:
        return parse_events(body, settings)
    return await anyio.to_thread.run_sync(parse_events, body, settings)


def parse_events(body: bytes | bytearray, settings: Settings) -> list[Event]:
    """An append body's logical events, packed rows expanded; `BatchTooLargeError` past the batch limit.

    Both counts, items and a row's members, are taken from the bytes before anything is
    decoded into lists or expanded into events. A bad item is an `InvalidEvent` that names it.
    """
    try:
        lines = split_batch(body, max_events=settings.max_batch_events)
    except (InvalidJsonError, BatchTooLargeError):
        raise
    except CodecError as exc:
        raise InvalidBatch(str(exc)) from exc
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(decode_storage_line(line, where=f"events[{i}]"))
        except InvalidJsonError:
            raise
        except CodecError as exc:
            raise InvalidEvent(str(exc), index=i) from exc
    return expand_records(records)


def session_id(value: str, *, where: str = "session id") -> str:
    """``value`` if it follows the session id rule, else `SessionIdError`."""
    return check_session_id(value, where=where)


def path_session_id(request: Request, name: str) -> str | None:
    """A session id path parameter (``None`` when the route has no such parameter), checked like any id."""
    value = request.path_params.get(name)
    return None if value is None else session_id(value)


def address(request: Request) -> tuple[str, str | None]:
    """The session and, on a ``/subagents/`` route, the child a session, page or follow address names."""
    session = path_session_id(request, "session_id")
    assert session is not None, "every session route has a session_id"
    return session, path_session_id(request, "child_id")


def integer(value: str | None, name: str, low: int, high: int) -> int | None:
    """A decimal integer query parameter within ``[low, high]``, or ``None`` when absent; `InvalidParameter` else."""
    if value is None:
        return None
    parsed = decimal(value, low=low, high=high)
    if parsed is None:
        raise InvalidParameter(f"{name} must be an integer from {low} to {high}, got {value[:40]!r}")
    return parsed


def _check_params(request: Request, allowed: frozenset[str]) -> None:
    """`InvalidParameter` for any query parameter outside ``allowed``."""
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        shown = ", ".join(name[:40] for name in unknown[:10])
        raise InvalidParameter(f"unknown query parameter(s): {shown}")


def query(request: Request, params: type[Q], settings: Settings | None = None) -> Q:
    """The query as ``params`` declares it (`history_service.params`): each field checked, absent ones defaulted.

    A name outside ``params`` is refused first, then each field in its declared order, or in
    the order ``params.CHECK_ORDER`` gives, which may place a header among them.
    ``settings`` gives the defaults a field names a setting for.
    """
    names, checks = _checks(params)
    _check_params(request, names)
    values: dict[str, Any] = {}
    for param, is_header in checks:
        if not is_header:
            values[param.name] = _value(param, request.query_params.get(param.name), settings)
        elif header := request.headers.get(param.name):
            # A header checked in its place among the fields (`CHECK_ORDER`); its reader parses it.
            _value(param, header, settings)
    return params(**values)


@functools.cache
def _checks(params: type[msgspec.Struct]) -> tuple[frozenset[str], tuple[tuple[Param, bool], ...]]:
    """The query names ``params`` allows, and what `query` checks in order: each field, or a header."""
    declared = {param.name: param for param in parameters(params)}
    order: tuple[str, ...] = getattr(params, "CHECK_ORDER", tuple(declared))
    unknown = set(order) - declared.keys() - _HEADERS.keys()
    assert not unknown and declared.keys() <= set(order), f"{params.__name__}.CHECK_ORDER: {sorted(unknown)}"
    return frozenset(declared), tuple(
        (declared[name], False) if name in declared else (_HEADERS[name], True) for name in order
    )


def _value(param: Param, value: str | None, settings: Settings | None) -> Any:
    if value is None:
        if param.required:
            raise InvalidParameter(f"{param.name} is required")
        return param.default if param.setting is None else getattr(settings, param.setting)
    if param.kind == "integer":
        assert param.low is not None and param.high is not None, "an integer parameter has a range"
        return integer(value, param.name, param.low, param.high)
    if param.kind == "enum" and value not in param.values:
        raise InvalidParameter(f"{param.name} must be {' or '.join(map(repr, param.values))}")
    if param.pattern is not None and re.fullmatch(param.pattern, value) is None:
        raise InvalidParameter(f"{param.name} must match {param.pattern}")
    return value


def create_params(request: Request) -> int | None:
    """A create's ``ttlMs`` (§6.5), if it gives one."""
    return query(request, CreateParams).ttlMs


class ListQuery(NamedTuple):
    """A listing's ``limit``, the position its ``cursor`` continues after, its ``state`` as ``closed``, and ``q``."""

    limit: int
    before: SessionKey | None
    closed: bool | None
    match: str | None


def list_params(request: Request) -> ListQuery:
    """A listing's parameters (docs/protocol.md §12.1), checked."""
    listing = query(request, ListParams)
    closed = None if listing.state is None else listing.state == "closed"
    return ListQuery(listing.limit, list_cursor(listing.cursor), closed, listing.q)


def no_params(request: Request) -> None:
    """`InvalidParameter` for any query parameter: the route takes none."""
    query(request, NoParams)


def page_query(request: Request, settings: Settings) -> PageQuery:
    """A page's parameters (docs/protocol.md §4.1), checked and with their defaults."""
    params = query(request, PageParams, settings)
    assert params.maxBytes is not None, "a setting gives maxBytes its default"
    return PageQuery(
        through=params.through,
        before=params.before,
        max_messages=params.maxMessages,
        max_bytes=params.maxBytes,
        raw=params.expand == "raw",
        incarnation=params.incarnation,
    )


class FollowQuery(NamedTuple):
    """A follow's resume cursor (``None``: a snapshot), the incarnation it names (``None``: any), maxMessages,
    and whether its events are packed (§5.5)."""

    after: int | None
    incarnation: str | None
    max_messages: int
    packed: bool


def follow_params(request: Request) -> FollowQuery:
    """A follow's parameters (§5): ``Last-Event-ID`` wins over ``after`` and ``incarnation``."""
    # Both are checked (`FollowParams.CHECK_ORDER`): a bad `after` is refused even when the header wins (§5).
    params = query(request, FollowParams)
    packed = params.packed == 1
    header = request.headers.get(LAST_EVENT_ID.name)
    if not header:
        return FollowQuery(params.after, params.incarnation, params.maxMessages, packed)
    parsed = parse_event_id(header)
    assert parsed is not None, "the header matched its pattern"
    incarnation, seq = parsed
    return FollowQuery(seq, incarnation or params.incarnation, params.maxMessages, packed)


def accepted_coding(request: Request, offered: Sequence[str] = CODINGS) -> str:
    """The content coding to answer in, of ``offered`` (a page's by default), from ``Accept-Encoding``.

    `NoAcceptableCoding` if the header refuses them all and identity too.
    """
    coding = choose_encoding(request.headers.get("accept-encoding"), offered)
    if coding is None:
        raise NoAcceptableCoding("no acceptable content coding; identity is refused")
    return coding


def matches_etag(request: Request, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (or ``*``): the client's copy is current."""
    matches = {tag.strip() for tag in request.headers.get("if-none-match", "").split(",")}
    return etag in matches or "*" in matches


def cursor_for(key: SessionKey) -> str:
    """The opaque ``nextCursor`` that continues a session listing after ``key``."""
    return base64.urlsafe_b64encode(msgspec.json.encode((key.created_at, key.id))).rstrip(b"=").decode()


def list_cursor(value: str | None) -> SessionKey | None:
    """The listing position a ``cursor`` names, or ``None`` for the first page; `InvalidParameter` if not ours."""
    if value is None:
        return None
    forged = InvalidParameter("cursor is not a cursor this service returned")
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

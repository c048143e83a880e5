"""JSON text of events and session headers: the shared encoder and the strict decoders.

The encoder and typed decoders are built once and shared; they hold no state. Every
decoder validates fully and raises a `CodecError` subclass whose message says where and
why, e.g. ``events[3].surfaceOp: expected "append" or {op,start,end}``. Decoded events
are in canonical form (see `codec.events`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import msgspec

from codec._paths import DECODE_FAILURES, describe, reason
from codec.errors import CodecError, EventValidationError, InvalidJsonError
from codec.events import CHUNK_EVENT_TYPE, RESERVED_TYPES, Event, SessionHeader, canonical_event, check_depth

__all__ = [
    "decode_event",
    "decode_events",
    "decode_header",
    "decode_json",
    "encode",
    "encode_lines",
    "event_from_value",
    "events_from_values",
    "finish_event",
]

_ENCODER: Final = msgspec.json.Encoder()
_ANY: Final = msgspec.json.Decoder()
_EVENT: Final = msgspec.json.Decoder(Event)
_EVENTS: Final = msgspec.json.Decoder(list[Event])
_HEADER: Final = msgspec.json.Decoder(SessionHeader)

_OP_REASONS: Final = {
    "surfaceOp": 'expected "append" or {op,start,end}',
    "conversationOp": 'expected {op:"replace",start,end}',
}


def encode(value: Any) -> bytes:
    """Encode any codec value as compact JSON; Structs keep their declared key order."""
    return _ENCODER.encode(value)


def encode_lines(values: Iterable[Any]) -> bytes:
    """Encode values as JSON lines, each ending in ``\\n``."""
    buffer = bytearray()
    for value in values:
        _ENCODER.encode_into(value, buffer, -1)
        buffer.extend(b"\n")
    return bytes(buffer)


def decode_json(data: bytes | str) -> Any:
    """Decode any JSON text; text that is not JSON raises `InvalidJsonError`."""
    try:
        return _ANY.decode(data)
    except DECODE_FAILURES as exc:
        raise InvalidJsonError(f"invalid JSON: {reason(exc)}") from exc


def _event_error(exc: Exception, root: str) -> CodecError:
    if not isinstance(exc, msgspec.ValidationError):
        return InvalidJsonError(f"{root}: invalid JSON: {reason(exc)}")
    where, why = describe(exc, root)
    for field, expected in _OP_REASONS.items():
        if f".{field}" in where:
            where = where[: where.index(f".{field}") + len(field) + 1]
            why = f"{expected} ({why})"
            break
    return EventValidationError(f"{where}: {why}")


def finish_event(event: Event, where: str) -> Event:
    """Finish a decoded event: reserved types refused, a delta made canonical, nesting bounded."""
    if event.type in RESERVED_TYPES:
        raise EventValidationError(f"{where}.type: {event.type!r} is reserved for storage lines")
    if event.type == CHUNK_EVENT_TYPE:
        event = canonical_event(event)
    check_depth(event.data, where=f"{where}.data")
    return event


def decode_event(data: bytes, *, where: str = "event") -> Event:
    """Decode and validate one event."""
    try:
        event = _EVENT.decode(data)
    except DECODE_FAILURES as exc:
        raise _event_error(exc, where) from exc
    return finish_event(event, where)


def decode_events(data: bytes, *, where: str = "events") -> list[Event]:
    """Decode and validate a JSON array of events."""
    try:
        events = _EVENTS.decode(data)
    except DECODE_FAILURES as exc:
        raise _event_error(exc, where) from exc
    return [finish_event(event, f"{where}[{i}]") for i, event in enumerate(events)]


def event_from_value(value: Any, *, where: str = "event") -> Event:
    """Validate one already-decoded JSON object as an event."""
    try:
        event = msgspec.convert(value, Event)
    except (msgspec.ValidationError, RecursionError) as exc:
        raise _event_error(exc, where) from exc
    return finish_event(event, where)


def events_from_values(values: Iterable[Any], *, where: str = "events") -> list[Event]:
    """Validate already-decoded JSON objects as events."""
    return [event_from_value(value, where=f"{where}[{i}]") for i, value in enumerate(values)]


def decode_header(data: bytes | bytearray) -> SessionHeader:
    """Decode and validate a session header line; ``meta`` nests at most `MAX_DEPTH` levels."""
    try:
        header = _HEADER.decode(data)
    except DECODE_FAILURES as exc:
        if not isinstance(exc, msgspec.ValidationError):
            raise InvalidJsonError(f"header: invalid JSON: {reason(exc)}") from exc
        where, why = describe(exc, "header")
        raise EventValidationError(f"{where}: {why}") from exc
    check_depth(header.meta, where="header.meta")
    return header

"""The Durable Streams wire formats (docs/protocol.md §13): offsets, JSON mode and SSE framing.

An offset is two zero-padded decimal numbers, ``<epoch>_<position>``, 16 digits each, so
that offsets compare as strings exactly as they compare as numbers. A generic stream's
epoch is its life (a number drawn when the stream is created) and its position is the
byte count of what it holds; a session read as a stream has its incarnation as the epoch
and its next seq as the position.

An append is stored, and read, in *pieces* of at most a piece's bytes (`pieces`), so no
read costs more than one piece past its budget: a text append is cut only between
characters, a JSON append only between values, each value whole in one piece.

A JSON-mode stream stores each append as a *fragment*: its values' own JSON text, each
followed by a comma. An array body is flattened one level, so ``[1,2]`` stores ``1,2,``;
a read joins fragments and wraps them in brackets. The values are never decoded and
re-encoded: each keeps the bytes it was sent with.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Final

import msgspec

from codec.errors import InvalidJsonError

__all__ = [
    "MAX_LIFE",
    "OFFSET_PATTERN",
    "PIECE_BYTES",
    "ZERO_OFFSET",
    "sse_control",
    "sse_data",
    "fragment_values",
    "json_fragment",
    "json_array",
    "json_pieces",
    "pieces",
    "stream_offset",
    "parse_stream_offset",
    "sse_payload",
]

OFFSET_PATTERN: Final = re.compile(r"([0-9]{1,16})_([0-9]{1,16})")
_DIGITS: Final = 16
ZERO_OFFSET: Final = "0" * _DIGITS + "_" + "0" * _DIGITS
# The most bytes of one stored piece of an append (a JSON value is never cut: one is at most this).
PIECE_BYTES: Final = 1024 * 1024
# The lives of generic streams are drawn from 1 up to this: 16 digits; 0 is a stream made before lives.
MAX_LIFE: Final = 10**_DIGITS - 1
_RAW_LIST: Final = msgspec.json.Decoder(list[msgspec.Raw])
_RAW: Final = msgspec.json.Decoder(msgspec.Raw)
_control = msgspec.json.Encoder()


def stream_offset(position: int, epoch: int = 0) -> str:
    """The offset of ``position`` within ``epoch``."""
    return f"{epoch:0{_DIGITS}d}_{position:0{_DIGITS}d}"


def parse_stream_offset(text: str) -> tuple[int, int] | None:
    """``(epoch, position)`` of an offset in our shape, or None for anything else."""
    match = OFFSET_PATTERN.fullmatch(text)
    if match is None:
        return None
    return int(match[1]), int(match[2])


def json_fragment(body: bytes, *, allow_empty: bool = False) -> bytes:
    """A JSON-mode append's stored fragment: its values, each followed by a comma.

    Raises `InvalidJsonError` for a body that is not one JSON value in UTF-8, or for an empty
    array unless ``allow_empty`` (a create may start a stream empty; an append may not).
    """
    return b"".join(value + b"," for value in _values(body, allow_empty=allow_empty))


def _values(body: bytes, *, allow_empty: bool) -> list[bytes]:
    try:
        body.decode()
        if body.lstrip()[:1] == b"[":
            values = [bytes(value) for value in _RAW_LIST.decode(body)]
        else:
            values = [bytes(_RAW.decode(body))]
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidJsonError(f"not valid JSON: {exc}") from exc
    if not values and not allow_empty:
        raise InvalidJsonError("an empty array appends nothing")
    return values


def json_pieces(body: bytes, most: int = PIECE_BYTES, *, allow_empty: bool = False) -> list[bytes]:
    """A JSON-mode append's fragment (`json_fragment`) in pieces of whole values, each at most ``most`` bytes.

    Raises `InvalidJsonError` as `json_fragment` does. A value that alone passes ``most`` is
    a piece of its own, larger: the caller refuses it.
    """
    found: list[bytes] = []
    piece: list[bytes] = []
    size = 0
    for value in _values(body, allow_empty=allow_empty):
        if piece and size + len(value) + 1 > most:
            found.append(b"".join(piece))
            piece, size = [], 0
        piece.append(value + b",")
        size += len(value) + 1
    if piece:
        found.append(b"".join(piece))
    return found


def pieces(data: bytes, most: int = PIECE_BYTES, *, text: bool = False) -> list[bytes]:
    """``data`` cut into pieces of at most ``most`` bytes; ``text`` cuts only before a character's first byte.

    A text piece ends up to 3 bytes early so that no UTF-8 character is split (an SSE event
    carries a text piece as it is); bytes that are not UTF-8 are cut where they fall.
    """
    if len(data) <= most:
        return [data]
    view = memoryview(data)
    found: list[bytes] = []
    at = 0
    while len(data) - at > most:
        cut = at + most
        if text:
            back = cut
            while back > cut - 3 and data[back] & 0xC0 == 0x80:
                back -= 1
            if data[back] & 0xC0 != 0x80:
                cut = back
        found.append(bytes(view[at:cut]))
        at = cut
    found.append(bytes(view[at:]))
    return found


def fragment_values(fragment: bytes) -> list[bytes]:
    """The values of a stored fragment, each as its own JSON text."""
    return [bytes(value) for value in _RAW_LIST.decode(b"[" + fragment[:-1] + b"]")] if fragment else []


def json_array(fragments: Iterable[bytes]) -> bytes:
    """The JSON array a read of these fragments answers."""
    joined = b"".join(fragments)
    return b"[" + joined[:-1] + b"]" if joined else b"[]"


def sse_payload(data: bytes, *, mode: str) -> bytes:
    """A data event's payload: ``json`` fragments as an array, ``text`` as it is, ``base64`` encoded."""
    if mode == "json":
        return json_array((data,))
    if mode == "base64":
        return base64.b64encode(data)
    return data


def _event(kind: bytes, payload: bytes) -> bytes:
    # Every line break in the payload starts a new data line, so a payload cannot forge an event. A
    # reader strips one space after "data:": a line that starts with one gets another in front.
    # Done with replace, in C: a payload of many short lines costs no object per line.
    lines = b"data:" + payload.replace(b"\r\n", b"\n").replace(b"\r", b"\n").replace(b"\n", b"\ndata:")
    lines = lines.replace(b"\ndata: ", b"\ndata:  ")
    if lines.startswith(b"data: "):
        lines = b"data:  " + lines[6:]
    return b"event: " + kind + b"\n" + lines + b"\n\n"


def sse_data(payload: bytes) -> bytes:
    return _event(b"data", payload)


def sse_control(fields: dict[str, object]) -> bytes:
    return _event(b"control", _control.encode(fields))

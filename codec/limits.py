"""What a JSON text would cost to decode, counted from its bytes before it is decoded.

Decoding allocates for every value: two bytes such as ``0,`` become a Python object and a
pointer, and a packed row becomes one event per member once it is expanded. So the
counts that request limits are about are taken first, by byte scans that run in C over a
window of the text at a time and allocate nothing per value, and only a text within its
limits is decoded (docs/protocol.md §11).

Every count is exact for valid JSON. For invalid JSON it may be larger, never smaller
than what a decoder would allocate before it finds the fault: a decoder stops at the
first value of the wrong type.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from codec._paths import DECODE_FAILURES
from codec.chunk_rows import ROW_TAGS

__all__ = ["WINDOW", "array_within", "record_events", "string_count", "values_within"]

# One JSON string, escapes included, or the start of one that runs past the end of the window;
# and the rest of a string that began in an earlier window. A pattern that could fail at an
# unclosed string would be retried at every quote inside it, which is quadratic; these always
# match, with possessive quantifiers, so every scan is linear.
_STRING: Final = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
_STRING_REST: Final = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+(?:(?P<closed>")|(?P<escape>\\)?\Z)', re.DOTALL)
_BRACKET: Final = re.compile(rb"[\[\]{}]")
_EMPTY_ARRAY: Final = re.compile(rb"\s*\[\s*\]\s*")
_OPENING: Final = frozenset(b"[{")
# Texts are scanned a window at a time, so a scan holds a window, never a copy of the text.
WINDOW: Final = 1 << 20


def string_count(text: bytes | bytearray) -> int:
    """How many JSON strings (object keys included) ``text`` holds.

    A quote is a delimiter unless it is escaped: after every escaped backslash is dropped,
    an escaped quote is exactly a backslash followed by a quote.
    """
    quotes = text.count(b'"')
    if quotes and b"\\" in text:
        quotes -= text.replace(b"\\\\", b"").count(b'\\"')
    return quotes // 2


def _outside_strings(text: bytes | bytearray, window: int) -> Iterator[bytes]:
    """The parts of ``text`` outside JSON strings, at most one window's worth at a time."""
    inside = escaped = False
    with memoryview(text) as view:
        for begin in range(0, len(text), window):
            chunk = view[begin : begin + window].tobytes()
            if inside:
                # If the string's last window ended on a backslash, this window's first byte is escaped.
                rest = _STRING_REST.match(chunk, 1 if escaped else 0)
                assert rest is not None
                if rest.group("closed") is None:
                    escaped = rest.group("escape") is not None
                    continue
                inside, escaped = False, False
                chunk = chunk[rest.end() :]
            yield _STRING.sub(b"", chunk)
            # An odd number of unescaped quotes leaves this window inside a string.
            quotes = chunk.count(b'"')
            if quotes and b"\\" in chunk:
                quotes -= chunk.replace(b"\\\\", b"").count(b'\\"')
            if quotes % 2:
                inside = True
                escaped = (len(chunk) - len(chunk.rstrip(b"\\"))) % 2 == 1


def values_within(text: bytes | bytearray, limit: int, *, window: int = WINDOW) -> bool:
    """Whether the JSON text holds fewer than ``limit`` values, counted as its commas plus its arrays and objects.

    That count is at least the number of array and object members at every depth, and at
    least half the number of strings (a string is a member or an object key). The cost is a
    few passes in C; when commas or brackets inside strings could matter, also one
    substitution per string, stopping as soon as the count reaches ``limit``.
    """
    if text.count(b",") + text.count(b"[") + text.count(b"{") < limit:
        return True
    count = 0
    for outside in _outside_strings(text, window):
        count += outside.count(b",") + outside.count(b"[") + outside.count(b"{")
        if count >= limit:
            return False
    return True


def array_within(array: bytes | bytearray, limit: int, *, window: int = WINDOW) -> bool:
    """Whether the JSON array text ``array`` has at most ``limit`` members, read without decoding them.

    Only commas at the array's own level separate members. The scan visits each nested
    array and object once, so bound the text with `values_within` first.
    """
    if array.count(b",") < limit:
        return True
    depth = commas = 0
    for outside in _outside_strings(array, window):
        start = 0
        for bracket in _BRACKET.finditer(outside):
            at = bracket.start()
            if depth == 1:
                commas += outside.count(b",", start, at)
                if commas >= limit:
                    return False
            depth += 1 if outside[at] in _OPENING else -1
            start = at + 1
            if depth == 0:
                return commas < limit
        if depth == 1:
            commas += outside.count(b",", start)
            if commas >= limit:
                return False
    return commas < limit


class _Spans(msgspec.Struct, gc=False):
    dt: msgspec.Raw = msgspec.Raw()
    texts: msgspec.Raw = msgspec.Raw()
    args: msgspec.Raw = msgspec.Raw()


class _RowProbe(msgspec.Struct, gc=False):
    type: Any = None
    data: _Spans | None = None


_ROW_PROBE: Final = msgspec.json.Decoder(_RowProbe)


def record_events(line: bytes) -> int:
    """How many logical events a storage line stands for: 1 for an event, a row's member count for a row.

    A row's count is read from its ``texts`` (or ``args``) and ``dt`` spans, whichever
    claims more, without decoding a member, so a row can be refused for its size before
    its lists are built.
    """
    try:
        probe = _ROW_PROBE.decode(line)
    except DECODE_FAILURES:
        return 1
    if type(probe.type) is not str or probe.type not in ROW_TAGS or probe.data is None:
        return 1
    data = probe.data
    members = string_count(bytes(data.texts)) + string_count(bytes(data.args))
    if data.dt:
        dt = bytes(data.dt)
        entries = 0 if _EMPTY_ARRAY.fullmatch(dt) else dt.count(b",") + 1
        members = max(members, entries + 1)
    return max(members, 1)

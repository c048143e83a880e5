"""What a JSON text would cost to decode, counted from its bytes before it is decoded.

Decoding allocates for every value: two bytes such as ``0,`` become a Python object and a
pointer, and a packed row becomes one event per member once it is expanded. So the
counts that request limits are about are taken first, by byte scans that run in C and
allocate nothing per value, and only a text within its limits is decoded
(docs/protocol.md §11).

Every count is exact for valid JSON. For invalid JSON it may be larger, never smaller
than what a decoder would allocate before it finds the fault: a decoder stops at the
first value of the wrong type.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from codec._paths import DECODE_FAILURES
from codec.chunk_rows import ROW_TAGS

__all__ = ["array_within", "record_events", "string_count", "values_within"]

# One JSON string, escapes included; a regex of this shape does not backtrack.
_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET: Final = re.compile(rb"[\[\]{}]")
_EMPTY_ARRAY: Final = re.compile(rb"\s*\[\s*\]\s*")
_OPENING: Final = frozenset(b"[{")


def string_count(text: bytes) -> int:
    """How many JSON strings (object keys included) ``text`` holds.

    A quote is a delimiter unless it is escaped: after every escaped backslash is dropped,
    an escaped quote is exactly a backslash followed by a quote.
    """
    quotes = text.count(b'"')
    if quotes and b"\\" in text:
        quotes -= text.replace(b"\\\\", b"").count(b'\\"')
    return quotes // 2


def _skeleton(text: bytes) -> bytes:
    """``text`` with every string emptied, so the commas and brackets left are structure."""
    return _STRING.sub(b'""', text) if b'"' in text else text


def values_within(text: bytes, limit: int) -> bool:
    """Whether the JSON text holds fewer than ``limit`` values, counted as its commas plus its arrays and objects.

    That count is at least the number of array and object members at every depth, and at
    least half the number of strings (a string is a member or an object key). The cost is a
    few passes in C, plus one substitution per string when commas or brackets inside strings
    could matter, and then only for at most ``2 * limit + 1`` strings.
    """
    if text.count(b",") + text.count(b"[") + text.count(b"{") < limit:
        return True
    if string_count(text) > 2 * limit + 1:
        return False
    skeleton = _skeleton(text)
    return skeleton.count(b",") + skeleton.count(b"[") + skeleton.count(b"{") < limit


def array_within(array: bytes, limit: int) -> bool:
    """Whether the JSON array text ``array`` has at most ``limit`` members, read without decoding them.

    Only commas at the array's own level separate members. The scan visits each nested
    array and object once, so bound the text with `values_within` first.
    """
    if array.count(b",") < limit:
        return True
    skeleton = _skeleton(array)
    depth = commas = 0
    start = 0
    for bracket in _BRACKET.finditer(skeleton):
        at = bracket.start()
        if depth == 1:
            commas += skeleton.count(b",", start, at)
            if commas >= limit:
                return False
        depth += 1 if skeleton[at] in _OPENING else -1
        if depth == 1:
            start = at + 1
        elif depth == 0:
            break
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

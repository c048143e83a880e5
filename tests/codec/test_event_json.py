"""The shared encoder and the event decoders."""

from __future__ import annotations

import pytest

from codec import CodecError, Event, decode_storage_line, encode_lines, pack
from codec.event_json import events_from_values
from testing.events import plain, text


def test_encode_lines_frames_each_record():
    records = pack([text(0, 0, "a"), text(1, 0, "b"), text(2, 0, "c"), plain(3)])
    lines = encode_lines(records)
    assert lines.count(b"\n") == 2 and lines.endswith(b"\n")
    assert [decode_storage_line(line) for line in lines.splitlines()] == records


def test_events_from_values_validates_like_the_byte_decoder():
    assert events_from_values([{"type": "x", "seq": 0, "time": 0, "data": 1}]) == [Event("x", 0, 0, 1)]
    with pytest.raises(CodecError, match=r"^batch\[0\]\.seq"):
        events_from_values([{"type": "x", "seq": "0", "time": 0, "data": 1}], where="batch")

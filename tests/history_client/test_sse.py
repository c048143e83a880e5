"""The event-stream decoder: any chunking, every line ending, the WHATWG field rules."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from history_client import ServerSentEvent, SSEDecoder

STREAM = (
    b'retry: 250\n\n: a comment\nid: 7\nevent: snapshot\ndata: {"a":1}\n\n'
    b"event: event\r\ndata: line one\r\ndata: line two\r\n\r\n"
    b"id: 8\revent: event\rdata:no-space\r\r"
    b"data: message\n\n"
)
EXPECTED = [
    ServerSentEvent("snapshot", b'{"a":1}', "7", 250),
    ServerSentEvent("event", b"line one\nline two", "7", 250),
    ServerSentEvent("event", b"no-space", "8", 250),
    ServerSentEvent("message", b"message", "8", 250),
]


def decode_in(chunks: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [event for chunk in chunks for event in decoder.feed(chunk)]


def test_whole_stream_decodes_every_field_and_line_ending():
    assert decode_in([STREAM]) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_chunking_gives_the_same_events(cuts):
    bounds = [0, *sorted(cuts), len(STREAM)]
    assert decode_in([STREAM[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]) == EXPECTED


def test_a_crlf_split_across_chunks_is_one_line_ending():
    assert decode_in([b"data: x\r", b"\n\r", b"\n"]) == [ServerSentEvent("message", b"x", None)]


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (b"retry: 1000\n\n", []),
        (b"event: event\n\n", []),
        (b"id: a\x00b\ndata: x\n\n", [ServerSentEvent("message", b"x", None)]),
        (b"retry: soon\ndata: x\n\n", [ServerSentEvent("message", b"x", None)]),
        (b"data\n\n", [ServerSentEvent("message", b"", None)]),
        (b"data: unterminated", []),
    ],
    ids=["retry-only", "no-data", "id-with-nul", "bad-retry", "empty-data-field", "no-blank-line"],
)
def test_field_edge_cases(stream, expected):
    assert decode_in([stream]) == expected

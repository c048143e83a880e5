"""Every decoder of the codec is strict, and every failure is a CodecError, whatever the input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from codec import (
    CodecError,
    Event,
    InvalidJsonError,
    RowFormatError,
    decode_event,
    decode_follow_snapshot,
    decode_header,
    decode_json,
    decode_page,
    decode_page_record,
    decode_page_shell,
    decode_record_range,
    decode_storage_line,
    encode,
)
from codec.chunk_rows import ROW_TAGS, decode_storage_record
from codec.event_json import decode_events

DECODERS: list[Callable[[bytes], object]] = [
    decode_storage_line,
    decode_page,
    decode_page_shell,
    decode_page_record,
    decode_record_range,
    decode_follow_snapshot,
    decode_events,
    decode_event,
    decode_header,
    decode_json,
]

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)
ROW_FIELDS = st.dictionaries(
    st.sampled_from(["type", "seq0", "time0", "data", "seq", "x"]),
    JSON_VALUES
    | st.fixed_dictionaries(
        {},
        optional={
            "turn": JSON_VALUES,
            "step": JSON_VALUES,
            "index": JSON_VALUES,
            "dt": st.lists(st.integers(), max_size=4) | JSON_VALUES,
            "texts": st.lists(st.text(max_size=2), max_size=4) | JSON_VALUES,
            "args": st.lists(st.text(max_size=2), max_size=4),
            "id": JSON_VALUES,
            "name": JSON_VALUES,
        },
    ),
)


@st.composite
def row_like(draw: st.DrawFn) -> dict[str, Any]:
    value = draw(ROW_FIELDS)
    value["type"] = draw(st.sampled_from(sorted(ROW_TAGS)))
    return value


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=64) | JSON_VALUES.map(encode) | row_like().map(encode))
def test_decoders_raise_only_codec_errors_on_arbitrary_bytes(data):
    for decoder in DECODERS:
        try:
            decoder(data)
        except CodecError:
            pass


@settings(max_examples=400, deadline=None)
@given(JSON_VALUES | row_like())
def test_decode_storage_record_raises_only_codec_errors_on_arbitrary_values(value):
    try:
        out = decode_storage_record(value)
    except CodecError:
        return
    assert out == [value] or all(type(event) is Event for event in out)


@settings(max_examples=200, deadline=None)
@given(st.lists(JSON_VALUES | row_like(), max_size=4))
def test_page_decoder_raises_only_codec_errors_on_arbitrary_records(records):
    body = encode(
        {
            "records": [{"chunks": r} if isinstance(r, dict) and "seq0" in r else {"event": r} for r in records],
            "hasMore": False,
            "fromSeq": 0,
            "toSeq": 0,
        }
    )
    try:
        decode_page(body)
    except CodecError:
        pass


def test_deeply_nested_json_is_a_codec_error_not_a_crash():
    body = b"[" * 100_000 + b"]" * 100_000
    for decoder in DECODERS:
        with pytest.raises(CodecError):
            decoder(body)


def test_oversize_integer_anywhere_is_a_codec_error():
    with pytest.raises(CodecError):
        decode_storage_line(b'{"type":"x","seq":99999999999999999999999999,"time":0,"data":1}')
    with pytest.raises(RowFormatError):
        decode_storage_line(
            b'{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1e999],"texts":["a","b"]}}'
        )


INVALID_UTF8 = b"\xff\xfe\xc3"


EVENT_UTF8 = b'{"type":"x","seq":0,"time":0,"data":"' + INVALID_UTF8 + b'"}'
UTF8_CASES: dict[str, tuple[Callable[[bytes], object], bytes]] = {
    "decode_json": (decode_json, EVENT_UTF8),
    "decode_event": (decode_event, EVENT_UTF8),
    "decode_storage_line": (decode_storage_line, EVENT_UTF8),
    "decode_events": (decode_events, b"[" + EVENT_UTF8 + b"]"),
    "decode_header": (decode_header, b'{"id":"h","createdAt":0,"cwd":"' + INVALID_UTF8 + b'"}'),
    "decode_page": (decode_page, b'{"records":[{"event":' + EVENT_UTF8 + b'}],"hasMore":false,"fromSeq":0,"toSeq":1}'),
}


@pytest.mark.parametrize("case", sorted(UTF8_CASES))
def test_invalid_utf8_in_a_string_is_invalid_json(case):
    """F3: msgspec raises UnicodeDecodeError, not DecodeError; the codec turns it into InvalidJsonError."""
    decoder, data = UTF8_CASES[case]
    with pytest.raises(InvalidJsonError, match="invalid UTF-8"):
        decoder(data)

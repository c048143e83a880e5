"""Wire decoders: strict, and every failure is a CodecError, whatever the input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from codec import (
    ROW_TAGS,
    CodecError,
    Event,
    InvalidJsonError,
    RecordFormatError,
    RowFormatError,
    decode_event,
    decode_events,
    decode_follow_snapshot,
    decode_header,
    decode_json,
    decode_page,
    decode_page_record,
    decode_page_shell,
    decode_record_range,
    decode_storage_line,
    decode_storage_record,
    encode,
    encode_lines,
    events_from_values,
    pack,
    pack_page,
)
from tests.codec.helpers import plain, text

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


@pytest.mark.parametrize("line", [b"", b"not json", b"[1,2]", b'"text"', b'{"type":"x"', b"\xff\xfe"])
def test_storage_line_rejects_non_objects(line):
    with pytest.raises(CodecError):
        decode_storage_line(line)


def test_storage_line_refuses_a_header():
    with pytest.raises(RecordFormatError, match="session header"):
        decode_storage_line(b'{"type":"session","version":0,"id":"s","createdAt":0}')


def test_oversize_integer_anywhere_is_a_codec_error():
    with pytest.raises(CodecError):
        decode_storage_line(b'{"type":"x","seq":99999999999999999999999999,"time":0,"data":1}')
    with pytest.raises(RowFormatError):
        decode_storage_line(
            b'{"type":"text-chunks","seq0":0,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1e999],"texts":["a","b"]}}'
        )


def test_encode_lines_frames_each_record():
    records = pack([text(0, 0, "a"), text(1, 0, "b"), text(2, 0, "c"), plain(3)])
    lines = encode_lines(records)
    assert lines.count(b"\n") == 2 and lines.endswith(b"\n")
    assert [decode_storage_line(line) for line in lines.splitlines()] == records


def test_events_from_values_validates_like_the_byte_decoder():
    assert events_from_values([{"type": "x", "seq": 0, "time": 0, "data": 1}]) == [Event("x", 0, 0, 1)]
    with pytest.raises(CodecError, match=r"^batch\[0\]\.seq"):
        events_from_values([{"type": "x", "seq": "0", "time": 0, "data": 1}], where="batch")


def _page_bytes() -> bytes:
    events = [plain(0), *(text(seq, 1000 + seq, f"t{seq}") for seq in range(1, 9)), plain(9)]
    return encode({"records": pack_page(events), "hasMore": False, "fromSeq": 0, "toSeq": 10})


def test_record_at_a_time_decoding_matches_whole_page_decoding():
    body = _page_bytes()
    shell = decode_page_shell(body)
    page = decode_page(body)
    assert (shell.fromSeq, shell.toSeq, shell.hasMore) == (page.fromSeq, page.toSeq, page.hasMore)
    assert [decode_page_record(raw, index=i) for i, raw in enumerate(shell.records)] == page.records
    assert [decode_record_range(raw) for raw in shell.records] == [(0, 0), (1, 8), (9, 9)]


def test_a_single_record_error_names_its_index_and_field():
    row = bytes(decode_page_shell(_page_bytes()).records[1]).replace(b'"seq0":1', b'"seq0":"1"')
    with pytest.raises(RowFormatError, match=r"records\[4\]\.chunks: malformed text-chunks row: row\.seq0"):
        decode_page_record(row, index=4)
    with pytest.raises(RecordFormatError, match=r"records\[2\]: expected exactly one"):
        decode_record_range(b'{"event":{"seq":1},"chunks":{"seq0":1,"data":{"dt":[]}}}', index=2)


def test_follow_snapshot_keeps_header_cursor_and_raw_records():
    body = _page_bytes()
    snapshot = decode_follow_snapshot(b'{"header":{"type":"session","id":"s","createdAt":0},"cursor":9,' + body[1:])
    assert (snapshot.header.id, snapshot.cursor, len(snapshot.records), snapshot.toSeq) == ("s", 9, 3, 10)
    with pytest.raises(RecordFormatError, match="snapshot"):
        decode_follow_snapshot(b'{"header":{"id":"s","createdAt":0},"cursor":-2,' + body[1:])


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

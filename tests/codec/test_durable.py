"""Durable Streams wire formats (codec/durable.py): offsets, JSON-mode fragments and SSE framing."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from codec import (
    ZERO_OFFSET,
    InvalidJsonError,
    fragment_values,
    json_array,
    json_fragment,
    json_pieces,
    parse_stream_offset,
    pieces,
    sse_control,
    sse_data,
    sse_payload,
    stream_offset,
)
from testing.strategies import json_values

numbers = st.integers(min_value=0, max_value=10**16 - 1)
line_breaks = re.compile(rb"\r\n|\r|\n")


# Offsets.


@given(numbers, numbers, numbers, numbers)
def test_offsets_compare_as_strings_as_their_numbers_do(epoch: int, position: int, epoch2: int, position2: int) -> None:
    one, two = stream_offset(position, epoch), stream_offset(position2, epoch2)
    assert (one < two) == ((epoch, position) < (epoch2, position2))
    assert (one == two) == ((epoch, position) == (epoch2, position2))


@given(numbers, numbers)
def test_an_offset_parses_back_to_its_epoch_and_position(epoch: int, position: int) -> None:
    assert parse_stream_offset(stream_offset(position, epoch)) == (epoch, position)


def test_the_zero_offset_is_position_zero_of_epoch_zero() -> None:
    assert stream_offset(0) == ZERO_OFFSET == "0000000000000000_0000000000000000"
    assert parse_stream_offset(ZERO_OFFSET) == (0, 0)


@pytest.mark.parametrize(
    "text",
    ["", "-1", "now", "_", "1_", "_1", "1_2_3", "1-2", " 1_2", "1_2\n", "1_+2", "1_2.0", "1" * 20 + "_0", "١_٢"],
    ids=["empty", "minus-one", "now", "bare", "no-position", "no-epoch", "three", "dash", "space", "newline", "sign",
         "fraction", "too-long", "arabic-indic-digits"],
)  # fmt: skip
def test_anything_else_is_not_an_offset(text: str) -> None:
    assert parse_stream_offset(text) is None


# JSON mode: fragments keep each value's own bytes.

spaces = st.text(alphabet=" \t\n\r", max_size=2)


@st.composite
def json_texts(draw: st.DrawFn, value: Any) -> str:
    """``value`` as JSON text with any JSON whitespace between its tokens."""
    if isinstance(value, list):
        items = [draw(spaces) + draw(json_texts(item)) + draw(spaces) for item in value]
        return "[" + ",".join(items) + "]" if items else "[" + draw(spaces) + "]"
    if isinstance(value, dict):
        members = [
            f"{draw(spaces)}{json.dumps(key)}{draw(spaces)}:{draw(spaces)}{draw(json_texts(item))}{draw(spaces)}"
            for key, item in value.items()
        ]
        return "{" + ",".join(members) + "}" if members else "{" + draw(spaces) + "}"
    return json.dumps(value, ensure_ascii=draw(st.booleans()))


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """An append's body (one value, or an array of at least one) and its values' texts, as sent."""
    if draw(st.booleans()):
        texts = draw(st.lists(json_values(max_leaves=6).flatmap(json_texts), min_size=1, max_size=4))
        inner = ",".join(draw(spaces) + text + draw(spaces) for text in texts)
        body = "[" + inner + "]"
    else:
        text = draw(json_values(max_leaves=8).filter(lambda value: not isinstance(value, list)).flatmap(json_texts))
        texts, body = [text], text
    return (draw(spaces) + body + draw(spaces)).encode(), texts


@settings(max_examples=150, deadline=None)
@given(st.lists(bodies(), max_size=6))
def test_fragments_of_appends_read_as_the_array_of_all_their_values(appends: list[tuple[bytes, list[str]]]) -> None:
    fragments = [json_fragment(body) for body, _ in appends]
    texts = [text for _, sent in appends for text in sent]
    assert [fragment_values(fragment) for fragment in fragments] == [
        [text.encode() for text in sent] for _, sent in appends
    ]
    array = json_array(fragments)
    assert json.loads(array) == [json.loads(text) for text in texts]
    assert msgspec.json.decode(array) == msgspec.json.decode(b"[" + ",".join(texts).encode() + b"]")


def test_a_value_keeps_its_exact_bytes() -> None:
    assert json_fragment(b' {"a" :  [1 ,2],\n"b":"\\u00e9"} \n') == b'{"a" :  [1 ,2],\n"b":"\\u00e9"},'
    assert json_fragment('"é"'.encode()) == '"é",'.encode()
    assert json_fragment(b"1.50e+3") == b"1.50e+3,"


@pytest.mark.parametrize(
    ("body", "values"),
    [
        (b"[1,2]", [b"1", b"2"]),
        (b"[[1,2],[3]]", [b"[1,2]", b"[3]"]),
        (b"[[]]", [b"[]"]),
        (b' [ {"a":[1]} , [ ] ] ', [b'{"a":[1]}', b"[ ]"]),
        (b'{"a":[1,2]}', [b'{"a":[1,2]}']),
        (b'"[1,2]"', [b'"[1,2]"']),
    ],
    ids=["flat", "nested", "empty-inner", "spaced", "object", "string"],
)
def test_an_array_is_flattened_exactly_one_level(body: bytes, values: list[bytes]) -> None:
    assert fragment_values(json_fragment(body)) == values


def test_an_empty_array_appends_nothing_unless_allowed() -> None:
    for body in (b"[]", b" [ \n] "):
        with pytest.raises(InvalidJsonError):
            json_fragment(body)
        assert json_fragment(body, allow_empty=True) == b""
    assert json_array([]) == json_array([b""]) == b"[]"
    assert fragment_values(b"") == []


@pytest.mark.parametrize(
    "body",
    [b"", b" ", b"{", b"[1,]", b"nul", b"1 2", b"[1] x", b"[1]]", b"'a'", b"NaN", b"01", b'{"a": nul}', b'["\\x"]',
     b'"a\x01"', b"\xef\xbb\xbf1"],
    ids=["empty", "space", "open", "trailing-comma", "truncated-literal", "two-values", "trailing-text",
         "extra-bracket", "single-quotes", "nan", "leading-zero", "bad-literal", "bad-escape", "control-char", "bom"],
)  # fmt: skip
def test_invalid_json_is_refused(body: bytes) -> None:
    with pytest.raises(InvalidJsonError):
        json_fragment(body)


@pytest.mark.parametrize(
    "body", [b'"\xff"', b'["\xc3"]', b'{"\xe9":1}', b'"\xed\xa0\x80"'], ids=["ff", "cut", "key", "surrogate"]
)
def test_invalid_utf8_is_refused(body: bytes) -> None:
    with pytest.raises(InvalidJsonError):
        json_fragment(body)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40) | st.text(alphabet='[]{},:"01 \\nutrefalse\xe9', max_size=20).map(str.encode))
def test_any_body_is_fragments_or_invalid_json(body: bytes) -> None:
    try:
        fragment = json_fragment(body)
    except InvalidJsonError:
        return
    values = fragment_values(fragment)
    assert values and b"".join(value + b"," for value in values) == fragment
    decoded = msgspec.json.decode(body)
    assert [msgspec.json.decode(value) for value in values] == (decoded if isinstance(decoded, list) else [decoded])


# SSE framing.


def parse_sse(stream: bytes) -> list[tuple[bytes, bytes]]:
    """The events of an SSE stream, ``(type, data)``, as the HTML spec's parser dispatches them."""
    events: list[tuple[bytes, bytes]] = []
    kind, data = b"", b""
    lines = re.findall(rb"([^\r\n]*)(?:\r\n|\r|\n)", stream)
    assert b"".join(line + b"\n" for line in lines) == line_breaks.sub(b"\n", stream), "an unterminated line"
    for line in lines:
        if not line:
            if data:
                events.append((kind or b"message", data[:-1]))
            kind, data = b"", b""
            continue
        if line.startswith(b":"):
            continue
        field, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if field == b"event":
            kind = value
        elif field == b"data":
            data += value + b"\n"
    return events


def test_the_parser_follows_the_spec() -> None:
    assert parse_sse(b"data: a\r\ndata:b\r: note\nevent:x\n\ndata\n\n\n") == [(b"x", b"a\nb"), (b"message", b"")]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=60) | st.text(alphabet=" \r\n:xdaentv", max_size=30).map(str.encode))
def test_a_data_event_parses_back_to_its_payload(payload: bytes) -> None:
    assert parse_sse(sse_data(payload)) == [(b"data", line_breaks.sub(b"\n", payload))]


@pytest.mark.parametrize(
    "payload",
    [b"x\n\nevent: control\ndata: x", b"\n\nevent: control\ndata: x\n\n", b"a\rb", b"\r", b"\r\r\n\n", b"\n", b""],
    ids=["forged-event", "leading-forged-event", "lone-cr", "cr-only", "mixed-breaks", "newline", "empty"],
)
def test_a_payload_never_forges_an_event(payload: bytes) -> None:
    stream = sse_data(payload) + sse_control({"streamNextOffset": ZERO_OFFSET}) + sse_data(payload)
    events = parse_sse(stream)
    assert [kind for kind, _ in events] == [b"data", b"control", b"data"]
    assert events[0][1] == events[2][1] == line_breaks.sub(b"\n", payload)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values(max_leaves=6), max_size=5))
def test_a_control_event_is_one_line_of_json(fields: dict[str, object]) -> None:
    event = sse_control(fields)
    assert event.startswith(b"event: control\n") and event.count(b"\n") == 3
    ((kind, data),) = parse_sse(event)
    assert kind == b"control" and json.loads(data) == fields


def test_a_control_event_is_compact_json() -> None:
    fields = {"streamNextOffset": stream_offset(5), "upToDate": True, "streamCursor": "c1"}
    assert sse_control(fields) == (
        b'event: control\ndata:{"streamNextOffset":"0000000000000000_0000000000000005",'
        b'"upToDate":true,"streamCursor":"c1"}\n\n'
    )


def test_a_payload_is_the_array_in_json_mode_base64_for_bytes_and_as_is_for_text() -> None:
    assert sse_payload(b'1,{"a":2},', mode="json") == b'[1,{"a":2}]'
    assert sse_payload(b"", mode="json") == b"[]"
    assert sse_payload(b"\x00\xff\n", mode="base64") == base64.b64encode(b"\x00\xff\n") == b"AP8K"
    assert sse_payload(b"a\nb", mode="text") == b"a\nb"


def test_a_payload_line_that_starts_with_a_space_keeps_it() -> None:
    assert parse_sse(sse_data(b" indented\n  twice")) == [(b"data", b" indented\n  twice")]


# Pieces: how an append is stored, and where a read may end inside it.


@given(st.binary(max_size=200), st.integers(1, 40))
def test_bytes_are_cut_into_pieces_of_at_most_the_size_that_join_back(data: bytes, most: int) -> None:
    found = pieces(data, most)
    assert b"".join(found) == data
    assert all(len(piece) == most for piece in found[:-1]) and len(found[-1]) <= most


@given(st.text(max_size=200), st.integers(4, 40))
def test_text_is_cut_only_between_characters(text: str, most: int) -> None:
    found = pieces(text.encode(), most, text=True)
    assert "".join(piece.decode() for piece in found) == text  # each piece decodes alone
    assert all(0 < len(piece) <= most for piece in found if text)


def test_bytes_that_are_not_utf8_are_cut_where_they_fall() -> None:
    assert pieces(b"\x80" * 10, 4, text=True) == [b"\x80" * 4, b"\x80" * 4, b"\x80" * 2]


@given(st.lists(json_values(), max_size=12), st.integers(2, 60))
def test_json_is_cut_between_values_into_its_fragment(values: list[Any], most: int) -> None:
    body = msgspec.json.encode(values)
    if not values:
        assert json_pieces(body, most, allow_empty=True) == []
        return
    found = json_pieces(body, most)
    assert b"".join(found) == json_fragment(body)
    assert [value for piece in found for value in fragment_values(piece)] == fragment_values(json_fragment(body))
    # A piece passes the size only when it is one value alone.
    assert all(len(piece) <= most or len(fragment_values(piece)) == 1 for piece in found)

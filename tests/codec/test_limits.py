"""Counting a JSON text's values, members and a row's events from its bytes, before decoding it."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import msgspec
from hypothesis import given, settings, strategies as st

from codec import values_within
from codec.limits import array_within, record_events, string_count

# Strings full of the bytes a naive count would mistake for structure.
TRICKY = st.text(alphabet=st.sampled_from(list('ab,[]{}:"\\/ é\n\t😀')), max_size=12)
SCALARS = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | TRICKY
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TRICKY, inner, max_size=5),
    max_leaves=40,
)
# The way people write JSON: compact, spaced, or with every character escaped.
SPELLINGS = st.sampled_from(
    [
        lambda value: json.dumps(value, ensure_ascii=False, separators=(",", ":")),
        lambda value: json.dumps(value, ensure_ascii=True, indent=1),
        lambda value: json.dumps(value, ensure_ascii=False),
    ]
)


def exact(value: Any) -> tuple[int, int]:
    """(strings, commas + arrays + objects) of a decoded value: what the byte counts measure."""
    if isinstance(value, str):
        return 1, 0
    if isinstance(value, list):
        strings, structure = 0, 1 + max(len(value) - 1, 0)
        for member in value:
            s, t = exact(member)
            strings, structure = strings + s, structure + t
        return strings, structure
    if isinstance(value, dict):
        strings, structure = len(value), 1 + max(len(value) - 1, 0)
        for member in value.values():
            s, t = exact(member)
            strings, structure = strings + s, structure + t
        return strings, structure
    return 0, 0


# Scans read a window at a time; tiny windows cut strings and escapes at every possible place.
WINDOWS = st.sampled_from([1, 2, 3, 5, 8, 64, 1 << 20])


@settings(max_examples=400, deadline=None)
@given(VALUES, SPELLINGS, WINDOWS)
def test_strings_and_values_are_counted_exactly_from_the_bytes(value: Any, spelling: Any, window: int) -> None:
    text = spelling(value).encode()
    strings, structure = exact(value)
    assert string_count(text) == strings
    assert values_within(text, structure + 1, window=window)
    assert not values_within(text, structure, window=window)


@settings(max_examples=400, deadline=None)
@given(st.lists(VALUES, max_size=8), SPELLINGS, WINDOWS)
def test_array_members_are_counted_at_the_arrays_own_level(members: list[Any], spelling: Any, window: int) -> None:
    text = spelling(members).encode()
    assert array_within(text, max(len(members), 1), window=window)
    if members:
        assert not array_within(text, len(members) - 1, window=window)


def row(tag: str, members: int, *, dt: int | None = None, field: str = "texts") -> bytes:
    data: dict[str, Any] = {"turn": 1, "step": 1, "index": 0, "dt": [0] * (members - 1 if dt is None else dt)}
    if field == "args":
        data.update(id="c", args=['{"a": "x,y"}'] * members)
    else:
        data[field] = ['say "hi", [ok]'] * members
    return msgspec.json.encode({"type": tag, "seq0": 0, "time0": 0, "data": data})


@given(st.integers(1, 300), st.sampled_from(["text-chunks", "reasoning-chunks"]))
def test_a_rows_events_are_its_members(members: int, tag: str) -> None:
    assert record_events(row(tag, members)) == members
    assert record_events(row("tool-call-chunks", members, field="args")) == members


def test_a_row_that_lies_about_its_length_counts_as_its_longest_claim() -> None:
    assert record_events(row("text-chunks", 3, dt=500)) == 501
    assert record_events(row("text-chunks", 500, dt=0)) == 500


def test_anything_else_is_one_event() -> None:
    for line in [b'{"type":"x","seq":0,"time":0,"data":[1,2,3]}', b"[1,2]", b"not json", b'{"type":"text-chunks"}']:
        assert record_events(line) == 1


def refused_within_a_window_of_memory(body: bytes | bytearray) -> bool:
    """Whether the value count refuses ``body`` while its peak allocation stays within a few scan windows."""
    tracemalloc.start()
    try:
        refused = not values_within(body, 2_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return refused and peak < 4 * (1 << 20)


def test_a_body_of_ten_million_members_is_measured_in_a_window_of_memory() -> None:
    assert refused_within_a_window_of_memory(bytearray(b'{"events":[' + b"1," * 9_999_999 + b"1]}"))


def test_a_four_million_member_row_is_measured_without_building_it() -> None:
    """F1: 4,000,000 empty texts (20 MB) are refused by a scan that holds a window of the text, never its members."""
    data = b'"data":{"turn":1,"step":1,"index":0,"dt":[' + b"0," * 3_999_999 + b'0],"texts":[' + b'"",' * 3_999_999
    body = b'{"events":[{"type":"text-chunks","seq0":1,"time0":0,' + data + b'""]}}]}'
    assert len(body) > 19_000_000
    assert refused_within_a_window_of_memory(body)


def test_a_string_of_escaped_quotes_longer_than_a_window_is_measured_in_one_pass() -> None:
    """A string that does not close in its window must not make the scan retry at every quote inside it."""
    body = b'{"events":[{"type":"x","seq":0,"time":0,"data":"' + b'\\",' * 2_100_000 + b'"}]}'
    assert values_within(body, 20)
    assert array_within(body[len(b'{"events":') : -1], 1)
    assert not array_within(b"[" + b'"\\",",' * 2_100_000 + b"0]", 2_000_000)

"""Chunk-row codec: the edge cases of dsh-packed-rows.md §7 items 1-10, by name, plus properties."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from msgspec import UNSET

from codec import (
    MAX_SAFE_INTEGER,
    Event,
    ReasoningChunks,
    RowFormatError,
    TextChunks,
    ToolCallChunks,
    decode_storage_line,
    encode,
    encode_lines,
    expand_records,
    pack,
)
from codec.chunk_rows import block_of, continues_run, decode_storage_record, delta_member, member_count, record_range
from testing.events import chunk_event, plain, reasoning, text, tool
from testing.strategies import batches

T0 = 1_700_000_000_000


def kinds(records: list[Any]) -> list[str]:
    return [record.type if type(record) is Event else record.__struct_config__.tag for record in records]


# 1. Round trip, one tag per kind, name-less tool rows keep the key absent.


def test_pack_turns_five_text_deltas_into_one_row():
    events = [text(10 + k, T0 + 10 * k, value) for k, value in enumerate(["a", "b", "c", "d", "e"])]
    (row,) = pack(events)
    assert type(row) is TextChunks
    assert row.seq0 == 10 and row.time0 == T0
    assert row.data.dt == [10, 10, 10, 10]
    assert row.data.texts == ["a", "b", "c", "d", "e"]
    assert expand_records([row]) == events


def test_pack_output_bytes_match_the_deepseek_harness_key_order():
    events = [text(10, T0, "Hel"), text(11, T0 + 3, "lo"), text(12, T0 + 3, ""), text(13, T0 + 2, " world")]
    assert encode(pack(events)[0]) == (
        b'{"type":"text-chunks","seq0":10,"time0":1700000000000,'
        b'"data":{"turn":1,"step":1,"index":1,"dt":[3,0,-1],"texts":["Hel","lo",""," world"]}}'
    )
    named = [
        tool(20, T0, "", name="bash"),
        tool(21, T0, '{"cmd"', name="bash"),
        tool(22, T0 + 28, ': "ls"}', name="bash"),
    ]
    assert encode(pack(named)[0]) == (
        b'{"type":"tool-call-chunks","seq0":20,"time0":1700000000000,"data":{"turn":1,"step":1,"index":2,'
        b'"dt":[0,28],"id":"c1","name":"bash","args":["","{\\"cmd\\"",": \\"ls\\"}"]}}'
    )


def test_expanded_events_have_canonical_key_order():
    (row,) = pack([tool(0, 5, "a"), tool(1, 6, "b"), tool(2, 7, "c", call_id="c1")])
    assert encode(expand_records([row])[0]) == (
        b'{"type":"assistant/chunk","seq":0,"time":5,"data":{"turn":1,"step":1,'
        b'"chunk":{"type":"tool-call-delta","index":2,"id":"c1","argumentsDelta":"a"}}}'
    )


def test_reasoning_and_tool_call_runs_get_their_own_tags():
    events = [reasoning(k, T0, "r") for k in range(3)] + [tool(3 + k, T0, "x") for k in range(3)]
    records = pack(events)
    assert [type(r) for r in records] == [ReasoningChunks, ToolCallChunks]
    assert expand_records(records) == events


def test_nameless_tool_call_run_round_trips_with_the_key_absent():
    events = [tool(k, T0 + k, "x") for k in range(3)]
    (row,) = pack(events)
    assert isinstance(row, ToolCallChunks) and row.data.name is UNSET
    assert b'"name"' not in encode(row)
    assert expand_records([row]) == events
    assert all(b'"name"' not in encode(e) for e in expand_records([row]))


# 2. Short runs stay verbatim.


@pytest.mark.parametrize("length", [1, 2])
def test_runs_shorter_than_three_stay_verbatim(length):
    events = [text(k, T0, "x") for k in range(length)]
    assert pack(events) == events


# 3. Boundary chunks and ordinary events stay verbatim between runs.


@pytest.mark.parametrize(
    "boundary",
    [
        {"type": "block-start", "index": 1, "blockType": "text"},
        {"type": "block-end", "index": 1, "block": {"type": "text", "text": "abc"}},
        {"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 2}},
        {"type": "finish", "reason": {"kind": "stop"}},
    ],
    ids=["block-start", "block-end", "usage", "finish"],
)
def test_boundary_chunks_stay_verbatim_between_runs(boundary):
    middle = chunk_event(3, T0, boundary)
    events = [text(k, T0, "a") for k in range(3)] + [middle] + [text(4 + k, T0, "b") for k in range(3)]
    records = pack(events)
    assert kinds(records) == ["text-chunks", "assistant/chunk", "text-chunks"]
    assert records[1] is middle
    assert expand_records(records) == events


def test_non_chunk_events_stay_verbatim_and_split_runs():
    events = [text(0, T0, "a"), text(1, T0, "b"), plain(2, "step/end"), text(3, T0, "c"), text(4, T0, "d")]
    assert pack(events) == events


# 4. Run breaks.


def _break_pairs() -> list[Any]:
    def after(first: Event, second_of: Any) -> list[Event]:
        return [first, second_of(1), second_of(2), second_of(3)]

    return [
        pytest.param(
            [text(0, T0, "a"), text(1, T0, "b"), text(2, T0, "c"), text(4, T0, "d"), text(5, T0, "e")], id="seq-gap"
        ),
        pytest.param(
            [text(k, T0, "a") for k in range(3)] + [reasoning(k, T0, "b", index=1) for k in range(3, 6)], id="kind"
        ),
        pytest.param(
            [text(k, T0, "a") for k in range(3)] + [text(k, T0, "b", index=2) for k in range(3, 6)], id="index"
        ),
        pytest.param([text(k, T0, "a") for k in range(3)] + [text(k, T0, "b", step=2) for k in range(3, 6)], id="step"),
        pytest.param([text(k, T0, "a") for k in range(3)] + [text(k, T0, "b", turn=2) for k in range(3, 6)], id="turn"),
        pytest.param(
            [tool(k, T0, "a") for k in range(3)] + [tool(k, T0, "b", call_id="c2") for k in range(3, 6)], id="tool-id"
        ),
        pytest.param(
            [tool(k, T0, "a", name="bash") for k in range(3)] + [tool(k, T0, "b", name="read") for k in range(3, 6)],
            id="tool-name-value",
        ),
        pytest.param(
            [tool(k, T0, "a", name="bash") for k in range(3)] + [tool(k, T0, "b") for k in range(3, 6)],
            id="tool-name-presence",
        ),
    ]


@pytest.mark.parametrize("events", _break_pairs())
def test_run_breaks_after_the_first_three_members(events):
    records = pack(events)
    assert record_range(records[0]) == (events[0].seq, events[2].seq)
    assert expand_records(records) == events


def test_seq_gap_leaves_the_short_tail_verbatim():
    events = [text(0, T0, "a"), text(1, T0, "b"), text(2, T0, "c"), text(4, T0, "d"), text(5, T0, "e")]
    records = pack(events)
    assert kinds(records) == ["text-chunks", "assistant/chunk", "assistant/chunk"]


def test_int_and_float_turns_do_not_share_a_row():
    events = [chunk_event(k, T0, {"type": "text-delta", "index": 1, "text": "a"}, turn=1) for k in range(3)]
    events += [chunk_event(k, T0, {"type": "text-delta", "index": 1, "text": "b"}, turn=1.0) for k in range(3, 6)]  # type: ignore[arg-type]
    records = pack(events)
    assert kinds(records) == ["text-chunks", "text-chunks"]
    assert encode(expand_records(records)) == encode(events)


# 5. Off-whitelist events stay verbatim.


def _delta(**chunk_overrides: Any) -> dict[str, Any]:
    chunk = {"type": "text-delta", "index": 1, "text": "x"}
    chunk.update(chunk_overrides)
    return chunk


OFF_WHITELIST: list[Any] = [
    pytest.param(
        lambda seq: Event("assistant/chunk", seq, T0, {"turn": 1, "step": 1, "chunk": _delta()}, surfaceOp="append"),
        id="extra-envelope-key",
    ),
    pytest.param(
        lambda seq: Event("assistant/chunk", seq, T0, {"turn": 1, "step": 1, "chunk": _delta()}, ignorable=True),
        id="ignorable",
    ),
    pytest.param(lambda seq: chunk_event(seq, T0, _delta(text=5)), id="non-string-text"),
    pytest.param(
        lambda seq: Event("assistant/chunk", seq, T0 + 0.5, {"turn": 1, "step": 1, "chunk": _delta()}),  # type: ignore[arg-type]
        id="fractional-time",
    ),
    pytest.param(
        lambda seq: Event("assistant/chunk", -1, T0, {"turn": 1, "step": 1, "chunk": _delta()}), id="negative-seq"
    ),
    pytest.param(lambda seq: Event("assistant/chunk", seq, T0, ["not", "an", "object"]), id="data-not-object"),
    pytest.param(
        lambda seq: Event("assistant/chunk", seq, T0, {"turn": 1, "step": 1, "chunk": _delta(), "x": 1}),
        id="extra-data-key",
    ),
    pytest.param(
        lambda seq: Event("assistant/chunk", seq, T0, {"turn": "1", "step": 1, "chunk": _delta()}), id="non-number-turn"
    ),
    pytest.param(
        lambda seq: Event("assistant/chunk", seq, T0, {"turn": True, "step": 1, "chunk": _delta()}), id="bool-turn"
    ),
    pytest.param(
        lambda seq: Event("assistant/chunk", seq, T0, {"turn": 1, "step": 1, "chunk": "text-delta"}),
        id="chunk-not-object",
    ),
    pytest.param(lambda seq: chunk_event(seq, T0, _delta(index="1")), id="non-number-index"),
    pytest.param(lambda seq: chunk_event(seq, T0, _delta(extra=1)), id="extra-chunk-key"),
    pytest.param(
        lambda seq: chunk_event(seq, T0, {"type": "tool-call-delta", "index": 1, "id": 7, "argumentsDelta": "x"}),
        id="non-string-tool-id",
    ),
    pytest.param(
        lambda seq: chunk_event(
            seq, T0, {"type": "tool-call-delta", "index": 1, "id": "c", "name": None, "argumentsDelta": "x"}
        ),
        id="non-string-name",
    ),
    pytest.param(
        lambda seq: chunk_event(seq, T0, {"type": "tool-call-delta", "index": 1, "id": "c", "argumentsDelta": 1}),
        id="non-string-arguments",
    ),
    pytest.param(
        lambda seq: chunk_event(seq, T0, {"type": "image-delta", "index": 1, "data": "x"}), id="unknown-chunk-type"
    ),
    pytest.param(
        lambda seq: Event("assistant/chunks", seq, T0, {"turn": 1, "step": 1, "chunk": _delta()}), id="other-event-type"
    ),
]


@pytest.mark.parametrize("make", OFF_WHITELIST)
def test_off_whitelist_event_stays_verbatim_and_breaks_the_run(make):
    odd = make(3)
    events = [text(k, T0, "a") for k in range(3)] + [odd] + [text(k, T0, "b") for k in range(4, 7)]
    records = pack(events)
    assert kinds(records) == ["text-chunks", odd.type, "text-chunks"]
    assert records[1] is odd


@pytest.mark.parametrize("make", OFF_WHITELIST)
def test_three_off_whitelist_events_never_form_a_row(make):
    events = [make(k) for k in range(3)]
    assert pack(events) == events


def test_delta_dict_in_any_key_order_packs_and_expands_canonically():
    events = [
        Event(
            "assistant/chunk", k, T0, {"step": 1, "turn": 1, "chunk": {"text": "a", "index": 1, "type": "text-delta"}}
        )
        for k in range(3)
    ]
    (row,) = pack(events)
    assert type(row) is TextChunks
    assert [e.data for e in expand_records([row])] == [text(k, T0, "a").data for k in range(3)]


# 6. Time gaps beyond the safe range split runs.


def test_time_gap_beyond_safe_range_splits_the_run_and_round_trips():
    events = [text(0, -MAX_SAFE_INTEGER, "a"), text(1, -MAX_SAFE_INTEGER, "b"), text(2, -MAX_SAFE_INTEGER, "c")]
    events += [
        text(3, MAX_SAFE_INTEGER - 1, "d"),
        text(4, MAX_SAFE_INTEGER - 1, "e"),
        text(5, MAX_SAFE_INTEGER - 1, "f"),
    ]
    records = pack(events)
    assert kinds(records) == ["text-chunks", "text-chunks"]
    assert expand_records(records) == events
    lines = encode_lines(records).splitlines()
    assert expand_records([decode_storage_line(line) for line in lines]) == events


# 7. Negative dt.


def test_negative_dt_round_trips():
    events = [text(0, T0, "a"), text(1, T0 - 5, "b"), text(2, T0 - 5, "c"), text(3, T0 + 100, "d")]
    (row,) = pack(events)
    assert row.data.dt == [-5, 0, 105]
    assert expand_records([decode_storage_line(encode(row))]) == events


# 8. Non-row values pass through.


@pytest.mark.parametrize(
    "value",
    ["junk", None, 7, [1, 2], {"type": "user/message", "data": {}}, {"type": 5}, {"no": "type"}],
    ids=["string", "null", "number", "array", "event-dict", "non-string-type", "untyped-object"],
)
def test_decode_storage_record_passes_non_rows_through(value):
    assert decode_storage_record(value) == [value]


def test_decode_storage_record_passes_an_event_struct_through():
    event = plain(0)
    assert decode_storage_record(event) == [event]


def test_decode_storage_record_expands_row_structs_and_row_dicts():
    events = [text(k, T0 + k, "t") for k in range(4)]
    (row,) = pack(events)
    assert decode_storage_record(row) == events
    from codec import decode_json

    assert decode_storage_record(decode_json(encode(row))) == events


# 9. Decoder rejections.

GOOD_TEXT_ROW: dict[str, Any] = {
    "type": "text-chunks",
    "seq0": 4,
    "time0": T0,
    "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]},
}
GOOD_TOOL_ROW: dict[str, Any] = {
    "type": "tool-call-chunks",
    "seq0": 4,
    "time0": T0,
    "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "id": "c1", "name": "bash", "args": ["a", "b", "c"]},
}


def _mutate(base: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {**base, "data": dict(base["data"])}
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


REJECTIONS: list[Any] = [
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data",), [1, 2]), id="data-not-object"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("extra",), 1), id="extra-envelope-key"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("seq",), 4), id="seq-instead-of-seq0"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("seq0",), -1), id="negative-seq0"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("seq0",), 2**53), id="unsafe-seq0"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("time0",), math.inf), id="infinite-time0"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("time0",), math.nan), id="nan-time0"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("time0",), 1.5), id="fractional-time0"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("time0",), 2**53), id="unsafe-time0"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("seq0",), KeyError), id="missing-seq0"),
    pytest.param(
        {**GOOD_TEXT_ROW, "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "args": ["a", "b", "c"]}},
        id="args-in-text-row",
    ),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "texts"), ["a", 1, "c"]), id="non-string-member"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "texts"), []), id="empty-members"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "texts"), "abc"), id="members-not-a-list"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "dt"), [1]), id="dt-too-short"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "dt"), [1, 1, 1]), id="dt-too-long"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "dt"), [1, math.nan]), id="nan-dt"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "dt"), [1, 0.5]), id="fractional-dt"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "dt"), [1, 2**53]), id="unsafe-dt"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "turn"), "1"), id="non-number-turn"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "index"), None), id="null-index"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("data", "extra"), 1), id="extra-data-key"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("seq0",), MAX_SAFE_INTEGER), id="member-seq-overflow"),
    pytest.param(_mutate(GOOD_TEXT_ROW, ("time0",), MAX_SAFE_INTEGER - 1), id="member-time-overflow"),
    pytest.param(
        {**GOOD_TEXT_ROW, "time0": -MAX_SAFE_INTEGER, "data": {**GOOD_TEXT_ROW["data"], "dt": [-1, 5]}},
        id="member-time-underflow",
    ),
    pytest.param(_mutate(GOOD_TOOL_ROW, ("data", "id"), KeyError), id="tool-row-without-id"),
    pytest.param(_mutate(GOOD_TOOL_ROW, ("data", "id"), 1), id="tool-row-non-string-id"),
    pytest.param(_mutate(GOOD_TOOL_ROW, ("data", "name"), 1), id="tool-row-non-string-name"),
    pytest.param(_mutate(GOOD_TOOL_ROW, ("data", "name"), None), id="tool-row-null-name"),
    pytest.param({**GOOD_TOOL_ROW, "data": {**GOOD_TEXT_ROW["data"]}}, id="texts-in-tool-row"),
]


@pytest.mark.parametrize("value", REJECTIONS)
def test_decoder_rejects_malformed_rows(value):
    with pytest.raises(RowFormatError, match=rf"malformed {value['type']} row: "):
        decode_storage_record(value)


@pytest.mark.parametrize("value", [v for v in REJECTIONS if v.id not in {"nan-time0", "infinite-time0", "nan-dt"}])
def test_line_decoder_rejects_malformed_rows(value):
    with pytest.raises(RowFormatError, match=rf"malformed {value['type']} row: "):
        decode_storage_line(encode(value))


@pytest.mark.parametrize(
    "line", [b'{"type":"text-chunks","seq0":0,"time0":NaN}', b'{"type":"text-chunks","seq0":0,"time0":1e400}']
)
def test_line_decoder_rejects_non_finite_numbers(line):
    from codec import CodecError

    with pytest.raises(CodecError):
        decode_storage_line(line)


def test_good_rows_decode():
    assert len(decode_storage_record(GOOD_TEXT_ROW)) == 3
    assert [e.data.chunk.name for e in decode_storage_record(GOOD_TOOL_ROW)] == ["bash"] * 3


def test_member_seq_at_the_safe_limit_is_accepted():
    row = _mutate(GOOD_TEXT_ROW, ("seq0",), MAX_SAFE_INTEGER - 2)
    assert decode_storage_record(row)[-1].seq == MAX_SAFE_INTEGER


def test_single_member_row_decodes():
    row = {**GOOD_TEXT_ROW, "data": {**GOOD_TEXT_ROW["data"], "dt": [], "texts": ["solo"]}}
    assert [e.seq for e in decode_storage_record(row)] == [4]


# Helpers: member count and seq range.


def test_member_count_and_record_range():
    events = [tool(7 + k, T0, "a") for k in range(5)]
    (row,) = pack(events)
    assert isinstance(row, ToolCallChunks) and member_count(row) == 5
    assert record_range(row) == (7, 11)
    assert record_range(plain(3)) == (3, 3)


def test_max_members_caps_rows_and_leaves_short_remainders_verbatim():
    events = [text(k, T0 + k, "x") for k in range(10)]
    records = pack(events, max_members=4)
    assert kinds(records) == ["text-chunks", "text-chunks", "assistant/chunk", "assistant/chunk"]
    assert [member_count(r) for r in records[:2] if not isinstance(r, Event)] == [4, 4]
    assert expand_records(records) == events


def test_max_members_below_min_run_is_refused():
    with pytest.raises(ValueError, match="at least 3"):
        pack([], max_members=2)


# 10. Properties over random batches.


def test_batches_strategy_produces_rows_of_every_kind():
    from hypothesis import Phase, find

    # Any batch that has the kind proves the strategy reaches it; shrinking one to the smallest
    # would only cost time (most of this test's, under `find`'s default phases).
    for tag in ("text-chunks", "reasoning-chunks", "tool-call-chunks"):

        def has_tag(events: list[Event], tag: str = tag) -> bool:
            return tag in kinds(pack(events))

        found = find(batches(), has_tag, settings=settings(database=None, phases=[Phase.generate]))
        assert has_tag(found)


@settings(max_examples=300, deadline=None)
@given(batches())
def test_expand_of_pack_is_identity(events):
    assert expand_records(pack(events)) == events


@settings(max_examples=300, deadline=None)
@given(batches())
def test_pack_is_idempotent_through_expand(events):
    packed = pack(events)
    assert pack(expand_records(packed)) == packed


@settings(max_examples=300, deadline=None)
@given(batches(), st.one_of(st.none(), st.integers(min_value=3, max_value=6)))
def test_json_round_trip_is_value_exact(events, max_members):
    lines = encode_lines(pack(events, max_members=max_members)).splitlines()
    decoded = expand_records([decode_storage_line(line) for line in lines])
    assert encode(decoded) == encode(events)
    assert decoded == events


@settings(max_examples=200, deadline=None)
@given(batches())
def test_delta_member_and_continues_run_agree_with_pack(events):
    """A reference packer built from the two halves of the rule gives pack's runs."""
    runs: list[list[Event]] = []
    previous = None
    for event in events:
        member = delta_member(event)
        if member is None:
            runs.append([event])
            previous = None
            continue
        if previous is not None and continues_run(
            block_of(previous[0]), previous[1].seq, previous[1].time, block_of(member), event.seq, event.time
        ):
            runs[-1].append(event)
        else:
            runs.append([event])
        previous = (member, event)
    expected = [size for run in runs for size in ([1] * len(run) if len(run) < 3 else [len(run)])]
    assert [1 if isinstance(r, Event) else member_count(r) for r in pack(events)] == expected

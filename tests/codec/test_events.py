"""The logical event model: envelope rules, canonical delta data, the header."""

from __future__ import annotations

import pytest
from msgspec import UNSET

from codec import (
    MAX_SAFE_INTEGER,
    DeltaData,
    Event,
    EventValidationError,
    ReplaceOp,
    SessionIdError,
    TextDelta,
    ToolCallDelta,
    check_session_id,
    decode_event,
    decode_header,
    encode,
)
from codec.event_json import decode_events
from codec.events import MAX_DEPTH, as_delta_data, canonical_event, check_depth


def test_minimal_event_round_trips_byte_exact():
    line = b'{"type":"turn/start","seq":0,"time":1700000000000,"data":{"turn":1}}'
    event = decode_event(line)
    assert event == Event("turn/start", 0, 1_700_000_000_000, {"turn": 1})
    assert encode(event) == line


def test_all_optional_keys_round_trip_in_canonical_order():
    line = (
        b'{"type":"user/message","seq":9,"time":-5,"data":null,"ignorable":true,"sourceEventSeqs":[3,1,2],'
        b'"surfaceOp":{"op":"replace","start":1,"end":4},"conversationOp":{"op":"replace","start":2,"end":2}}'
    )
    event = decode_event(line)
    assert event.sourceEventSeqs == (3, 1, 2)
    assert event.surfaceOp == ReplaceOp("replace", 1, 4)
    assert encode(event) == line


def test_data_keeps_ints_floats_big_ints_and_key_order():
    line = (
        b'{"type":"x/y","seq":1,"time":2,'
        b'"data":{"b":1,"a":1.0,"big":123456789012345678901234567890,"n":[1.5e300,-0.0]}}'
    )
    event = decode_event(line)
    assert list(event.data) == ["b", "a", "big", "n"]
    assert type(event.data["b"]) is int and type(event.data["a"]) is float
    assert encode(event) == line


def test_delta_chunk_data_decodes_to_canonical_struct():
    line = (
        b'{"type":"assistant/chunk","seq":1,"time":2,'
        b'"data":{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"hi"}}}'
    )
    event = decode_event(line)
    assert event.data == DeltaData(1, 2, TextDelta(0, "hi"))
    assert encode(event) == line


def test_delta_chunk_data_in_another_key_order_stays_a_dict():
    line = (
        b'{"type":"assistant/chunk","seq":1,"time":2,'
        b'"data":{"step":2,"turn":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}}'
    )
    event = decode_event(line)
    assert type(event.data) is dict
    assert encode(event) == line


def test_tool_call_name_presence_is_kept():
    with_name = {
        "turn": 1,
        "step": 1,
        "chunk": {"type": "tool-call-delta", "index": 0, "id": "c", "name": "n", "argumentsDelta": ""},
    }
    without = {"turn": 1, "step": 1, "chunk": {"type": "tool-call-delta", "index": 0, "id": "c", "argumentsDelta": ""}}
    assert as_delta_data(with_name) == DeltaData(1, 1, ToolCallDelta(index=0, id="c", name="n", argumentsDelta=""))
    assert as_delta_data(without).chunk.name is UNSET  # type: ignore[union-attr]


def test_canonical_event_leaves_other_events_alone():
    event = Event("tool/call", 1, 2, {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}})
    assert canonical_event(event) is event


BAD_EVENTS = [
    pytest.param(
        b'{"type":"x","seq":0,"time":0}', "events[0]: object missing required field `data`", id="missing-data"
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":0,"data":1,"extra":1}',
        "events[0]: object contains unknown field `extra`",
        id="extra-key",
    ),
    pytest.param(b'{"type":"x","seq":-1,"time":0,"data":1}', "events[0].seq: expected `int` >= 0", id="negative-seq"),
    pytest.param(
        b'{"type":"x","seq":9007199254740992,"time":0,"data":1}',
        "events[0].seq: expected `int` <= 9007199254740991",
        id="unsafe-seq",
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":-9007199254740992,"data":1}',
        "events[0].time: expected `int` >= -9007199254740991",
        id="unsafe-time",
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":1.5,"data":1}', "events[0].time: expected `int`, got `float`", id="float-time"
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":0,"data":1,"ignorable":false}',
        "events[0].ignorable: invalid enum value False",
        id="ignorable-false",
    ),
    pytest.param(
        b'{"type":"","seq":0,"time":0,"data":1}', "events[0].type: expected `str` of length >= 1", id="empty-type"
    ),
    pytest.param(
        b'{"type":"' + b"t" * 129 + b'","seq":0,"time":0,"data":1}',
        "events[0].type: expected `str` of length <= 128",
        id="long-type",
    ),
    pytest.param(
        b'{"type":"text-chunks","seq":0,"time":0,"data":1}',
        "events[0].type: 'text-chunks' is reserved",
        id="reserved-row-tag",
    ),
    pytest.param(
        b'{"type":"session","seq":0,"time":0,"data":1}', "events[0].type: 'session' is reserved", id="reserved-session"
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":0,"data":1,"surfaceOp":"prepend"}',
        'events[0].surfaceOp: expected "append" or {op,start,end}',
        id="surface-op-string",
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":0,"data":1,"surfaceOp":{"op":"replace","start":1}}',
        'events[0].surfaceOp: expected "append" or {op,start,end}',
        id="surface-op-missing-end",
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":0,"data":1,"surfaceOp":{"op":"replace","start":3,"end":1}}',
        "events[0].surfaceOp: expected",
        id="surface-op-inverted",
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":0,"data":1,"conversationOp":"append"}',
        'events[0].conversationOp: expected {op:"replace",start,end}',
        id="conversation-op-append",
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":0,"data":1,"conversationOp":{"op":"replace","start":0,"end":1,"x":1}}',
        "events[0].conversationOp: expected",
        id="conversation-op-extra",
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":0,"data":1,"sourceEventSeqs":[1,-2]}',
        "events[0].sourceEventSeqs[1]: expected `int` >= 0",
        id="negative-source",
    ),
    pytest.param(
        b'{"type":"x","seq":0,"time":0,"data":1,"sourceEventSeqs":[0.5]}',
        "events[0].sourceEventSeqs[0]: expected `int`, got `float`",
        id="fractional-source",
    ),
    pytest.param(b'{"type":"x","seq":0,"time":0,"data":1e400}', "events[0].data: number out of range", id="huge-float"),
]


@pytest.mark.parametrize(("body", "message"), BAD_EVENTS)
def test_bad_events_raise_with_where_and_why(body, message):
    with pytest.raises(EventValidationError) as caught:
        decode_events(b"[" + body + b"]")
    assert str(caught.value).startswith(message), str(caught.value)


def test_error_names_the_failing_index():
    good = b'{"type":"x","seq":0,"time":0,"data":1}'
    bad = b'{"type":"x","seq":1,"time":0,"data":1,"surfaceOp":3}'
    with pytest.raises(EventValidationError, match=r"^events\[3\]\.surfaceOp: "):
        decode_events(b"[" + b",".join([good, good, good, bad]) + b"]")


def test_header_round_trips_and_rejects_unknown_fields():
    line = (
        b'{"type":"session","version":0,"id":"s1","createdAt":1,"cwd":"/w","parentSession":"p",'
        b'"origin":"subagent","delegationDepth":1,"meta":{"k":"v"}}'
    )
    assert encode(decode_header(line)) == line
    with pytest.raises(EventValidationError, match="header: object contains unknown field `owner`"):
        decode_header(b'{"type":"session","version":0,"id":"s1","createdAt":1,"owner":"x"}')
    with pytest.raises(EventValidationError, match=r"header\.version"):
        decode_header(b'{"type":"session","version":1,"id":"s1","createdAt":1}')
    with pytest.raises(EventValidationError, match=r"header\.id"):
        decode_header(b'{"type":"session","version":0,"id":"","createdAt":1}')


def test_safe_integer_limits_are_inclusive():
    line = b'{"type":"x","seq":9007199254740991,"time":-9007199254740991,"data":1}'
    event = decode_event(line)
    assert event.seq == MAX_SAFE_INTEGER and event.time == -MAX_SAFE_INTEGER


@pytest.mark.parametrize(
    "session_id",
    [
        "s",
        "demo",
        "01aa6a36-e9c2-42ba-934b-30bec80a1658",
        "{{sessionId}}",
        "multi-turn-0.child-1.grandchild",
        "user@host:42~v1_x",
        "x" * 200,
        ".:@" * 66 + ".:",
        "...",
        ".hidden",
    ],
)
def test_session_ids_that_follow_the_rule(session_id):
    assert check_session_id(session_id) == session_id


@pytest.mark.parametrize(
    "session_id",
    ["", ".", "..", "a/b", "../escape", "a b", "é", "a\\b", "a%2Fb", "a?b", "a#b", "x" * 201, "\x00", "tab\t"],
)
def test_session_ids_that_break_the_rule(session_id):
    with pytest.raises(SessionIdError, match="is not a session id"):
        check_session_id(session_id, where="id")


def nested(depth: int, leaf: object = 0) -> object:
    value: object = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_data_nests_at_most_max_depth_levels():
    check_depth(nested(MAX_DEPTH), where="data")
    check_depth({"a": [1, 2, {"b": "c"}], "d": nested(MAX_DEPTH - 1)}, where="data")
    with pytest.raises(EventValidationError, match="data: nests deeper than 64 levels"):
        check_depth(nested(MAX_DEPTH + 1), where="data")


def test_the_depth_check_cannot_run_out_of_stack():
    with pytest.raises(EventValidationError):
        check_depth(nested(200_000), where="data")


def test_decoded_events_and_headers_obey_the_depth_limit():
    event = {"type": "x", "seq": 0, "time": 0}
    decode_event(encode({**event, "data": nested(MAX_DEPTH)}))
    with pytest.raises(EventValidationError, match="event.data: nests deeper"):
        decode_event(encode({**event, "data": nested(MAX_DEPTH + 1)}))
    with pytest.raises(EventValidationError, match="header.meta: nests deeper"):
        decode_header(encode({"id": "h", "createdAt": 0, "meta": {"k": nested(MAX_DEPTH)}}))

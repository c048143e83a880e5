"""Reading deepseek-harness logs, including every log of the real corpus (through HISTORY_CORPUS_DIR)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given, reject, settings, strategies as st

from codec import (
    CodecError,
    Event,
    RecordFormatError,
    RowFormatError,
    SessionHeader,
    decode_json,
    encode,
    expand_records,
    pack,
    read_session_log,
    record_from_value,
)
from testing.corpus import corpus_logs
from testing.strategies import sessions

HEADER = b'{"type":"session","version":0,"id":"s1","createdAt":5,"cwd":"{{cwd}}","delegationDepth":0}\n'


def test_reader_rebuilds_omitted_seq_and_derives_omitted_times_from_created_at():
    body = HEADER + (
        b'{"type":"turn/start","data":{"turn":1}}\n'
        b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[4,-1],"texts":["a","b","c"]}}\n'
        b'{"type":"turn/end","data":{"turn":1},"ignorable":true}\n'
    )
    log = read_session_log(body)
    assert log.header.id == "s1" and log.header.cwd == "{{cwd}}"
    assert [(e.seq, e.time) for e in log.events] == [(0, 5), (1, 5), (2, 9), (3, 8), (4, 8)]
    assert log.events[4].ignorable is True


def test_a_missing_time_is_the_last_stated_one_before_it_and_a_stated_zero_is_kept():
    body = HEADER + (
        b'{"type":"a","data":1}\n{"type":"b","time":70,"data":2}\n{"type":"c","data":3}\n'
        b'{"type":"d","time":0,"data":4}\n{"type":"e","data":5}\n{"type":"f","time":-3,"data":6}\n'
        b'{"type":"g","data":7}\n'
    )
    assert [e.time for e in read_session_log(body).events] == [5, 70, 70, 0, 70, -3, -3]


def test_a_log_with_no_created_at_keeps_zero_until_it_states_a_time():
    body = HEADER.replace(b'"createdAt":5', b'"createdAt":0') + (
        b'{"type":"a","data":1}\n{"type":"b","time":70,"data":2}\n{"type":"c","data":3}\n'
    )
    assert [e.time for e in read_session_log(body).events] == [0, 70, 70]


def test_record_from_value_keeps_the_harness_rule_a_missing_time_is_zero():
    assert record_from_value({"type": "a", "data": 1}, 4) == Event("a", 4, 0, 1)


def test_reader_keeps_present_seq_and_time():
    body = HEADER + b'{"type":"a","seq":0,"time":77,"data":1}\n{"type":"b","seq":1,"time":-3,"data":2}'
    assert [(e.seq, e.time) for e in read_session_log(body).events] == [(0, 77), (1, -3)]


def test_reader_refuses_a_seq_that_does_not_continue():
    body = HEADER + b'{"type":"a","seq":0,"time":0,"data":1}\n{"type":"b","seq":5,"time":0,"data":2}\n'
    with pytest.raises(RecordFormatError, match="line 3: seq 5 does not continue the log, expected 1"):
        read_session_log(body)


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (b"", RecordFormatError, "line 1: empty log"),
        (b'{"type":"session","version":0}\n', CodecError, "line 1 header: object missing required field `id`"),
        (b"[1]\n", RecordFormatError, "line 1: expected a JSON object"),
        (HEADER + b"{oops\n", RecordFormatError, "line 2: invalid JSON"),
        (HEADER + b'{"type":"x","data":1,"bad":1}\n', CodecError, r"line 2: object contains unknown field `bad`"),
        (
            HEADER + b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a","b"]}}\n',
            RowFormatError,
            "line 2: malformed text-chunks row: dt has 0 entries",
        ),
    ],
    ids=["empty", "header-missing-id", "header-not-object", "bad-json", "bad-event", "bad-row"],
)
def test_reader_errors_name_the_line(body, error, message):
    with pytest.raises(error, match=message):
        read_session_log(body)


def _without_position(record: object) -> bytes:
    value = decode_json(encode(record))
    for key in ("seq", "time", "seq0", "time0"):
        value.pop(key, None)
    return encode(value)


@pytest.mark.parametrize("path", corpus_logs())
def test_corpus_log_imports_and_repacks_line_for_line(path: Path) -> None:
    data = path.read_bytes()
    log = read_session_log(data)
    assert [event.seq for event in log.events] == list(range(len(log.events)))
    lines = data.split(b"\n")[1:]
    if lines and lines[-1] == b"":
        lines.pop()
    assert [_without_position(record) for record in pack(log.events)] == lines


@pytest.mark.parametrize("path", corpus_logs())
def test_corpus_log_expands_and_repacks_exactly(path: Path) -> None:
    events = read_session_log(path.read_bytes()).events
    packed = pack(events)
    assert expand_records(packed) == events
    assert pack(expand_records(packed)) == packed
    assert all(type(event) is Event for event in events)


@pytest.mark.parametrize("path", corpus_logs())
def test_corpus_child_logs_name_a_parent(path: Path) -> None:
    header = read_session_log(path.read_bytes()).header
    if path.name != "session.jsonl":
        assert isinstance(header.parentSession, str)


@settings(max_examples=50, deadline=None)
@given(sessions(), st.data())
def test_derived_times_are_the_last_stated_time_and_a_read_log_reads_back_the_same(events, data):
    created = data.draw(st.sampled_from([0, 5, 1_700_000_000_000]))
    records = pack(events)
    dropped = [data.draw(st.booleans()) for _ in records]
    lines = [encode(SessionHeader(id="s1", createdAt=created))]
    for record, drop in zip(records, dropped, strict=True):
        value = decode_json(encode(record))
        if drop:
            value.pop("time" if type(record) is Event else "time0")
        lines.append(encode(value))
    try:
        log = read_session_log(b"\n".join(lines))
    except RowFormatError as exc:
        # A row whose dt spans ~2^53 ms from a derived time0: refused, as any row out of range is.
        assert "exceeds 2^53-1" in str(exc)
        reject()
    known, expected = created, list[int]()
    for record, drop in zip(records, dropped, strict=True):
        start = known if drop else expand_records([record])[0].time
        members = expand_records([record])
        expected.extend(t - members[0].time + start for t in (e.time for e in members))
        known = expected[-1] if expected[-1] != 0 else known
    assert [e.time for e in log.events] == expected
    assert [msgspec.structs.replace(e, time=0) for e in log.events] == [
        msgspec.structs.replace(e, time=0) for e in events
    ]
    assert read_session_log(b"\n".join([lines[0], *map(encode, pack(log.events))])) == log

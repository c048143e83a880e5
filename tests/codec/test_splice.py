"""Server splicing: page records from stored records, sealing joins and event lines (docs/protocol.md §4, §7.4).

Each property compares with encoding what `pack` and `pack_page` build from the same events.
"""

from __future__ import annotations

import bisect

from hypothesis import given, settings, strategies as st

from codec import (
    Event,
    Page,
    PageRecord,
    SessionHeader,
    decode_follow_snapshot,
    encode,
    event_lines,
    event_records,
    join,
    pack,
    pack_page,
    page_body,
    page_size,
    raw_records,
    runs,
    snapshot_body,
    splice,
    stored_batch,
    stored_record,
)
from testing.events import plain, text, tool
from testing.strategies import layouts, sessions, stored_in


@settings(max_examples=200, deadline=None)
@given(sessions(), st.data())
def test_joining_every_run_gives_what_pack_gives(events: list[Event], data: st.DataObject) -> None:
    stored = stored_in(events, data.draw(layouts(len(events))))
    sealed = [record for run in runs(stored) for record in join(run)]
    assert sealed == [stored_record(record) for record in pack(events)]


@settings(max_examples=200, deadline=None)
@given(sessions(), st.data())
def test_event_lines_are_the_canonical_events(events: list[Event], data: st.DataObject) -> None:
    stored = stored_in(events, data.draw(layouts(len(events))))
    lo = data.draw(st.integers(0, len(events)))
    hi = data.draw(st.integers(lo, len(events)))
    lines = [(seq + i, line) for seq, group in event_lines(stored, lo, hi) for i, line in enumerate(group)]
    assert lines == [(event.seq, encode(event)) for event in events[lo:hi]]
    wrapped = [line for _, group in event_lines(stored, lo, hi, opening=b"<%", closing=b"%>") for line in group]
    assert wrapped == [b"<%" + encode(event) + b"%>" for event in events[lo:hi]]


@settings(max_examples=200, deadline=None)
@given(sessions(), st.data())
def test_event_records_are_what_each_event_stores_alone(events: list[Event], data: st.DataObject) -> None:
    """However the events were stored, each comes back as the record it would store alone; spliced, the page."""
    stored = stored_in(events, data.draw(layouts(len(events))))
    if data.draw(st.booleans()):
        stored = [record for run in runs(stored) for record in join(run)]  # as a store seals them
    lo = data.draw(st.integers(0, len(events)))
    hi = data.draw(st.integers(lo, len(events)))
    singles = event_records(stored, lo, hi)
    assert singles == [stored_record(event) for event in events[lo:hi]]
    assert b",".join(splice(singles, lo, hi)) == encode(pack_page(events[lo:hi]))[1:-1]


def test_a_percent_sign_in_a_tool_id_survives_the_line_template() -> None:
    events = [tool(i, i, "%d%b", call_id="id%s", name="n%%") for i in range(4)]
    stored = stored_batch(events)
    assert [line for _, group in event_lines(stored, 0, 4) for line in group] == [encode(e) for e in events]


@settings(max_examples=150, deadline=None)
@given(sessions(), st.data())
def test_splice_of_stored_records_is_pack_page_for_every_interval(events: list[Event], data: st.DataObject) -> None:
    """splice(stored) == encode(pack_page(events)), for random sessions, random batch layouts and every interval."""
    stored = stored_in(events, data.draw(layouts(len(events))))
    if data.draw(st.booleans()):
        stored = [record for run in runs(stored) for record in join(run)]
    n = len(events)
    for lo in range(n + 1):
        for hi in range(lo, n + 1):
            records = splice(stored, lo, hi)
            assert page_body(records, 0, lo, hi) == encode(Page(pack_page(events[lo:hi]), lo > 0, lo, hi)), (lo, hi)


@settings(max_examples=100, deadline=None)
@given(sessions(), st.data())
def test_every_suffix_of_spliced_records_is_the_later_page(events: list[Event], data: st.DataObject) -> None:
    stored = stored_in(events, data.draw(layouts(len(events))))
    n = len(events)
    raw = data.draw(st.booleans())
    build = raw_records if raw else splice
    records = build(stored, 0, n)
    for first, start in enumerate(records.starts):
        expected = encode(Page(_records(events[start:], raw), start > 0, start, n))
        assert page_body(records, first, start, n) == expected
        assert page_size(records, first, start, n) == len(expected)
    # A start inside a record: that record again from the start, then the rest as they are.
    for cut in range(n):
        i = bisect.bisect_left(records.starts, cut)
        if i < len(records.starts) and records.starts[i] == cut:
            continue
        end = records.starts[i] if i < len(records.starts) else n
        joined = build(stored, cut, end).followed_by(records, i)
        expected = encode(Page(_records(events[cut:], raw), cut > 0, cut, n))
        assert page_body(joined, 0, cut, n) == expected
        assert page_size(joined, 0, cut, n) == len(expected)
        assert list(joined) == [encode(record) for record in _records(events[cut:], raw)]


def _records(events: list[Event], raw: bool) -> list[PageRecord]:
    return [PageRecord(event=event) for event in events] if raw else pack_page(events)


def test_raw_records_are_one_event_record_per_logical_event() -> None:
    events = [text(i, i, "t") for i in range(5)] + [plain(5)]
    records = raw_records(stored_batch(events), 1, 6)
    assert list(records) == [b'{"event":' + encode(event) + b"}" for event in events[1:]]
    assert records.starts == [1, 2, 3, 4, 5]


def test_a_snapshot_is_the_page_after_the_header_and_the_cursor() -> None:
    header = SessionHeader(id="s", createdAt=1)
    page = page_body(splice(stored_batch([plain(0)]), 0, 1), 0, 0, 1)
    snapshot = decode_follow_snapshot(snapshot_body(header, 0, page))
    assert snapshot.header == header and snapshot.cursor == 0 and (snapshot.fromSeq, snapshot.toSeq) == (0, 1)

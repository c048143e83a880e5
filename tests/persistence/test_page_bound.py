"""`persistence.page_bound`: a read bounded by the byte target picks the very page an unbounded one does."""

from __future__ import annotations

import anyio
from hypothesis import given, settings, strategies as st

from codec import Event, SessionHeader, StoredRecord
from history_service.pages import choose_body
from persistence import MemoryStore
from persistence.message_index import MessageIndex, index_entries
from persistence.page_bound import bounded_cuts, floor_sizes, within
from testing.events import plain, text
from testing.strategies import layouts, stored_in


@st.composite
def conversations(draw: st.DrawFn) -> list[Event]:
    """Messages of every size: a user message, text deltas, a tool result, an assistant message citing its deltas."""
    events: list[Event] = []
    for _ in range(draw(st.integers(1, 8))):
        seq = len(events)
        events.append(plain(seq, "user/message", {"text": "q" * draw(st.integers(0, 300))}, surfaceOp="append"))
        deltas = draw(st.integers(0, 12))
        first = len(events)
        for k in range(deltas):
            events.append(text(len(events), 2000 + len(events), "t" * draw(st.integers(0, 40)), step=k // 5))
        if draw(st.booleans()):
            events.append(plain(len(events), "tool/result", {"output": "o" * draw(st.integers(0, 500))}))
        if deltas and draw(st.booleans()):
            sources = list(range(first, first + deltas))
            events.append(
                plain(len(events), "assistant/message", {"text": "a"}, surfaceOp="append", sourceEventSeqs=sources)
            )
    return events


def cuts_of(events: list[Event], to_seq: int, max_messages: int) -> list[int]:
    index = MessageIndex()
    index.add(*index_entries(events))
    return index.cuts(to_seq, max_messages)


def covering(stored: list[StoredRecord], from_seq: int, to_seq: int) -> list[StoredRecord]:
    return [record for record in stored if record.end > from_seq and record.seq < to_seq]


def same_page(stored: list[StoredRecord], cuts: list[int], to_seq: int, max_bytes: int, raw: bool) -> None:
    records = covering(stored, cuts[-1], to_seq)
    kept = bounded_cuts(cuts, to_seq, records, floor_sizes(records, [len(r.line) for r in records]), max_bytes)
    assert kept == cuts[: len(kept)] and kept
    expected = choose_body(records, cuts, to_seq, max_bytes, raw)
    bounded = choose_body(covering(stored, kept[-1], to_seq), kept, to_seq, max_bytes, raw)
    assert bounded[1] == expected[1]
    assert bounded[0].join() == expected[0].join()


@settings(max_examples=300, deadline=None)
@given(st.data(), conversations(), st.booleans())
def test_the_bounded_cuts_choose_the_same_page_unsealed(data: st.DataObject, events: list[Event], raw: bool) -> None:
    stored = stored_in(events, data.draw(layouts(len(events))))
    to_seq = data.draw(st.integers(1, len(events)))
    cuts = cuts_of(events, to_seq, data.draw(st.integers(1, 12)))
    same_page(stored, cuts, to_seq, data.draw(st.integers(0, 6000)), raw)


@settings(max_examples=150, deadline=None)
@given(st.data(), conversations(), st.booleans())
def test_the_bounded_cuts_choose_the_same_page_as_a_store_seals(
    data: st.DataObject, events: list[Event], raw: bool
) -> None:
    sizes = data.draw(layouts(len(events)))

    async def stored() -> list[StoredRecord]:
        store = MemoryStore()
        await store.create_session(SessionHeader(id="s", createdAt=1))
        at = 0
        for size in sizes:
            await store.append("s", events[at : at + size])
            at += size
        return await store.read_stored("s", 0, len(events))

    records = anyio.run(stored)
    to_seq = data.draw(st.integers(1, len(events)))
    cuts = cuts_of(events, to_seq, data.draw(st.integers(1, 12)))
    same_page(records, cuts, to_seq, data.draw(st.integers(0, 6000)), raw)


def test_a_start_that_cannot_fit_ends_the_read() -> None:
    events = []
    for k in range(10):
        events.append(plain(2 * k, "user/message", {"text": "q"}, surfaceOp="append"))
        events.append(plain(2 * k + 1, "tool/result", {"output": "x" * 1000}))
    stored = stored_in(events, [len(events)])
    cuts = cuts_of(events, len(events), 10)
    assert cuts == [18, 16, 14, 12, 10, 8, 6, 4, 2, 0]
    floors = floor_sizes(stored, [len(r.line) for r in stored])
    # Two messages of about 1.1 KB each may fit 2,500 bytes; three cannot, so no older start is read.
    assert bounded_cuts(cuts, len(events), stored, floors, 2500) == [18, 16]
    assert bounded_cuts(cuts, len(events), stored, floors, 1) == [18]
    assert bounded_cuts(cuts, len(events), stored, floors, 10**9) == cuts


def test_run_pieces_count_nothing() -> None:
    events = [plain(0, "user/message", {"text": "q"}, surfaceOp="append")]
    events += [text(k, 2000 + k, "t" * 100) for k in range(1, 40)]
    stored = stored_in(events, [1] + [3] * 13)
    assert len(stored) == 14
    assert floor_sizes(stored, [len(r.line) for r in stored]) == [len(stored[0].line)] + [0] * 13


@settings(max_examples=200, deadline=None)
@given(st.data(), conversations())
def test_records_within_the_target_keep_every_cut_as_the_floors_would(data: st.DataObject, events: list[Event]) -> None:
    stored = stored_in(events, data.draw(layouts(len(events))))
    to_seq = data.draw(st.integers(1, len(events)))
    cuts = cuts_of(events, to_seq, data.draw(st.integers(1, 12)))
    records = covering(stored, cuts[-1], to_seq)
    sizes = [len(r.line) for r in records]
    max_bytes = data.draw(st.integers(0, 2 * sum(sizes)))
    if within(sizes, max_bytes):
        assert bounded_cuts(cuts, to_seq, records, floor_sizes(records, sizes), max_bytes) == cuts

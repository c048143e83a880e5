"""The benchmark fixtures hold exactly the seed's cardinalities and its byte sizes within ±10%.

Runs in ``make test`` (``HISTORY_BENCH_SMOKE=1``): building ``realistic`` at full size takes
seconds, so its cardinalities are pinned exactly, not on a scaled copy.
"""

from __future__ import annotations

import msgspec
import pytest

from bench.fixtures import (
    DSH_LOGICAL_EVENTS,
    DSH_PACKED_RECORDS,
    REALISTIC_COMPLETED_DELTAS,
    REALISTIC_DELTA_RUNS,
    REALISTIC_LOGICAL_EVENTS,
    REALISTIC_ORDINARY_EVENTS,
    REALISTIC_PACKED_RECORDS,
    REALISTIC_PROJECTION_RECORDS,
    REALISTIC_TAIL_DELTAS,
    completed_step_projection,
    dsh_synthetic,
    is_delta,
    long_session,
    realistic,
)
from codec import Event, Page, PageRecord, encode, expand_records, pack, pack_page

SEED_RAW_JSON = 69_433_638
SEED_PACKED_JSON = 6_362_724


@pytest.fixture(scope="module")
def events() -> list[Event]:
    return realistic()


def test_realistic_has_the_seeds_cardinalities(events: list[Event]) -> None:
    assert [event.seq for event in events] == list(range(REALISTIC_LOGICAL_EVENTS))
    assert sum(not is_delta(event) for event in events) == REALISTIC_ORDINARY_EVENTS
    records = pack_page(events)
    rows = [record for record in records if record.chunks is not msgspec.UNSET]
    assert (len(records), len(rows)) == (REALISTIC_PACKED_RECORDS, REALISTIC_DELTA_RUNS)
    kinds = {type(record.chunks).__name__ for record in rows}
    assert kinds == {"TextChunks", "ReasoningChunks", "ToolCallChunks"}
    projection = completed_step_projection(events)
    assert len(projection) == REALISTIC_PROJECTION_RECORDS
    assert len(events) - len(projection) == REALISTIC_COMPLETED_DELTAS
    assert sum(map(is_delta, projection)) == REALISTIC_TAIL_DELTAS
    assert expand_records(pack(events)) == events


def test_realistic_has_completed_steps_then_one_incomplete_tail_step(events: list[Event]) -> None:
    started = [(e.data["turn"], e.data["step"]) for e in events if e.type == "step/start"]
    ended = {(e.data["turn"], e.data["step"]) for e in events if e.type == "step/end"}
    assert len(started) == 29 and set(started[:-1]) == ended and started[-1] not in ended
    tail = started[-1]
    tail_kinds = {type(e.data.chunk).__name__ for e in events if is_delta(e) and (e.data.turn, e.data.step) == tail}
    assert tail_kinds == {"TextDelta", "ReasoningDelta", "ToolCallDelta"}


def test_realistic_bytes_are_within_ten_percent_of_the_seeds(events: list[Event]) -> None:
    raw = len(encode(Page([PageRecord(event=event) for event in events], False, 0, len(events))))
    packed = len(encode(Page(pack_page(events), False, 0, len(events))))
    assert abs(raw / SEED_RAW_JSON - 1) <= 0.10, raw
    assert abs(packed / SEED_PACKED_JSON - 1) <= 0.10, packed


def test_realistic_is_deterministic() -> None:
    assert encode(realistic(scale=50)) == encode(realistic(scale=50))


def test_long_session_repeats_the_structure_ten_times() -> None:
    one = realistic(scale=100)
    long = long_session(scale=100)
    assert len(long) == 10 * len(one)
    assert [event.seq for event in long] == list(range(len(long)))
    assert all(
        b.time > a.time for a, b in zip(long[len(one) - 1 :: len(one)], long[len(one) :: len(one)], strict=False)
    )
    assert len(pack_page(long)) == 10 * len(pack_page(one))


def test_dsh_synthetic_packs_to_696_records() -> None:
    events = dsh_synthetic()
    assert len(events) == DSH_LOGICAL_EVENTS and len(pack_page(events)) == DSH_PACKED_RECORDS

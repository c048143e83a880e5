"""Sealing plans (persistence/sealing.py), run over random sessions and batch layouts without a store."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import given, settings, strategies as st

from codec import Event, StoredRecord, pack, runs, stored_batch, stored_record
from persistence.sealing import MAX_TAIL, SINGLES, kept, next_open_run, open_run, plan_append
from testing.events import plain, text
from testing.strategies import layouts, sessions


def columns(records: list[StoredRecord]) -> list[StoredRecord]:
    """What a store reads to plan: the join columns, no lines."""
    return [record._replace(line=b"") for record in records]


class Loader:
    """A store's ``load``: the lines of the pieces a plan rewrites, and which it asked for."""

    def __init__(self, by_seq: dict[int, StoredRecord]) -> None:
        self.by_seq = by_seq
        self.asked: list[int] = []

    def __call__(self, pieces: Sequence[StoredRecord]) -> list[StoredRecord]:
        self.asked += [piece.seq for piece in pieces]
        return [self.by_seq[piece.seq] for piece in pieces]


def append_all(events: list[Event], sizes: list[int]) -> list[StoredRecord]:
    """A store's records after appending ``events`` in batches of ``sizes``, sealing as a store does."""
    stored: list[StoredRecord] = []
    known: list[StoredRecord] = []
    at = 0
    for size in sizes:
        batch = stored_batch(events[at : at + size])
        at += size
        tail = open_run(stored[-MAX_TAIL:])
        # What a store keeps of the open run between appends (`next_open_run`) is what a scan finds.
        assert known == tail
        start = len(stored) - len(tail)
        by_seq = {record.seq: record for record in stored[start:]}
        loader = Loader(by_seq)
        keep, records = plan_append(columns(tail), batch, loader)
        assert keep == kept(columns(tail), batch)
        assert loader.asked == [record.seq for record in tail[keep:]]
        assert all(record.line for record in records), "a planned record has no line"
        stored[start + keep :] = records
        known = next_open_run(tail[:keep], records)
    assert known == open_run(stored[-MAX_TAIL:])
    return stored


def open_run_forward(trailing: list[StoredRecord]) -> list[StoredRecord]:
    """The open run as the grouping of every record finds it: the last group of `runs`, if of deltas."""
    groups = list(runs(trailing))
    return groups[-1] if groups and groups[-1][0].kind else []


@settings(max_examples=150, deadline=None)
@given(data=st.data(), events=sessions())
def test_the_open_run_walked_back_from_the_end_is_the_last_run_of_deltas(
    data: st.DataObject, events: list[Event]
) -> None:
    unsealed = [stored_record(event) for event in events]
    sealed = append_all(events, data.draw(layouts(len(events))))
    for records in (unsealed, sealed):
        for end in range(len(records) + 1):
            assert open_run(records[:end]) == open_run_forward(records[:end])


@settings(max_examples=150, deadline=None)
@given(data=st.data(), events=sessions())
def test_any_layout_leaves_closed_runs_sealed_and_the_open_run_short(data: st.DataObject, events: list[Event]) -> None:
    sizes = data.draw(layouts(len(events)))
    stored = append_all(events, sizes)
    packed = [stored_record(record) for record in pack(events)]
    groups = list(runs(stored))
    last = groups[-1] if groups and groups[-1][0].kind else []
    # Everything before the open run is exactly what pack builds.
    assert stored[: len(stored) - len(last)] == packed[: len(stored) - len(last)]
    assert_open_run_shape(last)


def assert_open_run_shape(run: Sequence[StoredRecord]) -> None:
    """Rows of strictly falling length, then fewer than `SINGLES` single deltas: what compaction leaves."""
    rows = [record.members for record in run if record.is_row]
    singles = len(run) - len(rows)
    assert all(record.is_row for record in run[: len(rows)]), "a single delta before a row"
    assert all(a > b for a, b in itertools.pairwise(rows)), rows
    assert singles < SINGLES, singles


def test_one_delta_at_a_time_ends_as_pack_builds() -> None:
    events = [plain(0)] + [text(k, k, f"t{k}") for k in range(1, 1025)] + [plain(1025)]
    stored = append_all(events, [1] * len(events))
    assert stored == [stored_record(record) for record in pack(events)]


def test_single_deltas_behind_rows_merge_once_sixteen_gather() -> None:
    # Batches of several deltas make rows; single deltas between them pile up behind the last row.
    sizes = [1, 6, *[1] * (SINGLES - 1), 5, *[1] * (2 * SINGLES), 9, 2, *[1] * (SINGLES + 3), 1]
    events = [plain(0)] + [text(k, k, f"t{k}") for k in range(1, sum(sizes) - 1)] + [plain(sum(sizes) - 1)]
    for end in range(2, len(sizes)):
        stored = append_all(events[: sum(sizes[:end])], sizes[:end])
        assert_open_run_shape(open_run(stored))
    stored = append_all(events, sizes)
    assert stored == [stored_record(record) for record in pack(events)]

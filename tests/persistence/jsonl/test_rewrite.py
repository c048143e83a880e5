"""The open run an append plans from: built from the last few records, it is the one the whole window holds."""

from __future__ import annotations

import pytest

from codec import StoredRecord
from persistence.jsonl.rewrite import FIRST_LOOK, trailing_run
from persistence.sealing import MAX_TAIL, open_run
from testing.rand import Rand


class Listed:
    def __init__(self, records: list[StoredRecord]) -> None:
        self.records = records
        self.built = 0

    def record(self, i: int, line: bytes = b"") -> StoredRecord:
        self.built += 1
        return self.records[i]


def stream(rand: Rand, count: int, *, run_weight: int) -> list[StoredRecord]:
    """Records in seq order: single deltas and rows of two blocks, with others and time gaps among them."""
    records: list[StoredRecord] = []
    seq = time = 0
    for _ in range(count):
        roll = rand.randrange(run_weight + 2)
        kind = 0 if roll == 0 else (1 if roll == 1 else 5)
        members = rand.randrange(4, 9) if kind == 1 else 1
        key = (b"b" if rand.randrange(run_weight + 3) == 0 else b"a") if kind else b""
        time += rand.choice([0, 1, 2, 2**60]) if rand.randrange(20) == 0 else 1
        records.append(StoredRecord(seq, members, b"", kind, key, time, time + members - 1))
        seq += members
        time += members - 1
    return records


@pytest.mark.parametrize("run_weight", [1, 8, 400], ids=["short-runs", "mixed", "long-runs"])
def test_the_trailing_run_is_the_open_run_of_the_whole_window(rand: Rand, run_weight: int) -> None:
    records = stream(rand, 300, run_weight=run_weight)
    longest = 0
    for count in range(len(records) + 1):
        window = records[max(0, count - MAX_TAIL) : count]
        assert trailing_run(Listed(records), count) == open_run(window), (rand, count)
        longest = max(longest, len(open_run(window)))
    # The windows hold runs both within the first look and past it.
    assert longest > FIRST_LOOK or run_weight != 400


def test_a_short_open_run_is_found_from_the_last_few_records() -> None:
    records = [StoredRecord(seq, 1, b"", 0, b"", seq, seq) for seq in range(100)]
    records += [StoredRecord(100 + i, 1, b"", 5, b"a", 100 + i, 100 + i) for i in range(3)]
    listed = Listed(records)
    assert trailing_run(listed, len(records)) == records[-3:]
    assert listed.built < MAX_TAIL

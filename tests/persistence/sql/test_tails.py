"""The open runs the SQL writer keeps (persistence/sql/tails.py): only of the life and head they were written at."""

from __future__ import annotations

from codec import StoredRecord
from persistence.rules import Life
from persistence.sql.tails import Tails


def record(seq: int) -> StoredRecord:
    return StoredRecord(seq, 1, b"line")


def test_an_open_run_is_kept_only_for_its_life_and_head() -> None:
    tails = Tails(4)
    life = Life("i1", "alice")
    tails.remember("s", life, 1, [], [record(0), record(1)])
    assert tails.kept("s", life, 1) is not None
    assert tails.kept("s", life, 0) is None
    assert tails.kept("s", Life("i2", "alice"), 1) is None
    assert tails.kept("s", None, 1) is None
    tails.remember("t", None, 0, [], [record(0)])
    assert tails.kept("t", None, 0) is not None and len(tails) == 2


def test_a_session_or_every_one_is_forgotten() -> None:
    tails = Tails(4)
    for session in "abc":
        tails.remember(session, None, 0, [], [record(0)])
    tails.forget("a")
    assert tails.kept("a", None, 0) is None and len(tails) == 2
    tails.forget(None)
    assert len(tails) == 0
    tails.remember("a", None, 0, [], [record(0)])
    tails.clear()
    assert len(tails) == 0

"""bench.profile: py-spy's raw stacks folded into inclusive and self shares of one thread."""

from __future__ import annotations

from bench.profile import shares

RAW = """thread (1): MainThread;main (app.py:1);handle (app.py:5);parse (codec.py:9) 6
thread (1): MainThread;main (app.py:1);handle (app.py:7) 3
thread (1): MainThread;main (app.py:2) 1
thread (2): history-log-writer;run (logs.py:3) 40
not a sample line
"""


def test_shares_count_each_frame_once_per_sample_whatever_its_line() -> None:
    found = shares(RAW)
    assert found["samples"] == 10
    assert found["inclusive"][:3] == [[1.0, "main (app.py)"], [0.9, "handle (app.py)"], [0.6, "parse (codec.py)"]]
    assert found["self"] == [[0.6, "parse (codec.py)"], [0.3, "handle (app.py)"], [0.1, "main (app.py)"]]


def test_another_thread_or_nothing_gives_its_own_shares() -> None:
    assert shares(RAW, thread="history-log-writer")["inclusive"] == [[1.0, "run (logs.py)"]]
    assert shares("") == {"samples": 0, "inclusive": [], "self": []}

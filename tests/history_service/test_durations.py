"""Durations as an operator writes them: a number and a unit, more than 0 and at most 100 years."""

from __future__ import annotations

import argparse

import pytest

from history_service import durations


def test_durations_take_a_unit_and_are_more_than_zero() -> None:
    assert [durations.duration_ms(text) for text in ("30d", "12h", "15m", "90s", "500ms", " 1d ")] == [
        30 * 86_400_000,
        12 * 3_600_000,
        15 * 60_000,
        90_000,
        500,
        86_400_000,
    ]
    assert durations.duration_ms("36500d") == durations.MOST_MS
    for bad in ("0d", "30", "-1d", "1.5h", "d", "1w", "1 d", "36501d", "999999999999d"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a duration such as 30d"):
            durations.duration_ms(bad)

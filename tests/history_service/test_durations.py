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
    for bad in ("0d", "30", "-1d", "1.5h", "d", "1w", "1 d", "36501d", "999999999999d", "1month"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a duration: a whole number and a unit"):
            durations.duration_ms(bad)


def test_a_refused_duration_names_every_unit_it_takes() -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        durations.duration_ms("1month")
    assert "one of ms (milliseconds), s (seconds), m (minutes), h (hours), d (days)" in str(refused.value)
    assert "a month is 30d" in str(refused.value) and str(refused.value).endswith("not '1month'")

"""The one numeral rule (codec/numerals.py): ASCII digits, at most 16, a sign only where the range has one."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from codec import MAX_SAFE_INTEGER, decimal

SAFE = st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)


@pytest.mark.parametrize(
    ("text", "low", "high", "expected"),
    [
        ("0", 0, 10, 0),
        ("10", 0, 10, 10),
        ("11", 0, 10, None),
        ("-1", -1, 10, -1),
        ("-2", -1, 10, None),
        ("-1", 0, 10, None),
        ("-0", 0, 10, None),
        ("007", 0, 10, 7),
        ("9007199254740991", 0, MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
        ("9007199254740992", 0, MAX_SAFE_INTEGER, None),
        ("00000000000000001", 0, MAX_SAFE_INTEGER, None),
        ("9" * 5000, 0, MAX_SAFE_INTEGER, None),
        ("²", 0, 10, None),
        ("٣", 0, 10, None),
        ("１", 0, 10, None),
        ("+1", 0, 10, None),
        (" 1", 0, 10, None),
        ("1 ", 0, 10, None),
        ("1_0", 0, 100, None),
        ("", 0, 10, None),
        ("-", -1, 10, None),
    ],
    ids=lambda value: repr(value)[:20],
)
def test_a_numeral_is_ascii_digits_bounded_in_length_and_range(
    text: str, low: int, high: int, expected: int | None
) -> None:
    assert decimal(text, low=low, high=high) == expected


def test_without_leading_zeros_only_zero_itself_starts_with_zero() -> None:
    assert decimal("0", low=0, high=10, leading_zeros=False) == 0
    assert decimal("07", low=0, high=10, leading_zeros=False) is None
    assert decimal("7", low=0, high=10, leading_zeros=False) == 7


@given(SAFE, SAFE, SAFE)
def test_every_integer_in_range_reads_back_and_no_other_does(value: int, a: int, b: int) -> None:
    low, high = min(a, b), max(a, b)
    expected = value if low <= value <= high else None
    assert decimal(str(value), low=low, high=high) == expected


@given(st.text(max_size=40))
def test_any_text_reads_as_nothing_or_as_a_safe_integer_in_range(text: str) -> None:
    value = decimal(text, low=-MAX_SAFE_INTEGER, high=MAX_SAFE_INTEGER)
    assert value is None or (text.isascii() and int(text) == value and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER)

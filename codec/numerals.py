"""Decimal numerals in query parameters and headers (docs/protocol.md §4.1, §13): the one rule every reader uses.

A numeral is an optional ``-`` (only where its range has negative values) and 1 to 16
ASCII digits: enough for every safe integer, which every store and JavaScript hold
exactly. Its length is checked before `int` reads it, so no text costs more than 16
digits' work, and a Unicode digit such as ``²``, which `str.isdigit` accepts and `int`
refuses, is not one.
"""

from __future__ import annotations

from typing import Final

from codec.events import MAX_SAFE_INTEGER

__all__ = ["MAX_DIGITS", "decimal"]

MAX_DIGITS: Final = len(str(MAX_SAFE_INTEGER))


def decimal(text: str, *, low: int, high: int, leading_zeros: bool = True) -> int | None:
    """The integer ``text`` writes, if it is a numeral within ``[low, high]``; else ``None``.

    ``low`` and ``high`` are safe integers. Without ``leading_zeros``, a numeral of more
    than one digit may not start with ``0`` (a header the protocol writes so).
    """
    assert -MAX_SAFE_INTEGER <= low <= high <= MAX_SAFE_INTEGER, "a numeral's range is of safe integers"
    digits = text[1:] if text[:1] == "-" and low < 0 else text
    if not 0 < len(digits) <= MAX_DIGITS or not digits.isascii() or not digits.isdigit():
        return None
    if not leading_zeros and digits[0] == "0" and len(digits) > 1:
        return None
    value = int(text)
    return value if low <= value <= high else None

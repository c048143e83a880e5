"""Durations as an operator writes them: ``30d``, ``12h``, ``15m``, ``90s`` or ``500ms``, read into milliseconds.

``HISTORY_RETENTION`` (`history_service.settings`) and ``purge --older-than`` take one.
`MOST_MS` bounds them, and a session's ``ttlMs`` too (`history_service.params`).
"""

from __future__ import annotations

import argparse
import re
from typing import Final

__all__ = ["MOST_MS", "duration_ms"]

# 100 years: a time that far ahead is still a safe integer (2^53 ms is 285,000 years).
MOST_MS: Final = 36_500 * 86_400_000
_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_UNIT_NAMES: Final = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_DURATION: Final = re.compile(rf"([0-9]{{1,12}})({'|'.join(_UNITS)})")


def duration_ms(text: str) -> int:
    """A duration such as ``30d``, ``12h``, ``15m``, ``90s`` or ``500ms``, more than 0 and at most 100 years, in ms.

    Raises `argparse.ArgumentTypeError`, so it is a flag's ``type`` as it is.
    """
    found = _DURATION.fullmatch(text.strip())
    if found is None or not 0 < int(found[1]) * _UNITS[found[2]] <= MOST_MS:
        units = ", ".join(f"{unit} ({name})" for unit, name in _UNIT_NAMES.items())
        raise argparse.ArgumentTypeError(
            f"expected a duration: a whole number and a unit, one of {units}, such as 30d, 12h or 500ms, "
            f"from 1ms to 36500d (a month is 30d, a year 365d); not {text!r}"
        )
    return int(found[1]) * _UNITS[found[2]]

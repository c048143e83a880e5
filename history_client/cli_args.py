"""What both command lines share: argparse validators, and leaving quietly when the reader goes away.

Standard library only, so ``history-service`` can use it in a client-only install too.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Final, TextIO

__all__ = ["MOST_MS", "count", "discard", "duration_ms", "port", "positive", "seconds"]

# 100 years: a time that far ahead is still a safe integer (2^53 ms is 285,000 years).
MOST_MS: Final = 36_500 * 86_400_000
_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION: Final = re.compile(r"([0-9]{1,12})(ms|s|m|h|d)")


def port(text: str) -> int:
    """A TCP port, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: use 1-65535")
    return value


def count(text: str) -> int:
    """A whole number, 0 or more."""
    return _whole(text, 0)


def positive(text: str) -> int:
    """A whole number, 1 or more."""
    return _whole(text, 1)


def seconds(text: str) -> float:
    """A duration in seconds, more than 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds, more than 0, not {text!r}")
    return value


def duration_ms(text: str) -> int:
    """A duration such as ``30d``, ``12h``, ``15m``, ``90s`` or ``500ms``, more than 0 and at most 100 years, in ms."""
    found = _DURATION.fullmatch(text.strip())
    if found is None or not 0 < int(found[1]) * _UNITS[found[2]] <= MOST_MS:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 30d, 12h, 15m, 90s or 500ms, at most 36500d, not {text!r}"
        )
    return int(found[1]) * _UNITS[found[2]]


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a whole number, {least} or more, not {text!r}")
    return value


def discard(out: TextIO) -> None:
    """After a broken pipe: point ``out``'s descriptor at /dev/null, so the flush at exit cannot fail again."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # not a file (a test's StringIO): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)

"""What both command lines share: the argparse types of their flags, and leaving quietly when the reader goes away.

Both command lines read whole numbers from their flags and write to pipes, and the codec
is the one package both may import: what they share is here, beside the other flag types
of the same kind (a port, seconds, a count of workers). Standard library only, like the rest of the codec;
`discard` is its one call that touches a file descriptor, made by a command's ``main``
only, never by the codec itself.
"""

from __future__ import annotations

import argparse
import os
from typing import Literal, TextIO

__all__ = ["count", "discard", "port", "positive", "seconds", "workers_count"]


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


def workers_count(text: str) -> int | Literal["auto"]:
    """A number of server processes: ``auto`` (one per usable core, resolved by ``serve``), or 1 or more."""
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number, 1 or more, or auto, not {text!r}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds, more than 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds, more than 0, not {text!r}")
    return value


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

"""Turn msgspec validation messages into ``where: why`` text rooted at a caller's name."""

from __future__ import annotations

import msgspec

_MARK = " - at `"


def describe(exc: msgspec.ValidationError | msgspec.DecodeError, root: str) -> tuple[str, str]:
    """Split a msgspec error into ``(where, why)``; ``where`` replaces ``$`` with ``root``."""
    message = str(exc)
    head, sep, tail = message.rpartition(_MARK)
    if not sep:
        return root, _lower_first(message)
    return root + tail.rstrip("`")[1:], _lower_first(head)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]

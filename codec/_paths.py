"""How decoders fail: the exceptions a msgspec decode raises, and ``where: why`` text for them."""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = ["DECODE_FAILURES", "describe", "reason"]

# msgspec raises UnicodeDecodeError, not DecodeError, for invalid UTF-8 inside a JSON string,
# and RecursionError for nesting beyond the interpreter's recursion limit.
DECODE_FAILURES: Final = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)
_MARK = " - at `"


def describe(exc: msgspec.ValidationError | msgspec.DecodeError, root: str) -> tuple[str, str]:
    """Split a msgspec error into ``(where, why)``; ``where`` replaces ``$`` with ``root``."""
    message = str(exc)
    head, sep, tail = message.rpartition(_MARK)
    if not sep:
        return root, _lower_first(message)
    return root + tail.rstrip("`")[1:], _lower_first(head)


def reason(exc: BaseException) -> str:
    """Why a decode of JSON text failed, in words."""
    if isinstance(exc, RecursionError):
        return "nesting is too deep"
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {exc.start} of a string"
    return str(exc)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]

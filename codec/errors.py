"""Errors raised by the codec.

Every failure to read bytes, JSON values or Structs as events, rows, records or pages
is a `CodecError`, so callers catch one type at the package boundary::

    CodecError(ValueError)
    ├── EventValidationError     an event or session header breaks docs/protocol.md §2
    │   └── SessionIdError       a session id breaks the id rule
    ├── RowFormatError           a chunk row breaks §3 ("malformed <tag> row: <why>")
    ├── RecordFormatError        a storage line, a page record or page body has the wrong shape
    │   └── InvalidJsonError     bytes that are not JSON (syntax, invalid UTF-8, nesting)
    └── BatchTooLargeError       an append body that stands for too many logical events
"""

from __future__ import annotations

__all__ = [
    "BatchTooLargeError",
    "CodecError",
    "EventValidationError",
    "InvalidJsonError",
    "RecordFormatError",
    "RowFormatError",
    "SessionIdError",
]


class CodecError(ValueError):
    """Base class for every codec failure."""


class EventValidationError(CodecError):
    """Raised when an event or header breaks the envelope rules; the message says where and why."""


class SessionIdError(EventValidationError):
    """Raised when a session id breaks the id rule (see `codec.events.check_session_id`)."""


class RowFormatError(CodecError):
    """Raised when a value tagged as a chunk row is not a valid row."""


class RecordFormatError(CodecError):
    """Raised when a storage line, page record or page body is malformed (non-JSON, wrong shape)."""


class InvalidJsonError(RecordFormatError):
    """Raised when bytes are not JSON at all: bad syntax, invalid UTF-8 in a string, or nesting too deep to decode."""


class BatchTooLargeError(CodecError):
    """Raised when an append body stands for more logical events than allowed, before any item is decoded."""

"""Errors raised by the codec.

Every failure to read bytes, JSON values or Structs as events, rows, records or pages
is a `CodecError`, so callers catch one type at the package boundary::

    CodecError(ValueError)
    ├── EventValidationError     an event or session header breaks DESIGN §2
    ├── RowFormatError           a chunk row breaks §3 ("malformed <tag> row: <why>")
    ├── RecordFormatError        bytes, a storage line, a page record or page body is malformed
    └── ContentEncodingError     a compressed body is corrupt, unsupported or over its size limit
"""

from __future__ import annotations

__all__ = ["CodecError", "ContentEncodingError", "EventValidationError", "RecordFormatError", "RowFormatError"]


class CodecError(ValueError):
    """Base class for every codec failure."""


class EventValidationError(CodecError):
    """Raised when an event or header breaks the envelope rules; the message says where and why."""


class RowFormatError(CodecError):
    """Raised when a value tagged as a chunk row is not a valid row."""


class RecordFormatError(CodecError):
    """Raised when a storage line, page record or page body is malformed (non-JSON, wrong shape)."""


class ContentEncodingError(CodecError):
    """Raised when a body cannot be decoded with its content coding, or decodes past the size limit."""

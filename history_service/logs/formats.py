"""The record formats: one line per record, as text or JSON, from the same parts.

A record is one line in either format: every control character and line separator in it,
a traceback's line breaks included, is written as an escape. An access line queued as an
`AccessLine` is formatted from the same parts as its record would be, so it is the same line.
"""

from __future__ import annotations

import logging
import math
import re
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import msgspec

from history_service.control import CONTROL_CLASS

__all__ = [
    "ACCESS_FORMAT",
    "AccessLine",
    "JsonFormatter",
    "LineFormatter",
    "TextFormatter",
    "Timestamps",
    "shown",
]

_PLAIN: Final = re.compile(r"[\x21-\x7e]+")
# What could end a line or hide in a terminal: C0, DEL, C1, and the separators str.splitlines() also
# splits on. JSON escapes only C0 (msgspec leaves the rest), so both formats escape these last.
_CONTROL: Final = re.compile(f"[{CONTROL_CLASS}\u2028\u2029]")
_SHORT: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# An access line's message; `history_service.logs.access.log_access` gives its arguments.
ACCESS_FORMAT: Final = "%s %s %d %.1fms %dB %s principal=%s route=%s"


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT.get(char) or f"\\u{ord(char):04x}"


def _one_line(text: str) -> str:
    """``text`` with every control character and line separator written as a JSON-style escape (``\\n``, ``\\u0085``).

    The escapes are valid inside a JSON string too, so a JSON line stays the same value.
    """
    return _CONTROL.sub(_escape, text)


class Timestamps:
    """A record's UTC time, ISO 8601 to the millisecond: the last second's date and time are kept, so a stamp costs
    only its milliseconds.

    The milliseconds are those `datetime.fromtimestamp` gives (microseconds rounded half to
    even, then cut), so each stamp is what ``datetime.isoformat(timespec="milliseconds")`` writes.
    """

    def __init__(self) -> None:
        # One attribute, replaced whole: a stamp made on another thread meanwhile reads a consistent pair.
        self._last: tuple[int, str] = (-1, "")

    def __call__(self, created: float) -> str:
        second = math.floor(created)
        micros = round((created - second) * 1e6)
        if micros >= 1_000_000:
            second, micros = second + 1, micros - 1_000_000
        last = self._last
        if last[0] != second:
            last = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
            self._last = last
        return f"{last[1]}.{micros // 1000:03d}Z"


class AccessLine(NamedTuple):
    """An access line as `log_access` queues it for a `QueuedLogHandler`: scalars, so the request pays only for a tuple.

    The writer thread makes its message arguments (`args`) and fields (`fields`), which a
    record of it would hold.
    """

    created: float
    logger: str
    request_id: str | None
    method: str
    path: str
    status: int
    latency_ms: float
    size: int
    coding: str
    principal: str | None
    route: str | None

    def args(self) -> tuple[object, ...]:
        """The arguments of `ACCESS_FORMAT`."""
        route, who = self.route, self.principal
        return (
            self.method,
            shown(self.path),
            self.status,
            self.latency_ms,
            self.size,
            shown(self.coding),
            "-" if who is None else shown(who),
            "-" if route is None else shown(route),
        )

    def fields(self) -> dict[str, Any]:
        """The ``access`` fields: a JSON line's, and a record's ``access`` attribute."""
        return {
            "method": self.method,
            "route": self.route,
            "path": self.path,
            "status": self.status,
            "latency_ms": round(self.latency_ms, 3),
            "bytes": self.size,
            "content_coding": self.coding,
            "principal": self.principal,
        }


class _Parts(NamedTuple):
    created: float
    level: str
    logger: str
    message: str
    request_id: str | None
    access: dict[str, Any] | None = None
    exception: str | None = None
    stack: str | None = None


class LineFormatter(logging.Formatter):
    """Formats a record, or an `AccessLine`, as one line (`line`) from the same parts."""

    def __init__(self) -> None:
        super().__init__()
        self.timestamp = Timestamps()

    def format(self, record: logging.LogRecord) -> str:
        access = getattr(record, "access", None)
        return self.line(
            _Parts(
                record.created,
                record.levelname,
                record.name,
                record.getMessage(),
                getattr(record, "request_id", None),
                access if isinstance(access, dict) else None,
                self.formatException(record.exc_info) if record.exc_info else None,
                self.formatStack(record.stack_info) if record.stack_info else None,
            )
        )

    # Whether a line shows a record's ``access`` fields (a text line has them in its message only).
    shows_fields = False

    def format_access(self, line: AccessLine) -> str:
        fields = line.fields() if self.shows_fields else None
        message = ACCESS_FORMAT % line.args()
        return self.line(_Parts(line.created, "INFO", line.logger, message, line.request_id, fields))

    def line(self, parts: _Parts) -> str:
        raise NotImplementedError


class JsonFormatter(LineFormatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``message``, ``request_id``, the access fields.

    A record's ``access`` mapping (see `log_access`) adds its fields at the top level; a
    traceback goes in ``exception`` as one string, so every record stays one line.
    """

    shows_fields = True

    def line(self, parts: _Parts) -> str:
        line: dict[str, Any] = {
            "ts": self.timestamp(parts.created),
            "level": parts.level,
            "logger": parts.logger,
            "message": parts.message,
            "request_id": parts.request_id,
        }
        if parts.access is not None:
            line.update(parts.access)
        if parts.exception is not None:
            line["exception"] = parts.exception
        if parts.stack is not None:
            line["stack"] = parts.stack
        return _one_line(msgspec.json.encode(line).decode())


class TextFormatter(LineFormatter):
    """``<ts> <LEVEL> <logger> [<request id>] <message>``, then a traceback, all on one line (see `_one_line`)."""

    def line(self, parts: _Parts) -> str:
        text = (
            f"{self.timestamp(parts.created)} {parts.level} {parts.logger} [{parts.request_id or '-'}] {parts.message}"
        )
        if parts.exception is not None:
            text = f"{text}\n{parts.exception}"
        if parts.stack is not None:
            text = f"{text}\n{parts.stack}"
        return _one_line(text)


def shown(value: object) -> str:
    """A value as one token of a text line: as it is when plain, else JSON-quoted (no line breaks, no spaces)."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) and '"' not in text else msgspec.json.encode(text).decode()

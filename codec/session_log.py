"""Reading deepseek-harness session logs: a header line, then one storage record per line.

Recorded fixtures omit ``seq`` and ``time`` (``seq0`` and ``time0`` on rows). The reader
rebuilds ``seq`` as that harness does: the next logical seq, counted over the expanded
events from 0. Present values must agree with the count: a log with a gap is refused, not
renumbered.

A missing ``time`` is derived, not left 0 (which every reader shows as 1970): it is the
time of the last event before it that has one, else the header's ``createdAt``. An event
cannot have happened before the session began or before an event logged ahead of it, so
that is the best lower bound the log gives, and it keeps times in log order. Only where
neither exists (``createdAt`` 0 and no earlier time) does it stay 0, the log's "unknown".
A time the log states, 0 included, is kept as it is; ``dt`` inside rows is kept as given,
so a row's members follow its derived ``time0``. A JSONL store serving a log placed by hand
keeps the harness's rule instead, a missing time is 0 (`record_from_value`, and
``derive_times=False``): a store serves what the log says.
"""

from __future__ import annotations

from typing import Any

import msgspec

from codec._paths import describe
from codec.chunk_rows import ROW_TAGS, StorageRecord, expand_records, row_from_value
from codec.errors import EventValidationError, RecordFormatError, RowFormatError
from codec.event_json import decode_json, event_from_value
from codec.events import Event, SessionHeader, check_depth

__all__ = ["SessionLog", "read_header", "read_session_log", "record_from_value"]


class SessionLog(msgspec.Struct, frozen=True):
    """A session's header and its exact logical events, seq 0 first."""

    header: SessionHeader
    events: list[Event]


def read_session_log(data: bytes, *, derive_times: bool = True) -> SessionLog:
    """Read a whole log, each missing time derived as the module says.

    ``derive_times=False`` reads a missing time as 0 instead, as the harness does, and as a
    JSONL store serves a log placed by hand. Every line must be complete and valid; errors
    name the line (1-based).
    """
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise RecordFormatError("line 1: empty log, expected a session header")
    header = _header(lines[0])
    events: list[Event] = []
    known = header.createdAt if derive_times else 0
    for number, line in enumerate(lines[1:], start=2):
        seq = len(events)
        record = _record(_object(line, number), seq, known, where=f"line {number}")
        first = record.seq if type(record) is Event else record.seq0  # type: ignore[union-attr]
        _check_seq(first, seq, number)
        events.extend(expand_records([record]))
        if derive_times and events and events[-1].time != 0:
            known = events[-1].time
    return SessionLog(header, events)


def record_from_value(value: dict[str, Any], seq: int, *, where: str = "record") -> StorageRecord:
    """Validate one decoded storage line; a missing ``seq``/``seq0`` becomes ``seq`` and a missing time 0."""
    return _record(value, seq, 0, where=where)


def _record(value: dict[str, Any], seq: int, time: int, *, where: str) -> StorageRecord:
    tag = value.get("type")
    if type(tag) is str and tag in ROW_TAGS:
        try:
            return row_from_value(_with_position(value, "seq0", "time0", seq, time))
        except RowFormatError as exc:
            raise RowFormatError(f"{where}: {exc}") from exc
    return event_from_value(_with_position(value, "seq", "time", seq, time), where=where)


def read_header(line: bytes) -> SessionHeader:
    """Decode a header line, which may omit ``version`` (it is 0)."""
    return _header(line)


def _header(line: bytes) -> SessionHeader:
    value = _object(line, 1)
    try:
        header = msgspec.convert(value, SessionHeader)
    except RecursionError as exc:
        raise RecordFormatError("line 1: header nesting is too deep") from exc
    except msgspec.ValidationError as exc:
        where, why = describe(exc, "line 1 header")
        raise EventValidationError(f"{where}: {why}") from exc
    check_depth(header.meta, where="line 1 header.meta")
    return header


def _object(line: bytes, number: int) -> dict[str, Any]:
    try:
        value = decode_json(line)
    except RecordFormatError as exc:
        raise RecordFormatError(f"line {number}: {exc}") from exc
    if type(value) is not dict:
        raise RecordFormatError(f"line {number}: expected a JSON object, got {type(value).__name__}")
    return value


def _with_position(value: dict[str, Any], seq_key: str, time_key: str, seq: int, time: int) -> dict[str, Any]:
    if seq_key in value and time_key in value:
        return value
    rebuilt = {"type": value.get("type"), seq_key: value.get(seq_key, seq), time_key: value.get(time_key, time)}
    rebuilt.update(value)
    return rebuilt


def _check_seq(actual: int, expected: int, number: int) -> None:
    if actual != expected:
        raise RecordFormatError(f"line {number}: seq {actual} does not continue the log, expected {expected}")

"""JSON encoding and strict decoding of events, storage lines and pages.

The encoder and typed decoders are built once and shared; they hold no state. Every
decoder validates fully and raises a `CodecError` subclass whose message says where and
why, e.g. ``events[3].surfaceOp: expected "append" or {op,start,end}``. Decoded events
are in canonical form (see `codec.events`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Final, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from codec._paths import DECODE_FAILURES, describe, reason
from codec.chunk_rows import (
    ROW_TAGS,
    ChunkRow,
    ReasoningChunks,
    StorageRecord,
    TextChunks,
    TextRowData,
    ToolCallChunks,
    ToolCallRowData,
    check_row,
    row_from_value,
)
from codec.errors import CodecError, EventValidationError, InvalidJsonError, RecordFormatError, RowFormatError
from codec.events import (
    CHUNK_EVENT_TYPE,
    MAX_SAFE_INTEGER,
    RESERVED_TYPES,
    Event,
    Seq,
    SessionHeader,
    canonical_event,
    check_depth,
)
from codec.records import Page, PageRecord

__all__ = [
    "decode_event",
    "decode_events",
    "decode_follow_snapshot",
    "decode_header",
    "decode_json",
    "decode_page",
    "decode_page_record",
    "decode_page_shell",
    "decode_record_range",
    "decode_storage_line",
    "encode",
    "encode_lines",
    "event_from_value",
    "events_from_values",
    "FollowSnapshot",
    "PageShell",
]

_T = TypeVar("_T")
_ENCODER: Final = msgspec.json.Encoder()
_ANY: Final = msgspec.json.Decoder()
_EVENT: Final = msgspec.json.Decoder(Event)
_EVENTS: Final = msgspec.json.Decoder(list[Event])
_ROW: Final = msgspec.json.Decoder(ChunkRow)
_HEADER: Final = msgspec.json.Decoder(SessionHeader)
_PAGE: Final = msgspec.json.Decoder(Page)


class _TypeProbe(msgspec.Struct):
    type: Any = None


_PROBE: Final = msgspec.json.Decoder(_TypeProbe)

# The fast page decoder bounds every dt entry in C, which proves the running-time rule for
# any row whose time0 and length are realistic; a page with a larger clock jump is decoded
# again with the full safe-integer range and checked exactly.
_SMALL_DT: Final = 2**31
SmallDt = Annotated[int, Meta(ge=-_SMALL_DT, le=_SMALL_DT)]


class _FastTextRowData(TextRowData, frozen=True, gc=False, forbid_unknown_fields=True):
    dt: list[SmallDt]


class _FastToolCallRowData(ToolCallRowData, frozen=True, gc=False, kw_only=True, forbid_unknown_fields=True):
    dt: list[SmallDt]


class _FastTextChunks(TextChunks, frozen=True, gc=False, forbid_unknown_fields=True):
    data: _FastTextRowData


class _FastReasoningChunks(ReasoningChunks, frozen=True, gc=False, forbid_unknown_fields=True):
    data: _FastTextRowData


class _FastToolCallChunks(ToolCallChunks, frozen=True, gc=False, forbid_unknown_fields=True):
    data: _FastToolCallRowData


class _FastRecord(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    event: Event | UnsetType = UNSET
    chunks: _FastTextChunks | _FastReasoningChunks | _FastToolCallChunks | UnsetType = UNSET


class _FastPage(Struct, frozen=True, forbid_unknown_fields=True):
    records: list[_FastRecord]
    hasMore: bool
    fromSeq: Seq
    toSeq: Seq


_FAST_PAGE: Final = msgspec.json.Decoder(_FastPage)
_CANONICAL_ROW: Final[dict[type[Any], type[TextChunks] | type[ReasoningChunks] | type[ToolCallChunks]]] = {
    _FastTextChunks: TextChunks,
    _FastReasoningChunks: ReasoningChunks,
    _FastToolCallChunks: ToolCallChunks,
}


def _canonical_row(row: _FastTextChunks | _FastReasoningChunks | _FastToolCallChunks) -> ChunkRow:
    d = row.data
    data: TextRowData | ToolCallRowData
    if type(d) is _FastToolCallRowData:
        data = ToolCallRowData(turn=d.turn, step=d.step, index=d.index, dt=d.dt, id=d.id, name=d.name, args=d.args)
    else:
        data = TextRowData(d.turn, d.step, d.index, d.dt, d.texts)  # type: ignore[union-attr]
    return _CANONICAL_ROW[type(row)](row.seq0, row.time0, data)  # type: ignore[arg-type]


_OP_REASONS: Final = {
    "surfaceOp": 'expected "append" or {op,start,end}',
    "conversationOp": 'expected {op:"replace",start,end}',
}


def encode(value: Any) -> bytes:
    """Encode any codec value as compact JSON; Structs keep their declared key order."""
    return _ENCODER.encode(value)


def encode_lines(values: Iterable[Any]) -> bytes:
    """Encode values as JSON lines, each ending in ``\\n``."""
    buffer = bytearray()
    for value in values:
        _ENCODER.encode_into(value, buffer, -1)
        buffer.extend(b"\n")
    return bytes(buffer)


def decode_json(data: bytes | str) -> Any:
    """Decode any JSON text; text that is not JSON raises `InvalidJsonError`."""
    try:
        return _ANY.decode(data)
    except DECODE_FAILURES as exc:
        raise InvalidJsonError(f"invalid JSON: {reason(exc)}") from exc


def _event_error(exc: Exception, root: str) -> CodecError:
    if not isinstance(exc, msgspec.ValidationError):
        return InvalidJsonError(f"{root}: invalid JSON: {reason(exc)}")
    where, why = describe(exc, root)
    for field, expected in _OP_REASONS.items():
        if f".{field}" in where:
            where = where[: where.index(f".{field}") + len(field) + 1]
            why = f"{expected} ({why})"
            break
    return EventValidationError(f"{where}: {why}")


def _finish_event(event: Event, where: str) -> Event:
    if event.type in RESERVED_TYPES:
        raise EventValidationError(f"{where}.type: {event.type!r} is reserved for storage lines")
    if event.type == CHUNK_EVENT_TYPE:
        event = canonical_event(event)
    check_depth(event.data, where=f"{where}.data")
    return event


def decode_event(data: bytes, *, where: str = "event") -> Event:
    """Decode and validate one event."""
    try:
        event = _EVENT.decode(data)
    except DECODE_FAILURES as exc:
        raise _event_error(exc, where) from exc
    return _finish_event(event, where)


def decode_events(data: bytes, *, where: str = "events") -> list[Event]:
    """Decode and validate a JSON array of events."""
    try:
        events = _EVENTS.decode(data)
    except DECODE_FAILURES as exc:
        raise _event_error(exc, where) from exc
    return [_finish_event(event, f"{where}[{i}]") for i, event in enumerate(events)]


def event_from_value(value: Any, *, where: str = "event") -> Event:
    """Validate one already-decoded JSON object as an event."""
    try:
        event = msgspec.convert(value, Event)
    except (msgspec.ValidationError, RecursionError) as exc:
        raise _event_error(exc, where) from exc
    return _finish_event(event, where)


def events_from_values(values: Iterable[Any], *, where: str = "events") -> list[Event]:
    """Validate already-decoded JSON objects as events."""
    return [event_from_value(value, where=f"{where}[{i}]") for i, value in enumerate(values)]


def decode_header(data: bytes | bytearray) -> SessionHeader:
    """Decode and validate a session header line; ``meta`` nests at most `MAX_DEPTH` levels."""
    try:
        header = _HEADER.decode(data)
    except DECODE_FAILURES as exc:
        if not isinstance(exc, msgspec.ValidationError):
            raise InvalidJsonError(f"header: invalid JSON: {reason(exc)}") from exc
        where, why = describe(exc, "header")
        raise EventValidationError(f"{where}: {why}") from exc
    check_depth(header.meta, where="header.meta")
    return header


def decode_storage_line(line: bytes, *, where: str = "record") -> StorageRecord:
    """Decode one storage line: a chunk row (by its tag) or a logical event."""
    try:
        tag = _PROBE.decode(line).type
    except DECODE_FAILURES as exc:
        if isinstance(exc, msgspec.ValidationError):
            raise RecordFormatError(f"{where}: not a JSON object: {reason(exc)}") from exc
        raise InvalidJsonError(f"{where}: invalid JSON: {reason(exc)}") from exc
    if type(tag) is str and tag in ROW_TAGS:
        try:
            row = _ROW.decode(line)
        except msgspec.ValidationError as exc:
            row_where, why = describe(exc, "row")
            raise RowFormatError(f"malformed {tag} row: {row_where}: {why}") from exc
        except DECODE_FAILURES as exc:
            raise InvalidJsonError(f"{where}: invalid JSON: {reason(exc)}") from exc
        return check_row(row)
    if tag == "session":
        raise RecordFormatError(f"{where}: a session header where a storage record was expected")
    return decode_event(line, where=where)


def decode_page(data: bytes) -> Page:
    """Decode and validate a ``session.page`` body: every record has exactly one key and valid content.

    Coverage (contiguity, ``toSeq``, ``hasMore``) is checked separately by `check_page`.
    """
    try:
        fast = _FAST_PAGE.decode(data)
    except DECODE_FAILURES:
        return _decode_page_full(data)
    records = [_from_fast(record, i) for i, record in enumerate(fast.records)]
    return Page(records, fast.hasMore, fast.fromSeq, fast.toSeq)


def _from_fast(record: _FastRecord, i: int) -> PageRecord:
    event, chunks = record.event, record.chunks
    if (event is UNSET) == (chunks is UNSET):
        raise RecordFormatError(f"records[{i}]: expected exactly one of 'event' or 'chunks'")
    if chunks is UNSET:
        return _checked_record(PageRecord(event=event), i)
    row = _canonical_row(chunks)
    try:
        check_row(row, max_abs_dt=_SMALL_DT)
    except RowFormatError as exc:
        raise RowFormatError(f"records[{i}].chunks: {exc}") from exc
    return PageRecord(chunks=row)


class PageShell(Struct, frozen=True, forbid_unknown_fields=True):
    """A page body whose records are left as undecoded JSON spans of the body.

    It lets a reader check coverage with `decode_record_range` and then decode and
    expand one record at a time (`decode_page_record`), so a page never exists as a
    whole list of decoded records.
    """

    records: list[msgspec.Raw]
    hasMore: bool
    fromSeq: Seq
    toSeq: Seq


class _SeqOnly(Struct, frozen=True, gc=False):
    seq: int


class _DtOnly(Struct, frozen=True, gc=False):
    dt: list[int]


class _RowSpan(Struct, frozen=True, gc=False):
    seq0: int
    data: _DtOnly


class _RecordSpan(Struct, frozen=True, gc=False):
    event: _SeqOnly | UnsetType = UNSET
    chunks: _RowSpan | UnsetType = UNSET


class FollowSnapshot(Struct, frozen=True, forbid_unknown_fields=True):
    """The data of a follow stream's ``snapshot`` frame: the header, the cursor (the last
    seq, or -1) and the tail page at ``through = cursor``, records left as raw JSON."""

    header: SessionHeader
    cursor: Annotated[int, Meta(ge=-1, le=MAX_SAFE_INTEGER)]
    records: list[msgspec.Raw]
    hasMore: bool
    fromSeq: Seq
    toSeq: Seq


_PAGE_SHELL: Final = msgspec.json.Decoder(PageShell)
_SNAPSHOT: Final = msgspec.json.Decoder(FollowSnapshot)
_RECORD_SPAN: Final = msgspec.json.Decoder(_RecordSpan)
_FAST_RECORD: Final = msgspec.json.Decoder(_FastRecord)
_RECORD: Final = msgspec.json.Decoder(PageRecord)


def decode_page_shell(data: bytes) -> PageShell:
    """Decode a page body's frame, leaving each record as raw JSON."""
    return _decode_frame(_PAGE_SHELL, data, "page")


def decode_follow_snapshot(data: bytes) -> FollowSnapshot:
    """Decode a follow ``snapshot`` frame's data, leaving each record as raw JSON."""
    return _decode_frame(_SNAPSHOT, data, "snapshot")


def _decode_frame(decoder: msgspec.json.Decoder[_T], data: bytes, root: str) -> _T:
    try:
        return decoder.decode(data)
    except DECODE_FAILURES as exc:
        if isinstance(exc, msgspec.ValidationError):
            where, why = describe(exc, root)
            raise RecordFormatError(f"{where}: {why}") from exc
        raise InvalidJsonError(f"{root}: invalid JSON: {reason(exc)}") from exc


def decode_record_range(data: bytes, *, index: int = 0) -> tuple[int, int]:
    """The inclusive seq range a raw page record claims, read without decoding its members.

    A row's member count is taken from ``dt`` (``members - 1`` entries); `decode_page_record`
    later checks that the members agree, so a row that lies about its length never expands.
    """
    try:
        span = _RECORD_SPAN.decode(data)
    except DECODE_FAILURES as exc:
        raise RecordFormatError(f"records[{index}]: not a page record: {reason(exc)}") from exc
    event, chunks = span.event, span.chunks
    if (event is UNSET) == (chunks is UNSET):
        raise RecordFormatError(f"records[{index}]: expected exactly one of 'event' or 'chunks'")
    if chunks is UNSET:
        return event.seq, event.seq  # type: ignore[union-attr]
    return chunks.seq0, chunks.seq0 + len(chunks.data.dt)


def decode_page_record(data: bytes, *, index: int = 0) -> PageRecord:
    """Decode and validate one raw page record, as `decode_page` does for each of its records."""
    try:
        fast = _FAST_RECORD.decode(data)
    except DECODE_FAILURES:
        try:
            record = _RECORD.decode(data)
        except DECODE_FAILURES as exc:
            raise _single_record_error(data, exc, index) from exc
        return _checked_record(record, index)
    return _from_fast(fast, index)


def _decode_page_full(data: bytes) -> Page:
    try:
        page = _PAGE.decode(data)
    except DECODE_FAILURES as exc:
        raise _page_error(data, exc) from exc
    page.records[:] = [_checked_record(record, i) for i, record in enumerate(page.records)]
    return page


def _checked_record(record: PageRecord, i: int) -> PageRecord:
    event, chunks = record.event, record.chunks
    if (event is UNSET) == (chunks is UNSET):
        raise RecordFormatError(f"records[{i}]: expected exactly one of 'event' or 'chunks'")
    if chunks is not UNSET:
        try:
            check_row(chunks)
        except RowFormatError as exc:
            raise RowFormatError(f"records[{i}].chunks: {exc}") from exc
        return record
    canonical = _finish_event(event, f"records[{i}].event")  # type: ignore[arg-type]
    return record if canonical is event else PageRecord(event=canonical)


def _page_error(data: bytes, exc: Exception) -> CodecError:
    """Re-check a page that failed the typed decode, record by record, for a precise message."""
    if not isinstance(exc, msgspec.ValidationError):
        return InvalidJsonError(f"page: invalid JSON: {reason(exc)}")
    try:
        value = _ANY.decode(data)
    except DECODE_FAILURES as json_exc:
        return InvalidJsonError(f"page: invalid JSON: {reason(json_exc)}")
    records = value.get("records") if type(value) is dict else None
    if type(records) is list:
        for i, record in enumerate(records):
            error = _record_error(record, i)
            if error is not None:
                return error
    where, why = describe(exc, "page")
    return RecordFormatError(f"{where}: {why}")


def _single_record_error(data: bytes, exc: Exception, i: int) -> CodecError:
    if isinstance(exc, msgspec.ValidationError):
        try:
            value = _ANY.decode(data)
        except DECODE_FAILURES as json_exc:
            return InvalidJsonError(f"records[{i}]: invalid JSON: {reason(json_exc)}")
        error = _record_error(value, i)
        if error is not None:
            return error
        where, why = describe(exc, f"records[{i}]")
        return RecordFormatError(f"{where}: {why}")
    return InvalidJsonError(f"records[{i}]: invalid JSON: {reason(exc)}")


def _record_error(record: Any, i: int) -> CodecError | None:
    """The precise error of one decoded page record, or ``None`` if its content is valid."""
    if type(record) is dict and type(record.get("chunks")) is dict:
        try:
            row_from_value(record["chunks"])
        except RowFormatError as row_exc:
            return RowFormatError(f"records[{i}].chunks: {row_exc}")
    elif type(record) is dict and "event" in record:
        try:
            event_from_value(record["event"], where=f"records[{i}].event")
        except CodecError as event_exc:
            return event_exc
    return None

"""The page and follow wire formats (docs/protocol.md §4-§5): records, page bodies and snapshots.

A page record is ``{"event": Event}`` or ``{"chunks": ChunkRow}``: exactly one key. A page
body is ``{"records", "hasMore", "fromSeq", "toSeq"}`` and covers the logical interval
``[fromSeq, toSeq)``; ``hasMore`` is ``fromSeq > 0``. A follow snapshot is a page body
with the session ``header`` and the ``cursor`` in front.

A server builds those bytes by splicing stored records (`codec.splice`), byte-identical
to encoding `pack_page` of the same events; this module decodes them strictly
(`decode_page`, or record by record from a `PageShell`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Final, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from codec._paths import DECODE_FAILURES, describe, reason
from codec.chunk_rows import (
    ChunkRow,
    ReasoningChunks,
    StorageRecord,
    TextChunks,
    TextRowData,
    ToolCallChunks,
    ToolCallRowData,
    check_row,
    expand_row,
    pack,
    record_range,
    row_from_value,
)
from codec.errors import CodecError, InvalidJsonError, RecordFormatError, RowFormatError
from codec.event_json import decode_event, event_from_value, finish_event
from codec.events import MAX_SAFE_INTEGER, Event, Seq, SessionHeader

__all__ = [
    "FollowSnapshot",
    "LiveRecords",
    "Page",
    "PageRecord",
    "PageShell",
    "check_cover",
    "check_page",
    "decode_follow_snapshot",
    "decode_live_records",
    "decode_page",
    "decode_page_record",
    "decode_page_shell",
    "decode_record_range",
    "iter_page_events",
    "pack_page",
    "page_record",
    "record_seq_range",
]

_T = TypeVar("_T")
_ANY: Final = msgspec.json.Decoder()


class PageRecord(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """One page record: exactly one of ``event`` or ``chunks`` is set."""

    event: Event | UnsetType = UNSET
    chunks: ChunkRow | UnsetType = UNSET


class Page(Struct, frozen=True, forbid_unknown_fields=True):
    """A ``session.page`` body.

    Decoding validates every record; `check_page` checks coverage.
    """

    records: list[PageRecord]
    hasMore: bool
    fromSeq: Seq
    toSeq: Seq


def page_record(record: StorageRecord) -> PageRecord:
    """Wrap a storage record as a page record."""
    if type(record) is Event:
        return PageRecord(event=record)
    return PageRecord(chunks=record)  # type: ignore[arg-type]


def pack_page(events: Iterable[Event]) -> list[PageRecord]:
    """The page records for a logical interval: the events packed with no row-length cap."""
    return [page_record(record) for record in pack(events)]


def record_seq_range(record: PageRecord) -> tuple[int, int]:
    """The inclusive ``(first, last)`` seq range of a page record."""
    return record_range(record.event if record.event is not UNSET else record.chunks)  # type: ignore[arg-type]


def check_page(page: Page) -> Page:
    """Check that the records cover exactly ``[fromSeq, toSeq)``, contiguously, and ``hasMore``.

    Raises `RecordFormatError` naming the first record that breaks the cover.
    """
    check_cover(map(record_seq_range, page.records), from_seq=page.fromSeq, to_seq=page.toSeq, has_more=page.hasMore)
    return page


def check_cover(ranges: Iterable[tuple[int, int]], *, from_seq: int, to_seq: int, has_more: bool) -> None:
    """Check that inclusive ``(first, last)`` record ranges tile ``[from_seq, to_seq)`` and ``hasMore`` agrees.

    The ranges may come from decoded records (`record_seq_range`) or from raw ones, before
    their content is decoded. Raises `RecordFormatError` naming the first record at fault.
    """
    if to_seq < from_seq:
        raise RecordFormatError(f"page range is inverted: fromSeq {from_seq} > toSeq {to_seq}")
    if has_more != (from_seq > 0):
        raise RecordFormatError(f"hasMore is {has_more} but fromSeq is {from_seq}")
    expected = from_seq
    for i, (first, last) in enumerate(ranges):
        if first > last:
            raise RecordFormatError(f"records[{i}] has an inverted cursor range: {first} > {last}")
        if first != expected:
            kind = "overlaps the previous record" if first < expected else "leaves a gap"
            raise RecordFormatError(
                f"page contains discontinuous entries: records[{i}] starts at seq {first}, expected {expected}: "
                f"it {kind}"
            )
        expected = last + 1
    if expected != to_seq:
        raise RecordFormatError(
            f"page did not end at its cursor: records end before seq {expected}, but the page ends at toSeq {to_seq}"
        )


def iter_page_events(records: Iterable[PageRecord]) -> Iterator[Event]:
    """Yield the exact logical events of page records, one row at a time."""
    for record in records:
        event = record.event
        if event is not UNSET:
            yield event
        else:
            yield from expand_row(record.chunks)  # type: ignore[arg-type]


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


_PAGE: Final = msgspec.json.Decoder(Page)


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
    seq, or -1) and the tail page at ``through = cursor``.

    The records are left as raw JSON, to be decoded one at a time.
    """

    header: SessionHeader
    cursor: Annotated[int, Meta(ge=-1, le=MAX_SAFE_INTEGER)]
    records: list[msgspec.Raw]
    hasMore: bool
    fromSeq: Seq
    toSeq: Seq


class LiveRecords(Struct, frozen=True, forbid_unknown_fields=True):
    """The data of a packed follow stream's ``records`` frame (docs/protocol.md §5.5): the page
    records of ``[fromSeq, toSeq)``, packed as a page packs them.

    The records are left as raw JSON, to be decoded one at a time.
    """

    records: list[msgspec.Raw]
    fromSeq: Seq
    toSeq: Seq


_PAGE_SHELL: Final = msgspec.json.Decoder(PageShell)
_LIVE_RECORDS: Final = msgspec.json.Decoder(LiveRecords)
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


def decode_live_records(data: bytes) -> LiveRecords:
    """Decode a ``records`` frame's data, leaving each record as raw JSON."""
    return _decode_frame(_LIVE_RECORDS, data, "records")


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


def decode_live_record(data: bytes) -> PageRecord:
    """A live follow frame's record: a bare event, or (tolerated, as it is lossless) a wrapped page record."""
    if data.startswith((b'{"chunks"', b'{"event"')):
        return decode_page_record(data)
    return PageRecord(event=decode_event(data, where="live event"))


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
    canonical = finish_event(event, f"records[{i}].event")  # type: ignore[arg-type]
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

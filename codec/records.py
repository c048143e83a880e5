"""Page records and the page body of ``session.page`` (docs/protocol.md §4).

A page record is ``{"event": Event}`` or ``{"chunks": ChunkRow}``: exactly one key. The
body is ``{"records", "hasMore", "fromSeq", "toSeq"}`` and covers the logical interval
``[fromSeq, toSeq)``; ``hasMore`` is ``fromSeq > 0``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from msgspec import UNSET, Struct, UnsetType

from codec.chunk_rows import ChunkRow, StorageRecord, expand_row, member_count, pack
from codec.errors import RecordFormatError
from codec.events import Event, Seq

__all__ = [
    "Page",
    "PageRecord",
    "check_cover",
    "check_page",
    "iter_page_events",
    "pack_page",
    "page_record",
    "record_seq_range",
]


class PageRecord(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """One page record: exactly one of ``event`` or ``chunks`` is set."""

    event: Event | UnsetType = UNSET
    chunks: ChunkRow | UnsetType = UNSET


class Page(Struct, frozen=True, forbid_unknown_fields=True):
    """A ``session.page`` body. Decoding validates every record; `check_page` checks coverage."""

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
    event = record.event
    if event is not UNSET:
        return event.seq, event.seq
    row: ChunkRow = record.chunks  # type: ignore[assignment]
    return row.seq0, row.seq0 + member_count(row) - 1


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

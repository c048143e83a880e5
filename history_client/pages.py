"""Validated pages: the continuity rules every page must pass before it yields an event.

A page covers ``[from_seq, to_seq)``. Its records must tile that interval exactly: no
record may have an inverted range, each must start where the previous one ended, and
the last must end at the page's cursor (``to_seq - 1``), which must be the cursor that
was asked for. A page that breaks any rule raises `PageContinuityError` before any of
its events is yielded.

`HistoryPage` holds decoded records; `LazyPage` holds the body and decodes one record at
a time, so iterating it never holds more than one expanded row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from msgspec import Raw

from codec import (
    CodecError,
    Event,
    FollowSnapshot,
    PageRecord,
    PageShell,
    RecordFormatError,
    check_cover,
    decode_page,
    decode_page_record,
    decode_page_shell,
    decode_record_range,
    expand_row,
    iter_page_events,
    record_seq_range,
)
from history_client.errors import PageContinuityError, ProtocolError

__all__ = [
    "HistoryPage",
    "LazyPage",
    "check_ranges",
    "expected_to_seq",
    "iter_body_events",
    "open_lazy_page",
    "read_page",
]


def expected_to_seq(*, through: int | None, before: int | None) -> int | None:
    """The ``toSeq`` a page request pins, or ``None`` when it depends on the head."""
    if through is None:
        return None
    return through + 1 if before is None else min(through + 1, before)


def check_ranges(
    ranges: Iterable[tuple[int, int]],
    *,
    from_seq: int,
    to_seq: int,
    has_more: bool,
    through: int | None = None,
    before: int | None = None,
) -> None:
    """Check that inclusive record ranges tile ``[from_seq, to_seq)`` and that the page ends where asked.

    The cover rule is the codec's (`check_cover`); this adds what the request pins.
    """
    if from_seq > to_seq:
        raise PageContinuityError(f"inverted page range: fromSeq {from_seq} > toSeq {to_seq}")
    if from_seq == to_seq > 0:
        # Only a page ending at seq 0 may be empty (docs/protocol.md §4.2); a reader paging
        # backwards from an empty page further on would ask for the same page forever.
        raise PageContinuityError(f"page [{from_seq}, {to_seq}) is empty but ends after seq 0")
    expected = expected_to_seq(through=through, before=before)
    if expected is not None and to_seq != expected:
        raise PageContinuityError(f"page did not end at its requested cursor: toSeq {to_seq}, expected {expected}")
    if before is not None and to_seq > before:
        raise PageContinuityError(f"page ends at toSeq {to_seq}, past before={before}")
    try:
        check_cover(ranges, from_seq=from_seq, to_seq=to_seq, has_more=has_more)
    except RecordFormatError as exc:
        raise PageContinuityError(str(exc)) from exc


class HistoryPage:
    """A validated page whose records are decoded codec Structs.

    The records cover exactly ``[from_seq, to_seq)``; `events` expands them lazily and exactly.
    ``incarnation`` is the session's incarnation the page is of (docs/protocol.md §2.5), when
    the service named it: pass it on to later reads so that they stay in the same session.
    """

    __slots__ = ("from_seq", "has_more", "incarnation", "records", "to_seq")

    def __init__(
        self,
        records: Sequence[PageRecord],
        *,
        has_more: bool,
        from_seq: int,
        to_seq: int,
        incarnation: str | None = None,
    ) -> None:
        self.records = records
        self.has_more = has_more
        self.from_seq = from_seq
        self.to_seq = to_seq
        self.incarnation = incarnation

    def __repr__(self) -> str:
        return f"HistoryPage(from_seq={self.from_seq}, to_seq={self.to_seq}, records={len(self.records)})"

    def __len__(self) -> int:
        """The number of logical events the page stands for."""
        return self.to_seq - self.from_seq

    def events(self) -> Iterator[Event]:
        """The page's exact logical events in seq order, one row expanded at a time."""
        return iter_page_events(self.records)


class LazyPage:
    """A validated page that keeps its records as raw JSON and decodes one at a time.

    Coverage is checked when the page is opened, from each record's claimed range; each
    record's content is checked when `events` reaches it, so an invalid row raises before
    any of its events is yielded.
    """

    __slots__ = ("_records", "from_seq", "has_more", "to_seq")

    def __init__(self, records: Sequence[Raw], *, has_more: bool, from_seq: int, to_seq: int) -> None:
        self._records = records
        self.has_more = has_more
        self.from_seq = from_seq
        self.to_seq = to_seq

    def __repr__(self) -> str:
        return f"LazyPage(from_seq={self.from_seq}, to_seq={self.to_seq}, records={len(self._records)})"

    def __len__(self) -> int:
        return self.to_seq - self.from_seq

    @classmethod
    def open(
        cls, shell: PageShell | FollowSnapshot, *, through: int | None = None, before: int | None = None
    ) -> LazyPage:
        """Check a decoded shell's coverage against the request's cursor and wrap it."""
        records, from_seq, to_seq, has_more = shell.records, shell.fromSeq, shell.toSeq, shell.hasMore
        try:
            ranges = [decode_record_range(record, index=i) for i, record in enumerate(records)]
        except CodecError as exc:
            raise ProtocolError(f"invalid page: {exc}") from exc
        check_ranges(ranges, from_seq=from_seq, to_seq=to_seq, has_more=has_more, through=through, before=before)
        return cls(records, has_more=has_more, from_seq=from_seq, to_seq=to_seq)

    def events(self, *, after: int = -1) -> Iterator[Event]:
        """The exact logical events with seq > ``after``, in order, decoding one record at a time."""
        for i, raw in enumerate(self._records):
            try:
                record = decode_page_record(raw, index=i)
            except CodecError as exc:
                raise ProtocolError(f"invalid page: {exc}") from exc
            event = record.event
            if type(event) is Event:
                if event.seq > after:
                    yield event
                continue
            first, last = record_seq_range(record)
            if last <= after:
                continue
            events = expand_row(record.chunks)  # type: ignore[arg-type]
            yield from events if first > after else events[after - first + 1 :]


def read_page(
    data: bytes, *, through: int | None = None, before: int | None = None, incarnation: str | None = None
) -> HistoryPage:
    """Decode, validate and check a ``session.page`` body; the request's cursor pins ``toSeq``.

    ``incarnation`` is kept on the page: the one its answer named.
    """
    try:
        page = decode_page(data)
    except CodecError as exc:
        raise ProtocolError(f"invalid page: {exc}") from exc
    check_ranges(
        map(record_seq_range, page.records),
        from_seq=page.fromSeq,
        to_seq=page.toSeq,
        has_more=page.hasMore,
        through=through,
        before=before,
    )
    return HistoryPage(
        page.records, has_more=page.hasMore, from_seq=page.fromSeq, to_seq=page.toSeq, incarnation=incarnation
    )


def open_lazy_page(data: bytes, *, through: int | None = None, before: int | None = None) -> LazyPage:
    try:
        shell = decode_page_shell(data)
    except CodecError as exc:
        raise ProtocolError(f"invalid page: {exc}") from exc
    return LazyPage.open(shell, through=through, before=before)


def iter_body_events(data: bytes, *, through: int | None = None, before: int | None = None) -> Iterator[Event]:
    """The exact events of a packed page body, one row at a time, without decoding the whole page.

    Coverage is checked before the first event is yielded.
    """
    return open_lazy_page(data, through=through, before=before).events()

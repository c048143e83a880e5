"""How far back a page read must go: the byte target bounds the records read (docs/protocol.md §4.3).

A page is the oldest candidate start whose page fits ``maxBytes``, else the newest
(`history_service.pages.choose_body`). A start whose page is certainly larger than the
target can never be chosen, and neither can any older one, since an older start's page
holds every event of a newer one's. So a store reads only the records of the starts that
may fit, newest first, and stops at the first that cannot: a read costs memory in
proportion to the page it serves, whatever ``maxMessages`` says.

"Certainly larger" comes from the records' columns and sizes alone, before any line is
read: a record that is a whole run by itself (see `codec.runs`), and lies inside the page,
is spliced as its own line, or, unpacked, as longer event records. Pieces of a run that
still has several records may be joined into fewer bytes, so they count nothing. A size a
store cannot vouch for (a line it re-encodes) is given as 0. The result is exact: the same
page as with every start.
"""

from __future__ import annotations

from collections.abc import Sequence

from codec import StoredRecord, runs
from codec.chunk_rows import MIN_RUN

__all__ = ["bounded_cuts", "floor_sizes", "within"]


def floor_sizes(records: Sequence[StoredRecord], sizes: Sequence[int]) -> list[int]:
    """Bytes each record surely adds to a page that holds all of it: its size when it is a run alone, else 0.

    ``records`` are in seq order (columns suffice: lines may be empty); ``sizes`` are lower
    bounds of their canonical lines' lengths.
    """
    size_of = {record.seq: size for record, size in zip(records, sizes, strict=True)}
    floors: list[int] = []
    for run in runs(records):
        only = run[0]
        if len(run) == 1 and (not only.is_row or only.members >= MIN_RUN):
            floors.append(size_of[only.seq])
        else:
            floors.extend([0] * len(run))
    return floors


def bounded_cuts(
    cuts: Sequence[int], to_seq: int, records: Sequence[StoredRecord], floors: Sequence[int], max_bytes: int
) -> list[int]:
    """The newest of ``cuts`` (newest first) whose pages may fit ``max_bytes``: always the newest one.

    ``records`` cover ``[cuts[-1], to_seq)`` in seq order, with their `floor_sizes`. The
    oldest start of the result is what the store must read from.
    """
    kept = [cuts[0]]
    total = 0
    i = len(records) - 1
    for cut in cuts[1:]:
        while i >= 0 and records[i].seq >= cut:
            if records[i].end <= to_seq:
                total += floors[i]
            i -= 1
        if total > max_bytes:
            break
        kept.append(cut)
    return kept


def within(sizes: Sequence[int], max_bytes: int) -> bool:
    """Whether every start may fit ``max_bytes`` whatever the records' runs: floors never sum past their sizes.

    Then `bounded_cuts` keeps every cut, and a store need not work out the floors.
    """
    return sum(sizes) <= max_bytes

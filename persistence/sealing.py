"""Sealing: how an append keeps a session's runs in the one row `pack` would build.

Appends store a run of deltas in pieces: each batch packs what it holds. The *open run* is
the session's trailing run, the only one a later append can continue. On each append:

* a run that the batch closes (something that does not continue it follows) is sealed:
  its pieces are replaced by `codec.join` of them, the row `pack` builds;
* the open run is compacted like a binary counter: single deltas before a row, or
  `SINGLES` single deltas, merge; two rows merge when the later holds at least as many
  members as the earlier. So an open run is rows of strictly falling length, then fewer
  than `SINGLES` single deltas. A token stream (one delta per append) keeps about
  log2(members / `SINGLES`) rows, and rewrites each member O(log members) times; batches
  of falling sizes can leave up to about sqrt(2 * members) rows. A 1-event append that
  joins the run is stored as it is, planned in constant time, but once in `SINGLES`.

An open run longer than `MAX_TAIL` records (only batches of falling sizes make one) is
planned from its last `MAX_TAIL`: the pieces before them stay pieces when it closes,
which reads join as ever.

Reads join whatever pieces remain (`codec.runs`), so sealing changes how fast a page is
spliced, never what it holds: a crash that loses a seal loses nothing.

Planning reads only the join columns. `plan_append` first finds which tail records must be
rewritten, then asks the store for just their lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from codec import StoredRecord, join, runs
from codec.chunk_rows import MIN_RUN, continues_run

__all__ = ["MAX_TAIL", "SINGLES", "kept", "next_open_run", "open_run", "plan_append"]

# A store reads at most this many trailing records as the open run; compaction keeps real runs far shorter.
MAX_TAIL: Final = 64
# Single deltas an open run gathers before they merge into a row: a token stream, one delta per
# append, rewrites its run once in this many appends (once in three, when three merged).
SINGLES: Final = 16

Merge = Callable[[Sequence[StoredRecord]], list[StoredRecord]]


def open_run(trailing: Sequence[StoredRecord]) -> list[StoredRecord]:
    """The open run among a session's trailing records (in seq order): the last run, if it is one of deltas.

    Walked back from the end, so it costs the open run's length (a few records, see above),
    not the length of ``trailing``.
    """
    start = len(trailing)
    if not start or not trailing[-1].kind:
        return []
    start -= 1
    while start and _follows(trailing[start - 1], trailing[start]):
        start -= 1
    return list(trailing[start:])


def next_open_run(kept: Sequence[StoredRecord], records: Sequence[StoredRecord]) -> list[StoredRecord]:
    """The open run once an append planned by `plan_append` is stored: ``kept`` is ``tail[:keep]``.

    It costs the length of ``records`` (usually one), not of the run: ``kept``, a part of
    the open run, is one run already.
    """
    run = open_run(records)
    if kept and len(run) == len(records) and _follows(kept[-1], records[0]):
        return [*kept, *records]
    return run


def _follows(before: StoredRecord, after: StoredRecord) -> bool:
    """Whether ``after`` continues the run of deltas ``before`` ends (`codec.continues_run` on the columns)."""
    return bool(before.kind and after.kind) and continues_run(
        before.block, before.end - 1, before.time1, after.block, after.seq, after.time0
    )


def _merge_columns(group: Sequence[StoredRecord]) -> list[StoredRecord]:
    """What `join` gives, from the columns alone: enough to see which records a plan rewrites."""
    first, last = group[0], group[-1]
    members = last.end - first.seq
    if len(group) == 1 and (not first.is_row or first.members >= MIN_RUN):
        return [first]
    if members < MIN_RUN:
        return list(group) if not any(record.is_row for record in group) else [record._replace() for record in group]
    return [StoredRecord(first.seq, members, b"", first.kind & 3, first.key, first.time0, last.time1)]


def _compact(group: list[StoredRecord], merge: Merge) -> list[StoredRecord]:
    out = list(group)
    while len(out) >= 2:
        last, before = out[-1], out[-2]
        if last.is_row and not before.is_row:
            cut = len(out) - 2
        elif len(out) >= SINGLES and not any(record.is_row for record in out[-SINGLES:]):
            cut = len(out) - SINGLES
        elif last.is_row and before.is_row and last.members >= before.members:
            cut = len(out) - 2
        else:
            break
        out[cut:] = merge(out[cut:])
    return out


def _plan(tail: Sequence[StoredRecord], batch: Sequence[StoredRecord], merge: Merge) -> tuple[int, list[StoredRecord]]:
    records = [*tail, *batch]
    planned: list[StoredRecord] = []
    if len(batch) == 1 and tail and _follows(tail[-1], batch[0]):
        # One delta that joins the open run: the run is the whole of ``records``, and only its end compacts.
        planned = _compact(records, merge)
    else:
        groups = list(runs(records))
        for i, group in enumerate(groups):
            if i == len(groups) - 1 and group[0].kind:
                planned.extend(_compact(group, merge))
            elif len(group) > 1:
                planned.extend(merge(group))
            else:
                planned.extend(group)
    keep = 0
    while keep < len(tail) and keep < len(planned) and planned[keep] is records[keep]:
        keep += 1
    return keep, planned[keep:]


def _joins_as_it_is(tail: Sequence[StoredRecord], record: StoredRecord) -> bool:
    """Whether one record appended after the open run ``tail`` leaves every record of it as it is.

    So when there is no open run (a message, or a run's first delta), or when a single delta
    joins the run and does not make `SINGLES` single deltas at its end (the only compaction
    a single delta can set off, since the tail is already compacted): the usual append,
    planned in constant time.
    """
    if not tail:
        return True
    if record.is_row or not _follows(tail[-1], record):
        return False
    return len(tail) < SINGLES - 1 or any(before.is_row for before in tail[1 - SINGLES :])


def kept(tail: Sequence[StoredRecord], batch: Sequence[StoredRecord]) -> int:
    """How many records of the open run ``tail`` an append of ``batch`` leaves as they are; columns suffice."""
    return _plan(tail, batch, _merge_columns)[0]


def plan_append(
    tail: Sequence[StoredRecord],
    batch: Sequence[StoredRecord],
    load: Callable[[Sequence[StoredRecord]], Sequence[StoredRecord]],
) -> tuple[int, list[StoredRecord]]:
    """Seal and compact for an append of ``batch`` after the open run ``tail`` (see `open_run`).

    Returns ``(keep, records)``: keep ``tail[:keep]`` as stored, and replace the rest of the
    tail with ``records``, which end with the batch's own. ``tail`` needs only its join
    columns; ``load`` is asked for the lines of the tail records that are rewritten.
    """
    if len(batch) == 1 and _joins_as_it_is(tail, batch[0]):
        return len(tail), list(batch)
    keep = kept(tail, batch)
    joined, records = _plan([*tail[:keep], *load(tail[keep:])], batch, join)
    # The kept records have no lines: a plan that rewrote one would write a corrupt row.
    if joined != keep:
        raise AssertionError(f"sealing plans disagree: kept {keep} records from the columns, {joined} from the lines")
    return keep, records

"""What an append writes: the entries, offset and bytes that seal the open run; and what a read spans.

Everything here is computed from the loaded index (`persistence.jsonl.index`) and the log's
bytes; the store writes the result (`persistence.jsonl.store`).
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from codec import StoredRecord
from persistence.batch import PreparedBatch
from persistence.jsonl.files import pread, reading
from persistence.jsonl.index import Entry, IndexedRecord, IndexedSession, make_entry, position
from persistence.jsonl.journal import Journal
from persistence.jsonl.recovery import Loader
from persistence.message_index import MessageEntry
from persistence.page_bound import bounded_cuts, floor_sizes, within
from persistence.sealing import MAX_TAIL, SINGLES, open_run, plan_append

__all__ = ["FIRST_LOOK", "bounded", "span", "trailing_run", "write_plan"]

Stored = Callable[[IndexedSession, int, int], list[StoredRecord]]
# Records `trailing_run` builds first: a token stream's open run is compacted at a few more than `SINGLES`.
FIRST_LOOK: Final = 2 * SINGLES


class Records(Protocol):
    def record(self, i: int, line: bytes = b"") -> StoredRecord: ...


def write_plan(
    state: IndexedSession, batch: PreparedBatch, loader: Loader, stored: Stored
) -> tuple[list[Entry], int, bytes, Journal | None]:
    """The entries, log offset and bytes that append a batch, sealing the open run; a journal for a rewrite."""
    count = len(state.starts)
    tail = trailing_run(state, count)
    keep, records = plan_append(
        tail, batch.records, lambda pieces: stored(state, pieces[0].seq, pieces[-1].end) if pieces else []
    )
    at = count - len(tail) + keep
    content, indexed = _lines_block(records)
    block = loader.frame(content)
    if at == count:
        entry = make_entry(state.log_end, state.log_end + len(block), indexed, batch.messages, batch.hidden)
        return [entry], state.log_end, block, None
    # The batch that holds record `at` is split there: its earlier records keep their lines
    # (re-framed under zstd) in an entry of their own, and the rewrite starts at `at`. So a
    # rewrite never carries the records before the open run, and stays as small as the run.
    number = state.blocks[at]
    old = state.entries[number]
    first, messages, hidden = state.first(number)
    old_messages, old_hidden = _messages(state, messages), state.messages.hidden[hidden:]
    kept = [
        IndexedRecord(state.record(i), state.offsets[i], state.lengths[i], bool(state.canonical[i]))
        for i in range(first, at)
    ]
    with reading(loader.log_path(state.directory)) as log:
        if loader.zstd:
            start, kept_block = old.start, b""
            if kept:
                prefix = loader.decompressor().decompressobj().decompress(pread(log, old.start, old.end))
                kept_block = loader.frame(prefix[: state.offsets[at]])
        else:
            start, kept_block = position(state, at), b""
        saved = pread(log, start, state.log_end)
    split = start + len(kept_block)
    if kept:
        entries = [
            make_entry(old.start, split, kept, old_messages, old_hidden, replaces=number),
            make_entry(split, split + len(block), indexed, batch.messages, batch.hidden),
        ]
    else:
        both = ([*old_messages, *batch.messages], [*old_hidden, *batch.hidden])
        entries = [make_entry(split, split + len(block), indexed, *both, replaces=number)]
    written = kept_block + block
    journal = Journal(start, saved, state.index_size, len(written), zlib.crc32(written))
    return entries, start, written, journal


def trailing_run(state: Records, count: int) -> list[StoredRecord]:
    """`open_run` of the last `MAX_TAIL` of ``count`` records, built from a few of the last ones when the run is short.

    Whether two records join depends on them alone (`codec.continues_run`), so the last run
    of a window that starts before the run is the run itself; only a run that fills the
    first window needs the whole one.
    """
    for size in (FIRST_LOOK, MAX_TAIL):
        low = max(0, count - size)
        trailing = [state.record(i) for i in range(low, count)]
        run = open_run(trailing)
        if len(run) < len(trailing) or low == 0:
            return run
    return run


def _lines_block(records: Sequence[StoredRecord]) -> tuple[bytes, list[IndexedRecord]]:
    content = bytearray()
    indexed = []
    for record in records:
        indexed.append(IndexedRecord(record._replace(line=b""), len(content), len(record.line), True))
        content += record.line
        content += b"\n"
    return bytes(content), indexed


def bounded(state: IndexedSession, cuts: list[int], to_seq: int, max_bytes: int) -> list[int]:
    """The cuts whose pages may fit ``max_bytes``, from the index alone (`persistence.page_bound`).

    A line that is not canonical is re-encoded when read, so its length vouches for nothing.
    """
    first = max(0, bisect.bisect_right(state.starts, cuts[-1]) - 1)
    last = bisect.bisect_left(state.starts, to_seq)
    if within(state.lengths[first:last], max_bytes):
        return cuts
    records = [state.record(i) for i in range(first, last)]
    sizes = [state.lengths[i] if state.canonical[i] else 0 for i in range(first, last)]
    return bounded_cuts(cuts, to_seq, records, floor_sizes(records, sizes), max_bytes)


def span(state: IndexedSession, from_seq: int, to_seq: int) -> int:
    """The bytes of a plain log that a read of ``[from_seq, to_seq)`` covers."""
    first = max(0, bisect.bisect_right(state.starts, from_seq) - 1)
    last = bisect.bisect_left(state.starts, to_seq)
    if first >= last:
        return 0
    return position(state, last - 1) + state.lengths[last - 1] - position(state, first)


def _messages(state: IndexedSession, first: int) -> list[MessageEntry]:
    return [
        MessageEntry(seq, group)
        for seq, group in zip(state.messages.seqs[first:], state.messages.groups[first:], strict=True)
    ]

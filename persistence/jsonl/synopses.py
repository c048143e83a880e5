"""A JSONL session's synopsis (`persistence.synopsis`): kept in its `SYNOPSIS_NAME` file, and folded from its log.

The file holds the synopsis as of one head (its ``seq``), behind a CRC-32 of its JSON. Every
append whose batch holds a record that never joins (the only records that can name a title or
report tokens) writes it in the batch's first barrier, with the index entry: so once a batch is
durable, the file holds what it said. What follows the file's ``seq`` in the log is then only
deltas, which change nothing but the last event's time, and the index holds that (the last
record's ``time1``). Appends of deltas alone, the token stream, never write it.

The file is trusted when its checksum holds and its ``seq`` is at most the head. A file ahead
of the head is from a batch a crash cut (or a failed append undid), and one torn mid-write
fails its checksum: either way the synopsis is folded from the log instead, as for a log placed
by hand (no file), or one another tool added lines to (a record after ``seq`` that is no delta).
A loaded session keeps its synopsis once known (`IndexedSession.synopsis`), and appends move it.
"""

from __future__ import annotations

import bisect
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Final, NamedTuple

import msgspec

from codec import StoredRecord
from codec.stored import OTHER
from persistence.base import events_in
from persistence.jsonl.index import IndexedSession
from persistence.synopsis import EMPTY, Synopsis, synopsis_of

__all__ = ["SYNOPSIS_NAME", "Kept", "of_state", "read_kept", "write_kept"]

SYNOPSIS_NAME: Final = "synopsis"
_CHECK: Final = 8


class _Stored(msgspec.Struct, frozen=True):
    seq: int
    title: str | None
    lastEventAt: int | None
    inputTokens: int
    outputTokens: int


_DECODE: Final = msgspec.json.Decoder(_Stored)


class Kept(NamedTuple):
    """The synopsis as of the head ``seq``."""

    seq: int
    synopsis: Synopsis


def _encoded(kept: Kept) -> bytes:
    s = kept.synopsis
    body = msgspec.json.encode(_Stored(kept.seq, s.title, s.last_event_at, s.input_tokens, s.output_tokens))
    return b"%08x " % zlib.crc32(body) + body


def read_kept(directory: Path) -> Kept | None:
    """The session's kept synopsis, or ``None`` when it has no file or the file is torn."""
    try:
        data = (directory / SYNOPSIS_NAME).read_bytes()
    except FileNotFoundError:
        return None
    check, body = data[:_CHECK], data[_CHECK + 1 :]
    try:
        if int(check, 16) != zlib.crc32(body):
            return None
        found = _DECODE.decode(body)
    except (ValueError, msgspec.DecodeError):
        return None
    return Kept(found.seq, Synopsis(found.title, found.lastEventAt, found.inputTokens, found.outputTokens))


def write_kept(directory: Path, kept: Kept) -> int:
    """Write the file in place, unsynced: the open descriptor, which the append's barrier syncs and closes."""
    data = _encoded(kept)
    fd = os.open(directory / SYNOPSIS_NAME, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        written = 0
        while written < len(data):
            written += os.pwrite(fd, data[written:], written)
        os.ftruncate(fd, len(data))
    except BaseException:
        os.close(fd)
        raise
    return fd


def of_state(state: IndexedSession, stored: Callable[[IndexedSession, int, int], list[StoredRecord]]) -> Synopsis:
    """The synopsis of a session whose lock the caller holds: kept, or the file's, or folded from the log.

    ``stored`` reads records from the state (`persistence.jsonl.reads.Reads.stored`). What it
    finds is kept in the state.
    """
    if state.synopsis is not None:
        return state.synopsis
    head = state.head
    kept = read_kept(state.directory)
    if kept is None or kept.seq > head:
        kept = Kept(-1, EMPTY)
    # The first record that starts after the file's head.
    first = bisect.bisect_right(state.starts, kept.seq)
    if kept.seq == head:
        found = kept.synopsis
    elif OTHER not in state.kinds[first:]:
        # Only deltas since: the last event's time is the last record's.
        found = msgspec.structs.replace(kept.synopsis, last_event_at=state.time1s[-1])
    else:
        found = synopsis_of([events_in(stored(state, kept.seq + 1, head + 1), kept.seq + 1, head + 1)], kept.synopsis)
    state.synopsis = found
    return found

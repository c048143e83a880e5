"""The sidecar index of a JSONL session log, and the session state loaded from it.

The index file is a JSON head line, then one binary entry per append batch:
``[u32 length][u32 crc32][msgpack Entry]``. An entry holds the batch's byte span in the log
and columns of little-endian int64s (first seq, member count, offset and length of each
record's line, and the join columns of `codec.StoredRecord`), so a session loads with one
bulk copy per column, whatever its length. The index only grows: an append that seals
the open run rewrites the log from an earlier batch on, and its entry says which entries
it replaces. The log always wins: a missing, older or garbled index is rebuilt from the log.
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final, NamedTuple

import msgspec

from codec import SessionHeader, StoredRecord
from persistence.base import SessionInfo
from persistence.errors import SessionNotFoundError
from persistence.group_commit import unavailable
from persistence.jsonl.layout import INDEX_NAME, closed_at, touched_at, with_closed
from persistence.message_index import HiddenRange, MessageEntry, MessageIndex
from persistence.synopsis import Synopsis

__all__ = [
    "INDEX_VERSION",
    "TAIL_WINDOW",
    "Entry",
    "IndexHead",
    "IndexedRecord",
    "IndexedSession",
    "block_ranges",
    "index_frame",
    "index_fresh",
    "index_inode",
    "last_seq",
    "make_entry",
    "position",
    "read_index",
    "read_last_entry",
    "windows",
]

INDEX_VERSION: Final = 3
READ_WINDOW: Final = 1 << 20
TAIL_WINDOW: Final = 64 * 1024


class IndexHead(msgspec.Struct, frozen=True):
    """The index's JSON first line: its version, the log's compression, and where the log's header ends."""

    version: int
    compression: str
    headerEnd: int


class Entry(msgspec.Struct, frozen=True, array_like=True):
    """One batch: its byte span in the log, and columns of little-endian int64s.

    Per record: first seq, member count, offset and length of its line within the batch,
    a byte that is 1 when the line is canonical JSON, and the join columns (kind byte,
    key, first and last member time). Columns load without a Python loop, so opening a
    long session costs little more than opening a short one. ``replaces`` is -1, or the
    number of the first earlier entry this one replaces: it starts where that one started.
    """

    start: int
    end: int
    seqs: bytes
    members: bytes
    offsets: bytes
    lengths: bytes
    canonical: bytes
    message_seqs: bytes
    message_groups: bytes
    hidden: list[tuple[int, int, int]]
    kinds: bytes
    keys: list[bytes]
    time0s: bytes
    time1s: bytes
    replaces: int = -1


def _column(values: Iterable[int]) -> bytes:
    packed = array("q", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _extend(target: array[int], data: bytes) -> None:
    column = array("q")
    column.frombytes(data)
    if sys.byteorder == "big":
        column.byteswap()
    target.extend(column)


class IndexedRecord(NamedTuple):
    """A record as the index keeps it: its stored form (line not kept) and where its line is."""

    record: StoredRecord
    offset: int
    length: int
    canonical: bool


def make_entry(
    start: int,
    end: int,
    records: Sequence[IndexedRecord],
    messages: Sequence[MessageEntry],
    hidden: Sequence[HiddenRange],
    *,
    replaces: int = -1,
) -> Entry:
    return Entry(
        start,
        end,
        _column(r.record.seq for r in records),
        _column(r.record.members for r in records),
        _column(r.offset for r in records),
        _column(r.length for r in records),
        bytes(1 if r.canonical else 0 for r in records),
        _column(m.seq for m in messages),
        _column(m.group_start for m in messages),
        [(h.at, h.start, h.end) for h in hidden],
        bytes(r.record.kind for r in records),
        [r.record.key for r in records],
        _column(r.record.time0 for r in records),
        _column(r.record.time1 for r in records),
        replaces,
    )


_HEAD: Final = msgspec.json.Decoder(IndexHead)
_ENTRY_ENCODER: Final = msgspec.msgpack.Encoder()
_ENTRY: Final = msgspec.msgpack.Decoder(Entry)
_FRAME_HEAD: Final = struct.Struct("<II")


def index_frame(entry: Entry) -> bytes:
    """An index entry as ``[u32 length][u32 crc32][msgpack]``: binary, so loading costs no base64 or JSON scan."""
    payload = _ENTRY_ENCODER.encode(entry)
    return _FRAME_HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def _head(line: bytes) -> IndexHead | None:
    """The index's head line, if this build reads its version."""
    try:
        head = _HEAD.decode(line)
    except msgspec.DecodeError:
        return None
    return head if head.version == INDEX_VERSION else None


def read_index(path: Path) -> tuple[IndexHead, list[Entry], list[int]] | None:
    """The index head, its complete entries and where each ends; ``None`` if it must be rebuilt."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    head_line, newline, _ = data.partition(b"\n")
    head = _head(head_line) if newline else None
    if head is None:
        return None
    entries, ends = [], []
    position = len(head_line) + 1
    while position + _FRAME_HEAD.size <= len(data):
        length, checksum = _FRAME_HEAD.unpack_from(data, position)
        start, end = position + _FRAME_HEAD.size, position + _FRAME_HEAD.size + length
        if end > len(data):
            break  # a torn final entry
        payload = data[start:end]
        try:
            if zlib.crc32(payload) != checksum:
                raise msgspec.DecodeError("checksum mismatch")
            entries.append(_ENTRY.decode(payload))
        except msgspec.DecodeError:
            if end == len(data):
                break  # the torn final entry, garbled rather than short
            return None
        ends.append(end)
        position = end
    return head, entries, ends


def read_last_entry(path: Path) -> tuple[IndexHead, Entry | None, int] | None:
    """The index head, its last entry (``None`` if it has none) and the index's size, read from its two ends.

    A frame carries its length only at its start, so the last one is found from the end: the
    frame, within the last `TAIL_WINDOW` bytes, that ends exactly at the end of the file and
    whose checksum and entry decode. ``None`` when there is none (an older index, a torn or
    garbled last entry, or one larger than the window): read the index whole then.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        head_line, newline, _ = os.pread(fd, min(size, 4096), 0).partition(b"\n")
        head = _head(head_line) if newline else None
        if head is None:
            return None
        first = len(head_line) + 1
        if size == first:
            return head, None, size
        start = max(first, size - TAIL_WINDOW)
        tail = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    for at in range(len(tail) - _FRAME_HEAD.size, -1, -1):
        length, checksum = _FRAME_HEAD.unpack_from(tail, at)
        if at + _FRAME_HEAD.size + length != len(tail):
            continue
        payload = tail[at + _FRAME_HEAD.size :]
        if zlib.crc32(payload) != checksum:
            continue
        try:
            return head, _ENTRY.decode(payload), size
        except msgspec.DecodeError:
            continue
    return None


def last_seq(entry: Entry) -> int | None:
    """The last seq a batch holds, or ``None`` for a batch without records."""
    if not entry.seqs:
        return None
    start = int.from_bytes(entry.seqs[-8:], "little", signed=True)
    return start + int.from_bytes(entry.members[-8:], "little", signed=True) - 1


class IndexedSession:
    """What an open session knows: header, owner and the index, as loaded from disk.

    ``entries`` are the batches in effect (a replacing entry has dropped the ones it
    replaces); the columns hold one value per record of those batches, in seq order.
    """

    def __init__(self, directory: Path, header: SessionHeader, owner: str, head: IndexHead) -> None:
        self.directory = directory
        self.header = header
        self.owner = owner
        self.index_head = head
        self.index_size = 0
        # The index file's inode: a session deleted and made again has another.
        self.index_ino = -1
        self.log_end = head.headerEnd
        self.entries: list[Entry] = []
        self.starts = array("q")
        self.members = array("q")
        self.blocks = array("q")
        self.offsets = array("q")
        self.lengths = array("q")
        self.canonical = bytearray()
        self.kinds = bytearray()
        self.keys: list[bytes] = []
        self.time0s = array("q")
        self.time1s = array("q")
        self.messages = MessageIndex()
        self.head = -1
        # The session's synopsis once known (`persistence.jsonl.synopses.of_state`); appends move it.
        self.synopsis: Synopsis | None = None
        # Per entry: where its records, messages and hidden ranges begin in the columns.
        self._first: list[tuple[int, int, int]] = []

    def info(self) -> SessionInfo:
        try:
            touched = touched_at(self.directory)  # two stats, as checking the index's size makes one: on the loop
        except FileNotFoundError:
            raise SessionNotFoundError(self.header.id) from None  # deleted by another process meanwhile
        return SessionInfo(self.header, self.owner, self.head, touched)

    def learn_closed(self, at: int | None) -> None:
        """Keep that the session was closed at ``at`` (from `closed_at`), if it was."""
        self.header = with_closed(self.header, at)

    def recheck_closed(self) -> None:
        """Look again whether the session is closed: another process (the CLI, say) may have closed it,
        and a close leaves the index as it was."""
        if self.header.closedAt is msgspec.UNSET:
            self.learn_closed(closed_at(self.directory))

    def add(self, entry: Entry) -> None:
        self.add_all([entry])

    def add_all(self, entries: Sequence[Entry]) -> None:
        """Index many batches at once: one bulk load per column between replacing entries."""
        run: list[Entry] = []
        for entry in entries:
            if entry.replaces >= 0:
                self._load(run)
                run = []
                self._drop_from(entry.replaces)
            run.append(entry)
        self._load(run)

    def _drop_from(self, number: int) -> None:
        if number >= len(self.entries):
            return
        records, messages, hidden = self._first[number]
        del self.entries[number:], self._first[number:]
        for column in (self.starts, self.members, self.blocks, self.offsets, self.lengths, self.time0s, self.time1s):
            del column[records:]
        del self.canonical[records:], self.kinds[records:], self.keys[records:]
        del self.messages.seqs[messages:], self.messages.groups[messages:], self.messages.hidden[hidden:]
        self.head = self.starts[-1] + self.members[-1] - 1 if self.starts else -1

    def _load(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        first_block = len(self.entries)
        records, messages, hidden = len(self.starts), len(self.messages.seqs), len(self.messages.hidden)
        for entry in entries:
            self._first.append((records, messages, hidden))
            records += len(entry.canonical)
            messages += len(entry.message_seqs) // 8
            hidden += len(entry.hidden)
        self.entries.extend(entries)
        _extend(self.starts, b"".join(e.seqs for e in entries))
        _extend(self.messages.seqs, b"".join(e.message_seqs for e in entries))
        self.messages.hidden.extend(HiddenRange(*h) for e in entries for h in e.hidden)
        _extend(self.members, b"".join(e.members for e in entries))
        _extend(self.offsets, b"".join(e.offsets for e in entries))
        _extend(self.lengths, b"".join(e.lengths for e in entries))
        _extend(self.time0s, b"".join(e.time0s for e in entries))
        _extend(self.time1s, b"".join(e.time1s for e in entries))
        self.canonical += b"".join(e.canonical for e in entries)
        self.kinds += b"".join(e.kinds for e in entries)
        for entry in entries:
            self.keys.extend(entry.keys)
        for block, entry in enumerate(entries, start=first_block):
            self.blocks.extend(array("q", [block]) * len(entry.canonical))
        _extend(self.messages.groups, b"".join(e.message_groups for e in entries))
        if self.starts:
            self.head = self.starts[-1] + self.members[-1] - 1
        self.log_end = entries[-1].end

    def first(self, number: int) -> tuple[int, int, int]:
        """Where entry ``number``'s records, messages and hidden ranges begin in the columns."""
        return self._first[number]

    def record(self, i: int, line: bytes = b"") -> StoredRecord:
        """Record ``i`` in stored form; its line is the caller's to read."""
        return StoredRecord(
            self.starts[i], self.members[i], line, self.kinds[i], self.keys[i], self.time0s[i], self.time1s[i]
        )


def block_ranges(state: IndexedSession, first: int, last: int) -> Iterator[tuple[int, int, int]]:
    """``(block, lo, hi)`` for each run of records ``first..last-1`` that share a batch (a zstd frame)."""
    blocks = state.blocks
    lo = first
    for i in range(first + 1, last + 1):
        if i == last or blocks[i] != blocks[lo]:
            yield blocks[lo], lo, i
            lo = i


def position(state: IndexedSession, i: int) -> int:
    return state.entries[state.blocks[i]].start + state.offsets[i]


def windows(state: IndexedSession, first: int, last: int) -> Iterator[tuple[int, int, int]]:
    """``(log offset, lo, hi)`` for reads of at most `READ_WINDOW` bytes (or one record) over a plain log."""
    lo = first
    start = position(state, lo)
    for i in range(first + 1, last + 1):
        if i == last or position(state, i) + state.lengths[i] - start > READ_WINDOW:
            yield start, lo, i
            if i < last:
                lo, start = i, position(state, i)


def index_fresh(state: IndexedSession) -> bool:
    """Whether the session's index is still the file ``state`` was loaded from, at the size it knows.

    The size alone would take a session deleted and made again, at the same index size, for the one kept.
    """
    try:
        # A str path: this runs for every append and read, where pathlib's joins cost more than the stat.
        found = os.stat(os.path.join(state.directory, INDEX_NAME))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise unavailable(exc) from exc
    return found.st_size == state.index_size and found.st_ino == state.index_ino


def index_inode(directory: Path) -> int:
    """The index file's inode, or -1 when it is gone."""
    try:
        return os.stat(os.path.join(directory, INDEX_NAME)).st_ino
    except FileNotFoundError:
        return -1
    except OSError as exc:
        raise unavailable(exc) from exc

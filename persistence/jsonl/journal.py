"""The rollback journal of a JSONL rewrite: sealing never loses a committed record.

An append that seals the open run rewrites the log from the start of an earlier batch. It
first saves, and fsyncs, a journal: the log bytes it will overwrite, the index's size, the
new bytes' length and CRC, and the index entries it appends. Then it appends those entries
and overwrites the log, and fsyncs both at once; then it clears the journal, and fsyncs
that. On open, a journal left behind is settled before anything else is read:

* a journal that is torn or garbled was never complete, so nothing was overwritten yet;
* a journal is stale when the index holds the rewrite's own entries and goes on past
  them: appends came after the rewrite ended, and only its clearing was lost (its fsync
  failed, then the power went), so it is cleared and not applied;
* if the index holds the rewrite's entries and the log its new bytes, in full, the rewrite
  finished: both are made durable (old bytes past the new end are cut);
* otherwise the old log bytes are written back and the index cut to its old size. An index
  torn in any way, short or garbled, lands here: its entries and the log's bytes were
  written together, so the log may hold any part of the rewrite.

So the store is what it was before the append, or what it is after it, never between.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Final

import msgspec

from persistence.jsonl.files import fsync_path, pread_path, truncate, write_at, write_file, write_unsynced

__all__ = [
    "Clearing",
    "JOURNAL_NAME",
    "Journal",
    "cleared",
    "encoded",
    "journal_size",
    "pending",
    "ready",
    "settle",
    "undo",
    "written",
]

JOURNAL_NAME: Final = "journal"
_HEAD: Final = struct.Struct("<II")


class Journal(msgspec.Struct, frozen=True, array_like=True):
    """What a rewrite needs to be undone: where it starts, the bytes it overwrites, and how to recognise it done.

    ``entries`` are the index frames the rewrite appends at ``index_size``, to recognise a
    stale journal (empty in a journal written before they were recorded: never stale then).
    """

    log_at: int
    old: bytes
    index_size: int
    new_length: int
    new_crc: int
    entries: bytes = b""


_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(Journal)


def ready(directory: Path) -> bool:
    """Make sure the journal file exists, durably; ``True`` if it had to be created."""
    path = directory / JOURNAL_NAME
    if path.exists():
        return False
    write_file(path, b"")
    fsync_path(directory)
    return True


def encoded(journal: Journal) -> bytes:
    """The journal file's content: a length and CRC-32 head, then the journal."""
    payload = _ENCODER.encode(journal)
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def written(directory: Path, journal: Journal) -> int:
    """Write ``journal`` (the file exists, see `ready`, and is empty: none is `pending`); the open descriptor to sync.

    Were the file not empty, what lies past the journal would not be read: its head gives its length.
    """
    return write_unsynced(directory / JOURNAL_NAME, 0, encoded(journal), size=0)


def cleared(directory: Path) -> int:
    """Empty the journal (the rewrite is done) and return the open descriptor for the caller to sync."""
    # Opening it truncated: one call, where a write of nothing would stat the file and then cut it.
    return os.open(directory / JOURNAL_NAME, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)


def _read(path: Path) -> Journal | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < _HEAD.size:
        return None
    length, checksum = _HEAD.unpack_from(data)
    payload = data[_HEAD.size : _HEAD.size + length]
    if len(payload) != length or zlib.crc32(payload) != checksum:
        return None
    try:
        return _DECODER.decode(payload)
    except msgspec.DecodeError:
        return None


def pending(directory: Path) -> bool:
    """Whether a rewrite's journal is left over: a crash came before it was cleared."""
    return bool(journal_size(directory))


def journal_size(directory: Path) -> int | None:
    """The journal file's size (more than 0 while it is `pending`), or ``None`` while there is no file (see `ready`)."""
    try:
        return os.stat(os.path.join(directory, JOURNAL_NAME)).st_size
    except FileNotFoundError:
        return None


def settle(directory: Path, log_path: Path, index_path: Path) -> bool:
    """Finish or undo a rewrite a crash interrupted; ``True`` if the old bytes were put back."""
    return _settle(directory, log_path, index_path, trust_done=True)


def undo(directory: Path, log_path: Path, index_path: Path) -> bool:
    """`settle` a rewrite that failed in this process: undone even if its files look done; ``True`` if undone.

    A write whose fsync failed can look whole in the page cache and still be lost to a power loss.
    """
    return _settle(directory, log_path, index_path, trust_done=False)


def _settle(directory: Path, log_path: Path, index_path: Path, *, trust_done: bool) -> bool:
    path = directory / JOURNAL_NAME
    if not pending(directory):
        return False
    journal = _read(path)
    restored = False
    if journal is not None and not _stale(index_path, journal):
        if trust_done and _done(log_path, index_path, journal):
            # Found in the page cache, perhaps, by a process that came after a crash: made durable before
            # the journal goes. The crash may also have come before the old bytes past the new end were cut.
            fsync_path(index_path)
            truncate(log_path, journal.log_at + journal.new_length)
        else:
            write_at(log_path, journal.log_at, journal.old)
            truncate(index_path, journal.index_size)
            restored = True
    truncate(path, 0)
    return restored


def _after(index_path: Path, journal: Journal) -> bytes | None:
    """The index past its old size, one byte longer than the rewrite's entries; ``None`` without an index."""
    try:
        return pread_path(index_path, journal.index_size, journal.index_size + len(journal.entries) + 1)
    except FileNotFoundError:
        return None


def _stale(index_path: Path, journal: Journal) -> bool:
    if not journal.entries:
        return False
    # Only an index that holds the entries whole and goes on past them was appended to later.
    after = _after(index_path, journal)
    return after is not None and len(after) > len(journal.entries) and after.startswith(journal.entries)


def _done(log_path: Path, index_path: Path, journal: Journal) -> bool:
    # The entries and the bytes share one barrier, so either may have reached the disk without the other.
    # A journal without entries comes from a version that made the entries durable first; without an
    # index, the log wins, as it does on every open.
    after = _after(index_path, journal) if journal.entries else None
    if after is not None and after != journal.entries:
        return False
    end = journal.log_at + journal.new_length
    if os.stat(log_path).st_size < end:
        return False
    return zlib.crc32(pread_path(log_path, journal.log_at, end)) == journal.new_crc


class Clearing:
    """The step that clears a rewrite's journal, which remembers that it was reached."""

    __slots__ = ("directory", "started")

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started = False

    def __call__(self) -> int:
        self.started = True
        return cleared(self.directory)

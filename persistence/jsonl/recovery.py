"""Loading a session from its files, and recovering what a crash or another tool left.

An append writes its index entry first and fsyncs it, then writes the batch to the log
and fsyncs that. So on open, a last index entry that reaches past the end of the log
marks a torn batch, which is cut whole; a committed batch is never dropped. Bytes after
the last indexed batch are scanned and kept, and a missing or unreadable index is rebuilt
from the log: the log always wins.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final

import zstandard

from codec import (
    CodecError,
    Event,
    SessionHeader,
    decode_json,
    encode,
    expand_records,
    incarnation_of,
    read_header,
    record_from_value,
    stored_record,
)
from persistence._zstd import ZstdContexts
from persistence.errors import CorruptLogError, SessionNotFoundError
from persistence.jsonl.files import read_head, truncate, write_atomic
from persistence.jsonl.index import (
    INDEX_VERSION,
    IndexedRecord,
    IndexedSession,
    IndexHead,
    index_frame,
    index_inode,
    make_entry,
    read_index,
)
from persistence.jsonl.journal import settle, undo
from persistence.jsonl.layout import INDEX_NAME, owner_of
from persistence.message_index import index_entries

__all__ = ["Loader"]

logger = logging.getLogger(__name__)

_FEED: Final = 64 * 1024


class Loader:
    """Loads sessions of one root: its compression mode, zstd contexts and log name."""

    def __init__(self, zstd: bool, contexts: ZstdContexts, log_name: str) -> None:
        self._zstd = zstd
        self._contexts = contexts
        self._log_name = log_name

    @property
    def zstd(self) -> bool:
        """Whether the root's logs are zstd frames."""
        return self._zstd

    def log_path(self, directory: Path) -> Path:
        return directory / self._log_name

    def decompressor(self) -> zstandard.ZstdDecompressor:
        return self._contexts.decompressor()

    def load(self, directory: Path, session_id: str, *, distrust: bool = False) -> IndexedSession:
        """The session's state from its files, a crashed rewrite settled first (undone, with ``distrust``)."""
        log_path = directory / self._log_name
        settling = undo if distrust else settle
        try:
            if settling(directory, log_path, directory / INDEX_NAME):
                logger.warning("session %r: undid a sealing rewrite that a crash interrupted", session_id)
            log_size = log_path.stat().st_size
            first = read_head(log_path, self._zstd)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        try:
            header_block = self.unframe_first(first)
            header_line, newline, _ = header_block.partition(b"\n")
            if not newline:
                raise CorruptLogError(f"{log_path}: the header line is incomplete")
            header = read_header(header_line)
        except (CodecError, zstandard.ZstdError) as exc:
            raise CorruptLogError(f"{log_path}: unreadable header: {exc}") from exc
        if header.id != session_id:
            raise CorruptLogError(f"{log_path}: header names session {header.id!r}, not {session_id!r}")
        owner = owner_of(directory)
        head_end = self._header_end(first, header_block)
        # Taken before the index is read: a file put in its place later is then never taken for this one.
        ino = index_inode(directory)
        loaded = read_index(directory / INDEX_NAME)
        if loaded is None or loaded[0].headerEnd != head_end:
            return self._rebuild(directory, header, owner, head_end, log_size)
        head, entries, sizes = loaded
        state = IndexedSession(directory, header, owner, head)
        state.index_ino = ino
        # Only the last batch can be torn: its entry is written before its bytes.
        if entries and entries[-1].end > log_size and entries[-1].start <= log_size:
            torn = entries.pop()
            sizes.pop()
            truncate(log_path, torn.start)
            log_size = torn.start
        index_size = sizes[-1] if sizes else len(encode(head)) + 1
        if (directory / INDEX_NAME).stat().st_size != index_size:
            truncate(directory / INDEX_NAME, index_size)
        if entries and entries[-1].end > log_size:
            raise CorruptLogError(
                f"{log_path}: committed batch at bytes {entries[-1].start}..{entries[-1].end} is missing from the log"
            )
        state.add_all(entries)
        state.index_size = index_size
        if log_size > state.log_end:
            self._recover_tail(state, log_path, log_size)
        return state

    def _header_end(self, first: bytes, header_block: bytes) -> int:
        if not self._zstd:
            return header_block.index(b"\n") + 1
        frame = self._contexts.decompressor().decompressobj()
        frame.decompress(first)
        return len(first) - len(frame.unused_data)

    def _rebuild(
        self, directory: Path, header: SessionHeader, owner: str, header_end: int, log_size: int
    ) -> IndexedSession:
        head = IndexHead(INDEX_VERSION, "zstd" if self._zstd else "none", header_end)
        write_atomic(directory / INDEX_NAME, encode(head) + b"\n")
        state = IndexedSession(directory, header, owner, head)
        state.index_ino = index_inode(directory)
        state.index_size = len(encode(head)) + 1
        if log_size > header_end:
            self._recover_tail(state, directory / self._log_name, log_size)
        return state

    def _recover_tail(self, state: IndexedSession, log_path: Path, log_size: int) -> None:
        """Index the complete records after ``state.log_end``; cut an incomplete final line or frame."""
        base = state.log_end
        with open(log_path, "rb") as log:
            log.seek(base)
            data = log.read(log_size - base)
        blocks = self._split_frames(data) if self._zstd else [(0, len(data), data)]
        for start, end, content in blocks:
            records, events, used = self._scan(content, state.head + 1, log_path)
            if self._zstd and used != len(content):
                raise CorruptLogError(f"{log_path}: frame at byte {base + start} ends inside a line")
            if records:
                messages, hidden = index_entries(events)
                entry = make_entry(base + start, base + (end if self._zstd else used), records, messages, hidden)
                line = index_frame(entry)
                with open(state.directory / INDEX_NAME, "ab") as index:
                    index.write(line)
                    index.flush()
                    os.fsync(index.fileno())
                state.add(entry)
                state.index_size += len(line)
        if state.log_end < log_size:
            truncate(log_path, state.log_end)

    def _scan(self, content: bytes, seq: int, log_path: Path) -> tuple[list[IndexedRecord], list[Event], int]:
        records: list[IndexedRecord] = []
        events: list[Event] = []
        position = 0
        while True:
            newline = content.find(b"\n", position)
            if newline < 0:
                return records, events, position
            line = content[position:newline]
            try:
                record = record_from_value(decode_json(line), seq)
            except CodecError as exc:
                raise CorruptLogError(f"{log_path}: committed record for seq {seq} is unreadable: {exc}") from exc
            canonical = encode(record)
            stored = stored_record(record, canonical)
            if stored.seq != seq:
                raise CorruptLogError(f"{log_path}: seq gap in the committed log: expected {seq}, found {stored.seq}")
            records.append(IndexedRecord(stored._replace(line=b""), position, len(line), canonical == line))
            events.extend(expand_records([record]))
            seq += stored.members
            position = newline + 1

    def _split_frames(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """The complete zstd frames at the start of ``data``: each one's span and content."""
        frames = []
        position = 0
        view = memoryview(data)
        while position < len(data):
            frame = self._contexts.decompressor().decompressobj()
            content: list[bytes] = []
            end = position
            try:
                # Fed a slice at a time, so what is left over is at most a slice, never the rest of the log.
                while not frame.eof and end < len(data):
                    piece = view[end : end + _FEED]
                    content.append(frame.decompress(piece))
                    end += len(piece) - len(frame.unused_data)
            except zstandard.ZstdError:
                break
            if not frame.eof:
                break
            frames.append((position, end, b"".join(content)))
            position = end
        return frames

    def frame(self, content: bytes) -> bytes:
        if not self._zstd:
            return content
        return self._contexts.compress(content)

    def unframe_first(self, data: bytes) -> bytes:
        if not self._zstd:
            return data
        return self._contexts.decompressor().decompressobj().decompress(data)

    def peek_header(self, directory: Path) -> SessionHeader | None:
        # A directory without a readable log holds no session; any other OSError is the store's, and
        # must not be cached as "no session here", or the session would vanish from listings for good.
        try:
            data = read_head(directory / self._log_name, self._zstd)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        try:
            line = self.unframe_first(data).split(b"\n", 1)[0]
            return read_header(line)
        except (CodecError, zstandard.ZstdError):
            return None

    def incarnation_in(self, directory: Path) -> str | None:
        """The incarnation the directory's header names, or ``None`` when it holds no readable header."""
        header = self.peek_header(directory)
        return None if header is None else incarnation_of(header)

    def same_life(self, state: IndexedSession) -> bool:
        """Whether ``state`` is of the life its directory holds now: the header on disk names its incarnation.

        What a process keeps may be of an earlier life of the id, deleted and created again by
        another process since, with an index of the same size.
        """
        return self.incarnation_in(state.directory) == incarnation_of(state.header)

"""The JSONL file store: one directory per session, in the deepseek-harness line format.

Layout under the root::

    .history-store.json          format version and compression mode of the root
    <encoded id>/session.jsonl   header line, then one storage record per line
                                 (session.jsonl.zst in zstd mode: one checksummed frame per batch)
    <encoded id>/index.jsonl     sidecar index: a JSON head line, then one binary entry per batch
    <encoded id>/owner           the owner principal

An append writes its index entry first and fsyncs it, then writes the batch to the log
and fsyncs that. So on open, a last index entry that reaches past the end of the log
marks a torn batch, which is cut whole; a committed batch is never dropped. Bytes after
the last indexed batch (written by another tool) are scanned and kept, and a missing or
unreadable index is rebuilt from the log: the log always wins.

A log placed in a root by hand (a recorded fixture, say) is served as it is: lines that
omit ``seq``/``time`` get them rebuilt when read, and its owner is `DEFAULT_OWNER`.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import functools
import os
import struct
import sys
import uuid
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread
import msgspec
import zstandard

from codec import (
    CodecError,
    Event,
    SessionHeader,
    decode_json,
    encode,
    expand_records,
    member_count,
    read_header,
    record_from_value,
)
from persistence.base import DEFAULT_OWNER, AppendResult, HistoryStore, SessionInfo, check_batch, events_in, is_resend
from persistence.errors import (
    CorruptLogError,
    InvalidSessionIdError,
    SchemaVersionError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
)
from persistence.message_index import HiddenRange, MessageEntry, MessageIndex, index_entries
from persistence.stored import StoredRecord, prepare_batch

__all__ = ["FORMAT_VERSION", "JsonlStore", "encode_segment"]

FORMAT_VERSION: Final = 1
INDEX_VERSION: Final = 2
MODES: Final = ("none", "zstd")
ROOT_MARKER: Final = ".history-store.json"
INDEX_NAME: Final = "index.jsonl"
OWNER_NAME: Final = "owner"
LOCK_NAME: Final = "lock"
_MAX_DIR_NAME: Final = 240
_READ_WINDOW: Final = 1 << 20
_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
T = TypeVar("T")


def encode_segment(session_id: str) -> str:
    """A directory name for ``session_id``: safe characters kept, every other UTF-16 unit as ``~XXXX``.

    Dots are escaped too, so no id can name ``.``, ``..`` or a hidden entry of the root.
    """
    out = []
    for char in session_id:
        if char in _SAFE:
            out.append(char)
        else:
            data = char.encode("utf-16-be")
            out.extend(f"~{int.from_bytes(data[i : i + 2], 'big'):04X}" for i in range(0, len(data), 2))
    name = "".join(out)
    if not name or len(name) > _MAX_DIR_NAME:
        raise InvalidSessionIdError(f"session id {session_id[:40]!r} is empty or too long for a file store")
    return name


class _RootMarker(msgspec.Struct, frozen=True):
    format: int
    compression: str


class _IndexHead(msgspec.Struct, frozen=True):
    version: int
    compression: str
    headerEnd: int


class _Entry(msgspec.Struct, frozen=True, array_like=True):
    """One batch: its byte span in the log, and columns of little-endian int64s.

    Per record: first seq, member count, offset and length of its line within the batch,
    and a byte that is 1 when the line is canonical JSON. Columns load without a Python
    loop, so opening a long session costs little more than opening a short one.
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


def _entry(
    start: int,
    end: int,
    records: Sequence[tuple[int, int, int, int, bool]],
    messages: Sequence[MessageEntry],
    hidden: Sequence[HiddenRange],
) -> _Entry:
    return _Entry(
        start,
        end,
        _column(r[0] for r in records),
        _column(r[1] for r in records),
        _column(r[2] for r in records),
        _column(r[3] for r in records),
        bytes(1 if r[4] else 0 for r in records),
        _column(m.seq for m in messages),
        _column(m.group_start for m in messages),
        [(h.at, h.start, h.end) for h in hidden],
    )


_HEAD: Final = msgspec.json.Decoder(_IndexHead)
_ENTRY_ENCODER: Final = msgspec.msgpack.Encoder()
_ENTRY: Final = msgspec.msgpack.Decoder(_Entry)
_FRAME_HEAD: Final = struct.Struct("<II")


def _index_frame(entry: _Entry) -> bytes:
    """An index entry as ``[u32 length][u32 crc32][msgpack]``: binary, so loading costs no base64 or JSON scan."""
    payload = _ENTRY_ENCODER.encode(entry)
    return _FRAME_HEAD.pack(len(payload), zlib.crc32(payload)) + payload


_MARKER: Final = msgspec.json.Decoder(_RootMarker)


class _State:
    """What an open session knows: header, owner and the index, as loaded from disk."""

    def __init__(self, directory: Path, header: SessionHeader, owner: str, head: _IndexHead) -> None:
        self.directory = directory
        self.header = header
        self.owner = owner
        self.index_head = head
        self.index_size = 0
        self.log_end = head.headerEnd
        self.entries: list[_Entry] = []
        self.starts = array("q")
        self.members = array("q")
        self.blocks = array("q")
        self.offsets = array("q")
        self.lengths = array("q")
        self.canonical = bytearray()
        self.messages = MessageIndex()
        self.head = -1

    def add(self, entry: _Entry) -> None:
        self.add_all([entry])

    def add_all(self, entries: Sequence[_Entry]) -> None:
        """Index many batches at once: one bulk load per column, whatever the number of batches."""
        if not entries:
            return
        first_block = len(self.entries)
        self.entries.extend(entries)
        before = len(self.starts)
        _extend(self.starts, b"".join(e.seqs for e in entries))
        _extend(self.members, b"".join(e.members for e in entries))
        _extend(self.offsets, b"".join(e.offsets for e in entries))
        _extend(self.lengths, b"".join(e.lengths for e in entries))
        self.canonical += b"".join(e.canonical for e in entries)
        for block, entry in enumerate(entries, start=first_block):
            self.blocks.extend(array("q", [block]) * len(entry.canonical))
        if len(self.starts) > before:
            self.head = self.starts[-1] + self.members[-1] - 1
        _extend(self.messages.seqs, b"".join(e.message_seqs for e in entries))
        _extend(self.messages.groups, b"".join(e.message_groups for e in entries))
        self.messages.hidden.extend(HiddenRange(*h) for e in entries for h in e.hidden)
        self.log_end = entries[-1].end


class JsonlStore(HistoryStore):
    """Sessions as JSONL logs under one root directory. Open it with `JsonlStore.open`."""

    def __init__(self, root: Path, compression: str) -> None:
        self._root = root
        self._zstd = compression == "zstd"
        self._log_name = "session.jsonl.zst" if self._zstd else "session.jsonl"
        self._states: dict[str, _State] = {}
        self._headers: dict[str, SessionHeader | None] = {}
        self._locks: dict[str, anyio.Lock] = {}

    @classmethod
    async def open(cls, root: str | Path, *, compression: str = "none") -> JsonlStore:
        """Open (creating if needed) a root; a root keeps the compression mode it was created with."""
        if compression not in MODES:
            raise StoreError(f"unknown JSONL compression {compression!r}; expected one of {', '.join(MODES)}")
        return await anyio.to_thread.run_sync(cls._open_sync, Path(root), compression)

    @classmethod
    def _open_sync(cls, root: Path, compression: str) -> JsonlStore:
        root.mkdir(parents=True, exist_ok=True)
        marker = root / ROOT_MARKER
        if marker.exists():
            try:
                found = _MARKER.decode(marker.read_bytes())
            except msgspec.DecodeError as exc:
                raise StoreError(f"{marker} is unreadable: {exc}") from exc
            if found.format != FORMAT_VERSION:
                raise SchemaVersionError(
                    f"{root} has JSONL store format {found.format}; this build reads {FORMAT_VERSION}"
                )
            if found.compression != compression:
                raise StoreError(f"{root} holds compression={found.compression} logs, not compression={compression}")
        else:
            _write_atomic(marker, encode(_RootMarker(FORMAT_VERSION, compression)))
        return cls(root, compression)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args))

    def _directory(self, session_id: str) -> Path:
        return self._root / encode_segment(session_id)

    # Sessions.

    async def create_session(self, header: SessionHeader, *, owner: str = DEFAULT_OWNER) -> SessionInfo:
        return await self._run(self._create_sync, header, owner)

    def _create_sync(self, header: SessionHeader, owner: str) -> SessionInfo:
        directory = self._directory(header.id)
        if directory.exists():
            raise SessionExistsError(header.id)
        staging = self._root / f".tmp-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            line = encode(header) + b"\n"
            block = self._frame(line)
            _write_file(staging / self._log_name, block)
            head = _IndexHead(INDEX_VERSION, "zstd" if self._zstd else "none", len(block))
            _write_file(staging / INDEX_NAME, encode(head) + b"\n")
            _write_file(staging / OWNER_NAME, owner.encode())
            _fsync_dir(staging)
            try:
                os.rename(staging, directory)
            except OSError as exc:
                raise SessionExistsError(header.id) from exc
            _fsync_dir(self._root)
        finally:
            if staging.exists():
                for child in staging.iterdir():
                    child.unlink()
                staging.rmdir()
        return SessionInfo(header, owner, -1)

    async def get_session(self, session_id: str) -> SessionInfo:
        state = await self._run(self._state, session_id)
        return SessionInfo(state.header, state.owner, state.head)

    async def children(self, parent_id: str) -> list[SessionHeader]:
        return await self._run(self._children_sync, parent_id)

    def _children_sync(self, parent_id: str) -> list[SessionHeader]:
        found = []
        for entry in os.scandir(self._root):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            if entry.name not in self._headers:
                self._headers[entry.name] = self._peek_header(Path(entry.path))
            header = self._headers[entry.name]
            if header is not None and header.parentSession == parent_id and header.origin == "subagent":
                found.append(header)
        return sorted(found, key=lambda header: header.id)

    def _peek_header(self, directory: Path) -> SessionHeader | None:
        try:
            data = _read_head(directory / self._log_name, self._zstd)
            line = self._unframe_first(data).split(b"\n", 1)[0]
            return read_header(line)
        except (OSError, CodecError, zstandard.ZstdError):
            return None

    # Loading and recovery.

    def _state(self, session_id: str, *, locked: bool = False) -> _State:
        """The session's state, loaded on first use and reloaded when another writer grew the index.

        ``locked`` says the caller already holds the session's lock (a second flock would wait on it).
        """
        state = self._states.get(session_id)
        directory = self._directory(session_id)
        if state is not None:
            try:
                size = os.stat(directory / INDEX_NAME).st_size
            except FileNotFoundError:
                size = -1
            if size == state.index_size:
                return state
        if locked:
            state = self._load(directory, session_id)
        else:
            with _locked(directory, session_id):
                state = self._load(directory, session_id)
        self._states[session_id] = state
        return state

    def _load(self, directory: Path, session_id: str) -> _State:
        log_path = directory / self._log_name
        try:
            log_size = log_path.stat().st_size
            first = _read_head(log_path, self._zstd)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        try:
            header_block = self._unframe_first(first)
            header_line, newline, _ = header_block.partition(b"\n")
            if not newline:
                raise CorruptLogError(f"{log_path}: the header line is incomplete")
            header = read_header(header_line)
        except (CodecError, zstandard.ZstdError) as exc:
            raise CorruptLogError(f"{log_path}: unreadable header: {exc}") from exc
        if header.id != session_id:
            raise CorruptLogError(f"{log_path}: header names session {header.id!r}, not {session_id!r}")
        try:
            owner = (directory / OWNER_NAME).read_text()
        except FileNotFoundError:
            owner = DEFAULT_OWNER
        head_end = self._header_end(first, header_block)
        loaded = self._read_index(directory / INDEX_NAME)
        if loaded is None or loaded[0].headerEnd != head_end:
            return self._rebuild(directory, header, owner, head_end, log_size)
        head, entries, sizes = loaded
        state = _State(directory, header, owner, head)
        # Only the last batch can be torn: its entry is written before its bytes.
        if entries and entries[-1].end > log_size and entries[-1].start <= log_size:
            torn = entries.pop()
            sizes.pop()
            _truncate(log_path, torn.start)
            log_size = torn.start
        index_size = sizes[-1] if sizes else len(encode(head)) + 1
        if (directory / INDEX_NAME).stat().st_size != index_size:
            _truncate(directory / INDEX_NAME, index_size)
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
        frame = zstandard.ZstdDecompressor().decompressobj()
        frame.decompress(first)
        return len(first) - len(frame.unused_data)

    @staticmethod
    def _read_index(path: Path) -> tuple[_IndexHead, list[_Entry], list[int]] | None:
        """The index head, its complete entries and where each ends; ``None`` if it must be rebuilt."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        head_line, newline, _ = data.partition(b"\n")
        if not newline:
            return None
        try:
            head = _HEAD.decode(head_line)
        except msgspec.DecodeError:
            return None
        if head.version != INDEX_VERSION:
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

    def _rebuild(self, directory: Path, header: SessionHeader, owner: str, header_end: int, log_size: int) -> _State:
        head = _IndexHead(INDEX_VERSION, "zstd" if self._zstd else "none", header_end)
        _write_atomic(directory / INDEX_NAME, encode(head) + b"\n")
        state = _State(directory, header, owner, head)
        state.index_size = len(encode(head)) + 1
        if log_size > header_end:
            self._recover_tail(state, directory / self._log_name, log_size)
        return state

    def _recover_tail(self, state: _State, log_path: Path, log_size: int) -> None:
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
                entry = _entry(base + start, base + (end if self._zstd else used), records, messages, hidden)
                line = _index_frame(entry)
                with open(state.directory / INDEX_NAME, "ab") as index:
                    index.write(line)
                    index.flush()
                    os.fsync(index.fileno())
                state.add(entry)
                state.index_size += len(line)
        if state.log_end < log_size:
            _truncate(log_path, state.log_end)

    def _scan(
        self, content: bytes, seq: int, log_path: Path
    ) -> tuple[list[tuple[int, int, int, int, bool]], list[Event], int]:
        records: list[tuple[int, int, int, int, bool]] = []
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
            first = record.seq if type(record) is Event else record.seq0  # type: ignore[union-attr]
            if first != seq:
                raise CorruptLogError(f"{log_path}: seq gap in the committed log: expected {seq}, found {first}")
            members = 1 if type(record) is Event else member_count(record)  # type: ignore[arg-type]
            records.append((seq, members, position, len(line), encode(record) == line))
            events.extend(expand_records([record]))
            seq += members
            position = newline + 1

    @staticmethod
    def _split_frames(data: bytes) -> list[tuple[int, int, bytes]]:
        frames = []
        position = 0
        while position < len(data):
            frame = zstandard.ZstdDecompressor().decompressobj()
            try:
                content = frame.decompress(data[position:])
            except zstandard.ZstdError:
                break
            if not frame.eof:
                break
            end = len(data) - len(frame.unused_data)
            frames.append((position, end, content))
            position = end
        return frames

    def _frame(self, content: bytes) -> bytes:
        if not self._zstd:
            return content
        return zstandard.ZstdCompressor(level=3, write_checksum=True).compress(content)

    def _unframe_first(self, data: bytes) -> bytes:
        if not self._zstd:
            return data
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)

    # Appends.

    def _lock(self, session_id: str) -> anyio.Lock:
        return self._locks.setdefault(session_id, anyio.Lock())

    async def append(self, session_id: str, events: Sequence[Event]) -> AppendResult:
        async with self._lock(session_id):
            return await self._run(self._append_sync, session_id, events)

    def _append_sync(self, session_id: str, events: Sequence[Event]) -> AppendResult:
        with _locked(self._directory(session_id), session_id):
            state = self._state(session_id, locked=True)
            if not events:
                return AppendResult(state.head + 1, state.head)
            first, to_seq = events[0].seq, events[-1].seq + 1
            if not check_batch(session_id, events, state.head):
                stored = events_in(self._stored(state, first, to_seq), first, to_seq)
                is_resend(session_id, events, stored, state.head)
                return AppendResult(first, state.head, idempotent=True)
            batch = prepare_batch(events)
            content = bytearray()
            records = []
            for record in batch.records:
                records.append((record.seq, record.members, len(content), len(record.line), True))
                content += record.line
                content += b"\n"
            block = self._frame(bytes(content))
            entry = _entry(state.log_end, state.log_end + len(block), records, batch.messages, batch.hidden)
            self._commit(state, entry, block)
        return AppendResult(first, state.head)

    def _commit(self, state: _State, entry: _Entry, block: bytes) -> None:
        index_path, log_path = state.directory / INDEX_NAME, state.directory / self._log_name
        line = _index_frame(entry)
        try:
            with open(index_path, "r+b") as index:
                index.seek(state.index_size)
                index.write(line)
                index.truncate()
                index.flush()
                os.fsync(index.fileno())
            with open(log_path, "r+b") as log:
                log.seek(entry.start)
                log.write(block)
                log.truncate()
                log.flush()
                os.fsync(log.fileno())
        except OSError as exc:
            with contextlib.suppress(OSError):
                _truncate(log_path, entry.start)
                _truncate(index_path, state.index_size)
            raise StoreError(f"append to {log_path} failed: {exc}") from exc
        state.add(entry)
        state.index_size += len(line)

    # Reads.

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        return await self._run(self._read_stored_sync, session_id, from_seq, to_seq)

    def _read_stored_sync(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        return self._stored(self._state(session_id), from_seq, to_seq)

    def _stored(self, state: _State, from_seq: int, to_seq: int) -> list[StoredRecord]:
        first = max(0, bisect.bisect_right(state.starts, from_seq) - 1)
        last = bisect.bisect_left(state.starts, to_seq)
        out: list[StoredRecord] = []
        if first >= last:
            return out
        with open(state.directory / self._log_name, "rb") as log:
            ranges = _block_ranges(state, first, last) if self._zstd else _windows(state, first, last)
            for start, lo, hi in ranges:
                if self._zstd:
                    entry = state.entries[start]
                    content = (
                        zstandard.ZstdDecompressor().decompressobj().decompress(_pread(log, entry.start, entry.end))
                    )
                    base = 0
                else:
                    content = _pread(log, start, _position(state, hi - 1) + state.lengths[hi - 1])
                    base = start
                for i in range(lo, hi):
                    offset = (state.offsets[i] if self._zstd else _position(state, i)) - base
                    line = content[offset : offset + state.lengths[i]]
                    seq = state.starts[i]
                    if not state.canonical[i]:
                        line = encode(record_from_value(decode_json(line), seq))
                    out.append(StoredRecord(seq, state.members[i], line))
        return out

    async def page_cuts(self, session_id: str, *, to_seq: int, max_messages: int) -> list[int]:
        state = await self._run(self._state, session_id)
        return state.messages.cuts(to_seq, max_messages)

    async def close(self) -> None:
        self._states.clear()
        self._headers.clear()


def _block_ranges(state: _State, first: int, last: int) -> Iterator[tuple[int, int, int]]:
    """``(block, lo, hi)`` for each run of records ``first..last-1`` that share a batch (a zstd frame)."""
    blocks = state.blocks
    lo = first
    for i in range(first + 1, last + 1):
        if i == last or blocks[i] != blocks[lo]:
            yield blocks[lo], lo, i
            lo = i


def _position(state: _State, i: int) -> int:
    return state.entries[state.blocks[i]].start + state.offsets[i]


def _windows(state: _State, first: int, last: int) -> Iterator[tuple[int, int, int]]:
    """``(log offset, lo, hi)`` for reads of at most `_READ_WINDOW` bytes (or one record) over a plain log."""
    lo = first
    start = _position(state, lo)
    for i in range(first + 1, last + 1):
        if i == last or _position(state, i) + state.lengths[i] - start > _READ_WINDOW:
            yield start, lo, i
            if i < last:
                lo, start = i, _position(state, i)


def _read_head(path: Path, zstd: bool) -> bytes:
    """Enough of a log's start to hold its header line (or, in zstd mode, its header frame)."""
    size = 4096
    with open(path, "rb") as log:
        while True:
            data = log.read(size)
            if b"\n" in data if not zstd else _frame_complete(data):
                return data
            if len(data) < size:
                return data
            log.seek(0)
            size *= 4


def _frame_complete(data: bytes) -> bool:
    frame = zstandard.ZstdDecompressor().decompressobj()
    try:
        frame.decompress(data)
    except zstandard.ZstdError:
        return True
    return bool(frame.eof)


def _pread(log: Any, start: int, end: int) -> bytes:
    return os.pread(log.fileno(), end - start, start)


@contextlib.contextmanager
def _locked(directory: Path, session_id: str) -> Iterator[None]:
    """An exclusive lock on the session across processes."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:
        raise SessionNotFoundError(session_id) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _write_atomic(path: Path, data: bytes) -> None:
    staging = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    _write_file(staging, data)
    os.replace(staging, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(size)
        handle.flush()
        os.fsync(handle.fileno())

"""File helpers for the JSONL store: durable writes, truncation, locks and reads."""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zstandard

from persistence.errors import SessionNotFoundError

__all__ = [
    "frame_complete",
    "fsync_dir",
    "locked",
    "pread",
    "pread_path",
    "read_head",
    "truncate",
    "write_at",
    "write_atomic",
    "write_file",
    "write_unsynced",
]

LOCK_NAME = "lock"


def read_head(path: Path, zstd: bool) -> bytes:
    """Enough of a log's start to hold its header line (or, in zstd mode, its header frame)."""
    size = 4096
    with open(path, "rb") as log:
        while True:
            data = log.read(size)
            if b"\n" in data if not zstd else frame_complete(data):
                return data
            if len(data) < size:
                return data
            log.seek(0)
            size *= 4


def frame_complete(data: bytes) -> bool:
    frame = zstandard.ZstdDecompressor().decompressobj()
    try:
        frame.decompress(data)
    except zstandard.ZstdError:
        return True
    return bool(frame.eof)


def pread(log: Any, start: int, end: int) -> bytes:
    return os.pread(log.fileno(), end - start, start)


def pread_path(path: Path, start: int, end: int) -> bytes:
    with open(path, "rb") as handle:
        return pread(handle, start, end)


@contextlib.contextmanager
def locked(directory: Path, session_id: str, *, shared: bool = False, wait: bool = True) -> Iterator[None]:
    """A lock on the session across processes and threads: exclusive to write, ``shared`` to read.

    Without ``wait``, a lock another holder keeps raises `BlockingIOError` at once.
    """
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:
        raise SessionNotFoundError(session_id) from None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
        yield
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def write_atomic(path: Path, data: bytes) -> None:
    staging = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    write_file(staging, data)
    os.replace(staging, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_at(path: Path, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset``, cut whatever follows it, and fsync: the file ends where ``data`` does."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)
        handle.truncate()
        handle.flush()
        os.fsync(handle.fileno())


def write_unsynced(path: Path, offset: int, data: bytes) -> int:
    """`write_at` without the fsync: the open descriptor, which the caller syncs (in a group's barrier) and closes."""
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data)
        at = offset
        while view:
            written = os.pwrite(fd, view, at)
            view, at = view[written:], at + written
        # Cut only what a failed write left behind: a truncate to the same size still costs a journal entry.
        if os.fstat(fd).st_size > at:
            os.ftruncate(fd, at)
    except BaseException:
        os.close(fd)
        raise
    return fd


def truncate(path: Path, size: int) -> None:
    write_at(path, size, b"")

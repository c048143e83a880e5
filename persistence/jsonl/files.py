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
    "GATE_NAME",
    "LOCK_NAME",
    "SessionLock",
    "acquire",
    "frame_complete",
    "fsync_path",
    "locked",
    "pread",
    "pread_path",
    "read_head",
    "reading",
    "truncate",
    "write_at",
    "write_atomic",
    "write_file",
    "write_unsynced",
]

LOCK_NAME = "lock"
GATE_NAME = "gate"


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
    """``[start, end)`` of a file, from a descriptor (see `reading`) or an open file."""
    return os.pread(log if isinstance(log, int) else log.fileno(), end - start, start)


def pread_path(path: Path, start: int, end: int) -> bytes:
    with reading(path) as fd:
        return pread(fd, start, end)


@contextlib.contextmanager
def reading(path: Path) -> Iterator[int]:
    """A descriptor open for reading, for `pread`: unbuffered, so opening it costs no stat or seek."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


class SessionLock:
    """A held lock on one session's ``lock`` file; `release` (or leaving it as a context) lets it go, once."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> SessionLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(directory: Path, session_id: str, *, shared: bool = False, wait: bool = True) -> SessionLock:
    """Lock the session across processes and threads: exclusive to write, ``shared`` to read.

    Every holder passes through the ``gate`` first: it takes the gate exclusively, then the
    lock, and lets the gate go once it has the lock. Linux ``flock`` does not favour a waiting
    writer over new readers, so without the gate a stream of overlapping readers could keep
    a writer out for ever. A writer waiting for the readers that hold the lock keeps the
    gate meanwhile, so readers that come after it wait behind it. Without ``wait``, a gate or
    lock another holder keeps raises `BlockingIOError` at once.

    The lock held is always the one in the directory the id names now: a delete renames the
    directory away under the lock, so a holder that waited on the old one tries again on the
    new one (a create of the id since), or finds the id gone (`SessionNotFoundError`). So no
    write of one life ever holds a lock the next life's writers do not see.
    """
    while True:
        fd = _acquire_once(directory, session_id, shared=shared, wait=wait)
        if _still_at(fd, directory / LOCK_NAME):
            return SessionLock(fd)
        os.close(fd)


def _still_at(fd: int, path: Path) -> bool:
    """Whether the open lock file ``fd`` is still the file at ``path`` (its inode cannot be reused while open)."""
    held = os.fstat(fd)
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    return (held.st_dev, held.st_ino) == (found.st_dev, found.st_ino)


def _acquire_once(directory: Path, session_id: str, *, shared: bool, wait: bool) -> int:
    nowait = 0 if wait else fcntl.LOCK_NB
    gate = _open_lock(directory / GATE_NAME, session_id)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX | nowait)
        fd = _open_lock(directory / LOCK_NAME, session_id)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | nowait)
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(gate)
    return fd


@contextlib.contextmanager
def locked(directory: Path, session_id: str, *, shared: bool = False, wait: bool = True) -> Iterator[None]:
    """`acquire` for the length of a ``with`` block."""
    with acquire(directory, session_id, shared=shared, wait=wait):
        yield


def _open_lock(path: Path, session_id: str) -> int:
    try:
        # Without O_CREAT first: a create takes the directory's lock, and the file exists after the first lock.
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        raise SessionNotFoundError(session_id) from None


def write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def write_atomic(path: Path, data: bytes) -> None:
    staging = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    write_file(staging, data)
    os.replace(staging, path)
    fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """fsync a file or directory by its path."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
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


def write_unsynced(path: Path, offset: int, data: bytes, *, size: int | None = None) -> int:
    """`write_at` without the fsync: the open descriptor, which the caller syncs (in a group's barrier) and closes.

    ``size`` is the file's size before the write, when the caller knows it (no stat is made then).
    """
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data)
        at = offset
        while view:
            written = os.pwrite(fd, view, at)
            view, at = view[written:], at + written
        # Cut only what a failed write left behind: a truncate to the same size still costs a journal entry.
        if (os.fstat(fd).st_size if size is None else size) > at:
            os.ftruncate(fd, at)
    except BaseException:
        os.close(fd)
        raise
    return fd


def truncate(path: Path, size: int) -> None:
    write_at(path, size, b"")

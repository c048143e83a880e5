"""Turns between processes of one host through `flock`: a fair write gate and a never-waited turn.

`FileGate` orders the writers of one file: SQLite's busy handler sleeps 1, 2, 5 … 100 ms
between tries, while the process that holds the write lock keeps winning it back, so a
second writer process stalled for milliseconds and starved. A blocking ``flock`` wakes its
waiter the moment the lock is let go. The gate only orders writers; the database's own
lock still guarantees correctness, for a writer that bypasses the gate too.

`FileTurn` is a turn at the work done once per store (the retention sweep): it is tried,
never waited for, and the kernel lets it go when its holder dies, so the next process to
try takes it over.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from persistence.errors import StoreError

__all__ = ["FileGate", "FileTurn"]


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StoreError(f"store unavailable: cannot open {path}: {exc.strerror}") from exc


class FileGate:
    """Writers of one file take turns through an exclusive flock on ``path``; a waiter wakes when it is let go."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    @contextmanager
    def held(self, timeout: float) -> Iterator[None]:
        """Hold the gate for the block; `StoreError` when another process holds it for more than ``timeout`` s."""
        if self._fd is None:
            self._fd = _open(self.path)
        fd = self._fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fd = self._wait(timeout)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            if fd != self._fd:
                os.close(fd)

    def _wait(self, timeout: float) -> int:
        """The gate, waited for in a thread of its own (``flock`` takes no timeout); the descriptor that holds it.

        The wait uses a descriptor of its own: a waiter given up on may still get the lock later,
        and it lets go of that descriptor's alone, never of the next holder's.
        """
        fd = _open(self.path)
        got = threading.Event()
        guard = threading.Lock()
        abandoned = False

        def wait() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                os.close(fd)
                return
            with guard:
                if abandoned:
                    os.close(fd)  # closing lets the lock go
                    return
                got.set()

        threading.Thread(target=wait, name="history-gate", daemon=True).start()
        if got.wait(timeout):
            return fd
        with guard:
            if not got.is_set():
                abandoned = True
                raise StoreError(
                    f"store unavailable: another process holds {self.path} (the database's write turn) "
                    f"for more than {timeout:g} s"
                )
        return fd

    def close(self) -> None:
        """Close the gate's file (held by no block)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class FileTurn:
    """A turn at work done once per store: an exclusive flock on ``path``, never waited for."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @asynccontextmanager
    async def taking(self) -> AsyncIterator[bool]:
        """``True`` for the block when this process took the turn, ``False`` when another holds it."""
        while True:
            fd = _open(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                yield False
                return
            if self._current(fd):
                break
            os.close(fd)  # the last holder of the store removed it meanwhile: take the file that is there now
        try:
            yield True
        finally:
            os.close(fd)

    def _current(self, fd: int) -> bool:
        with contextlib.suppress(FileNotFoundError):
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        return False

"""Who has a SQLite file open: a shared ``flock`` on ``<file>-lock`` for each store, taken alone by a vacuum.

`VACUUM` rewrites the whole file through the WAL. Beside another process that holds readers
the WAL cannot be cut afterwards, so the file grew to twice its size, and the rewrite held
the write lock for seconds, stalling that process's appends (issue 41, F11). So a vacuum
runs only when no other store has the file open, and says so otherwise.

The lock is on a file of its own: a second descriptor of the database (or its ``-shm``) that
this process closed would drop SQLite's own POSIX locks on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from typing import Final

from persistence.errors import StoreError

__all__ = ["Holders"]

# How often an opening store looks again for a vacuum to end.
_POLL: Final = 0.05


class Holders:
    """One store's hold on a SQLite file: shared while the store is open, alone while it vacuums."""

    def __init__(self, database: str) -> None:
        self._database = database
        self._path = f"{database}-lock"
        self._fd: int | None = None

    def hold(self, timeout: float) -> None:
        """Take the shared hold, waiting up to ``timeout`` seconds while a vacuum holds the file alone."""
        deadline = time.monotonic() + timeout
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise StoreError(
                        f"store unavailable: `history-service vacuum` holds {self._path} alone, "
                        f"for more than {timeout:g} s; try again once it ends"
                    ) from None
                time.sleep(_POLL)
                continue
            if self._current(fd):
                self._fd = fd
                return
            os.close(fd)  # the last holder removed it meanwhile: hold the file that is there now

    def _open(self) -> int:
        try:
            # Read-only is enough to lock, so any user who may read the database may take its hold.
            return os.open(self._path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"store unavailable: cannot open {self._path}: {exc.strerror}") from exc

    def _current(self, fd: int) -> bool:
        try:
            return os.stat(self._path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the file alone for the block; `StoreError` at once, saying why, when another store has it open."""
        if self._fd is None:
            yield
            return
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # A refused conversion may have dropped the shared hold: take it back.
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            raise StoreError(
                "not vacuumed: another process has this SQLite store open (a running server, or another "
                "command); beside it VACUUM would double the file and stall its appends for seconds. "
                "Stop it, then vacuum"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_SH)

    def try_alone(self) -> bool:
        """Whether no other store has the file open now (the hold is shared again on return); never waits."""
        if self._fd is None:
            return True
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            alone = False
        else:
            alone = True
        # A refused conversion may have dropped the shared hold: take it back (waiting only for an opener's try).
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        return alone

    def release(self) -> None:
        """Let go; the last holder removes the file, and the gate's and turn's beside it (`persistence.state.flocks`).

        SQLite removes its ``-wal`` and ``-shm`` the same way.
        """
        if self._fd is None:
            return
        with contextlib.suppress(BlockingIOError):
            # Alone: no store holds it, and one that opened it meanwhile sees it gone and opens anew.
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            for path in (self._path, f"{self._database}-write", f"{self._database}-turn"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        os.close(self._fd)
        self._fd = None

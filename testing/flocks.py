"""flock holders for tests: what another process does to a JSONL session's lock files."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["held", "hold"]


def hold(path: Path, operation: int = fcntl.LOCK_SH) -> int:
    """Take ``path``'s flock (shared, as a reader does, by default); the descriptor to close."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, operation)
    return fd


def held(path: Path) -> bool:
    """Whether someone holds ``path``'s flock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False

"""Turns between processes of one host through `flock`: a fair write gate and a never-waited turn.

INTERFACE STUB (issue 43, part A fills it in).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

__all__ = ["FileGate", "FileTurn"]


class FileGate:
    """Writers of one file take turns through an exclusive flock on ``path``; a waiter wakes when it is let go."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @contextmanager
    def held(self, timeout: float) -> Iterator[None]:
        raise NotImplementedError
        yield

    def close(self) -> None:
        raise NotImplementedError


class FileTurn:
    """A turn at work done once per store: an exclusive flock on ``path``, never waited for."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @asynccontextmanager
    async def taking(self) -> AsyncIterator[bool]:
        raise NotImplementedError
        yield False

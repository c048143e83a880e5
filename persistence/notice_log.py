"""The notices log: head notices between processes on one host, for SQLite and JSONL (docs/protocol.md §7.6).

INTERFACE STUB (issue 43, part A fills it in).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from persistence.notify import HeadListener, OnConnect, OnHead

__all__ = ["CREATE", "JOINED", "KEPT", "POLL_S", "TRIM_EVERY", "LogListener", "tell"]

CREATE: Final = (
    "CREATE TABLE IF NOT EXISTS history_notices "
    "(n INTEGER NOT NULL PRIMARY KEY, origin TEXT NOT NULL, notice TEXT NOT NULL)"
)
POLL_S: Final = 0.005
KEPT: Final = 65_536
TRIM_EVERY: Final = 1_024
JOINED: Final = "\x00joined\x00"


def tell(cursor: sqlite3.Cursor, origin: str, payloads: Sequence[str]) -> None:
    """Insert ``payloads`` as rows of ``origin``, in the caller's transaction, and trim the log past `KEPT`."""
    raise NotImplementedError


class LogListener(HeadListener):
    """Reads the notices log of the SQLite file at ``path`` when its ``data_version`` moves."""

    def __init__(
        self,
        path: str | Path,
        own: str,
        *,
        deleted: Callable[[str | None], object] | None = None,
        announce: Callable[[], None] | None = None,
        poll: float = POLL_S,
    ) -> None:
        self.path = str(path)
        self.own = own

    async def run(self, on_head: OnHead, on_connect: OnConnect) -> None:
        raise NotImplementedError

    def catch_up(self) -> None:
        raise NotImplementedError

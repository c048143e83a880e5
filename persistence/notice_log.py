"""The notices log: head notices between processes on one host, for SQLite and JSONL (docs/protocol.md §7.6).

A writer adds one row per notice to the table ``history_notices`` in the transaction that
makes its change (SQLite) or right after the change is durable (the JSONL sidecar), so a
row exists exactly when its change does. Rows are numbered by SQLite's rowid: under the
write lock each insert takes ``max + 1``, so the numbers are the commit order, and since the
newest row is never deleted they are never reused. A reader keeps the number of the last
row it read, and looks for more whenever ``PRAGMA data_version`` of its own connection
moved (any other connection committed). A reader that finds a number missing was left
behind by a trim (or the log was replaced): it resyncs, as a PostgreSQL listener does after
a reconnect. The payload is `persistence.notify.notice`'s, the same bytes PostgreSQL sends.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import anyio
import msgspec

from persistence.notify import HeadListener, Notice, OnConnect, OnHead, backoff

__all__ = ["CREATE", "JOINED", "KEPT", "POLL_S", "TRIM_EVERY", "LogListener", "tell"]

logger = logging.getLogger(__name__)

CREATE: Final = (
    "CREATE TABLE IF NOT EXISTS history_notices "
    "(n INTEGER NOT NULL PRIMARY KEY, origin TEXT NOT NULL, notice TEXT NOT NULL)"
)
# The bound on a notice's delay: a poll of the pragma costs a few µs on the event loop.
POLL_S: Final = 0.005
# Rows kept; a reader that falls further behind (a stopped process) resyncs.
KEPT: Final = 65_536
# The log is trimmed by the insert that crosses a multiple of this: its cost is spread over as many rows.
TRIM_EVERY: Final = 1_024
# The session-id slot of "a process of this store started": the others resync (JSONL's closing of its gap).
JOINED: Final = "\x00joined\x00"
READ_BATCH: Final = 1_024

_INSERT: Final = "INSERT INTO history_notices (origin, notice) VALUES (?, ?)"
_LAST: Final = "SELECT coalesce(max(n), 0) FROM history_notices"
_TRIM: Final = "DELETE FROM history_notices WHERE n <= ?"
_AFTER: Final = f"SELECT n, origin, notice FROM history_notices WHERE n > ? ORDER BY n LIMIT {READ_BATCH}"
_VERSION: Final = "PRAGMA data_version"
_NOTICE: Final = msgspec.json.Decoder(Notice)
# A poll that meets the write lock of a WAL recovery tries again at the next tick: not a lost connection.
_BUSY: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def tell(cursor: sqlite3.Cursor, origin: str, payloads: Sequence[str]) -> None:
    """Insert ``payloads`` as rows of ``origin``, in the caller's transaction, and trim the log past `KEPT`."""
    if not payloads:
        return
    cursor.executemany(_INSERT, [(origin, payload) for payload in payloads])
    last = cursor.execute(_LAST).fetchone()[0]
    if last // TRIM_EVERY != (last - len(payloads)) // TRIM_EVERY and last > KEPT:
        cursor.execute(_TRIM, (last - KEPT,))


class LogListener(HeadListener):
    """Reads the notices log of the SQLite file at ``path`` when its ``data_version`` moves.

    Its connection is opened on the event loop's thread and used there alone: a poll reads the
    pragma, and rows only when it moved, in microseconds, less than a hop to a thread would
    cost. ``deleted`` is told of each session another process deleted, and of ``None`` (any)
    whenever this listener resyncs; ``announce`` is called at each (re)connect, once the
    position is read (JSONL writes its `JOINED` row there).
    """

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
        self._deleted = deleted
        self._announce = announce
        self._poll = poll
        self._conn: sqlite3.Connection | None = None
        self._pos = 0
        self._version = 0
        self._on_head: OnHead | None = None
        self._resync = False
        self._broken: sqlite3.Error | None = None

    async def run(self, on_head: OnHead, on_connect: OnConnect) -> None:
        failures = 0
        while True:
            try:
                self._connect()
                if self._announce is not None:
                    self._announce()
                self.state = "listening"
                failures = 0
                self._on_head = on_head
                self._forget(None)
                await on_connect()
                while True:
                    await anyio.sleep(self._poll)
                    self._drain()
                    if self._resync:
                        self._resync = False
                        await on_connect()
            except sqlite3.Error as exc:
                failures += 1
                delay = backoff(failures)
                self.state = "reconnecting"
                logger.warning("head notices lost (%s); reconnecting in %.2f s", exc, delay)
                await anyio.sleep(delay)
            finally:
                self._disconnect()

    def catch_up(self) -> None:
        if self._conn is None or self._broken is not None:
            return
        try:
            self._drain()
        except sqlite3.Error as exc:
            # The request goes on; `run` meets the failure at its next tick and reconnects.
            self._broken = exc

    def _connect(self) -> None:
        # mode=rw: a log that is not there is a failure to report, never an empty file to create.
        conn = sqlite3.connect(f"file:{self.path}?mode=rw", uri=True, isolation_level=None, timeout=0)
        try:
            # The version first: a commit after it moves it again, and one before it is covered by the resync.
            self._version = conn.execute(_VERSION).fetchone()[0]
            self._pos = conn.execute(_LAST).fetchone()[0]
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._broken = None
        self._resync = False

    def _disconnect(self) -> None:
        self._on_head = None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    def _drain(self) -> None:
        """Pass on the rows committed since the last look, when the file changed."""
        conn = self._conn
        if self._broken is not None:
            broken, self._broken = self._broken, None
            raise broken
        assert conn is not None and self._on_head is not None, "drained before connecting"
        try:
            version = conn.execute(_VERSION).fetchone()[0]
            if version == self._version:
                return
            # Before reading: a commit during the read moves it again, and the next look reads that.
            self._version = version
            while True:
                rows = conn.execute(_AFTER, (self._pos,)).fetchall()
                if not rows:
                    last = conn.execute(_LAST).fetchone()[0]
                    if last < self._pos:
                        self._gap(last)  # the log went back: replaced or emptied
                    return
                if rows[0][0] != self._pos + 1:
                    self._gap(conn.execute(_LAST).fetchone()[0])  # trimmed past us: notices lost
                    return
                self._pass_on(rows)
                if len(rows) < READ_BATCH:
                    return
        except sqlite3.Error as exc:
            if exc.sqlite_errorcode in _BUSY:
                self._version = -1  # look again at the next tick
                return
            raise

    def _pass_on(self, rows: list[tuple[int, str, str]]) -> None:
        on_head = self._on_head
        assert on_head is not None
        for n, origin, payload in rows:
            self._pos = n
            if origin == self.own:
                continue
            try:
                heard = _NOTICE.decode(payload)
            except msgspec.DecodeError:
                logger.warning("ignoring a malformed head notice %r", payload[:200])
                continue
            if heard.session_id == JOINED:
                self._gap(self._pos)
                continue
            if heard.deleted:
                self._forget(heard.session_id)
            on_head(heard)

    def _gap(self, last: int) -> None:
        """Notices may have been missed: forget at once, and have `run` resync its owner at its next tick."""
        self._pos = last
        self._forget(None)
        self._resync = True

    def _forget(self, session_id: str | None) -> None:
        if self._deleted is not None:
            self._deleted(session_id)

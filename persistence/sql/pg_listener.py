"""PostgreSQL's `HeadListener`: one ``LISTEN`` connection per process (see `persistence.notify`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import anyio
import msgspec
import psycopg

from persistence.notify import NOTIFY_CHANNEL, HeadListener, Notice, OnConnect, OnHead, backoff
from persistence.sql.pg_timeouts import Watchdog, connect_options

__all__ = ["PostgresListener"]

logger = logging.getLogger(__name__)

_NOTICE: Final = msgspec.json.Decoder(Notice)


class PostgresListener(HeadListener):
    """One ``LISTEN`` connection per process, reconnected with jittered exponential backoff.

    Notices whose origin is ``own`` (the store this listener serves) are not passed on.
    Every ``watchdog.timeout`` seconds the listener pings the server, within that bound.
    """

    def __init__(
        self, conninfo: str, own: str, *, watchdog: Watchdog, deleted: Callable[[str | None], object] | None = None
    ) -> None:
        self._conninfo = conninfo
        self._own = own
        self._watchdog = watchdog
        # Told of each session another process deleted, and of ``None`` (any) on each connect: the store
        # forgets what it kept of them before the id can come back as another incarnation.
        self._deleted = deleted

    async def run(self, on_head: OnHead, on_connect: OnConnect) -> None:
        failures = 0
        while True:
            try:
                # The connection sits idle while no one appends: TCP keepalives find a server that vanished
                # without closing it (a host down, a cut that sends no reset), and the ping one that stopped
                # answering, so `state`, which readiness reports, stops saying "listening" for a dead connection.
                connecting = psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, **connect_options(self._watchdog.timeout)
                )
                async with await connecting as conn:
                    await self._ping(conn, f"LISTEN {NOTIFY_CHANNEL}")
                    self.state = "listening"
                    failures = 0
                    if self._deleted is not None:
                        self._deleted(None)
                    await on_connect()
                    while True:
                        # Notices that arrive during the ping wait in the connection for the next round.
                        async for message in conn.notifies(timeout=self._watchdog.timeout):
                            try:
                                heard = _NOTICE.decode(message.payload)
                            except msgspec.DecodeError:
                                logger.warning("ignoring a malformed head notice %r", message.payload[:200])
                                continue
                            if heard.origin != self._own:
                                if heard.deleted and self._deleted is not None:
                                    self._deleted(heard.session_id)
                                on_head(heard)
                        await self._ping(conn, "SELECT 1")
            except psycopg.Error as exc:
                failures += 1
                delay = backoff(failures)
                self.state = "reconnecting"
                logger.warning("head notices lost (%s); reconnecting in %.2f s", exc, delay)
                await anyio.sleep(delay)

    async def _ping(self, conn: psycopg.AsyncConnection[tuple[object, ...]], statement: str) -> None:
        with self._watchdog.bound(conn):
            await conn.execute(statement)

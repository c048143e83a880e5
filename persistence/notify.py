"""Head notices across processes: which session's head moved, from every process sharing a store.

A store whose appends can come from other processes offers a `HeadListener`. On
PostgreSQL every append sends ``NOTIFY`` on one channel inside its own transaction, so a
notice is sent exactly when the append commits; `PostgresListener` holds one connection
per process that ``LISTEN``s on it, whatever the number of sessions. A notice names the
store instance that sent it, and a listener passes on only other instances' notices: a
process publishes its own appends from memory, and re-reading them would double the
database's work.

Notices can be lost: the connection drops, or the server restarts. The listener therefore
reconnects with backoff and, after every (re)connect, asks its owner to re-read the head
of everything it watches, so nothing stays stuck on a notice that never came.
"""

from __future__ import annotations

import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import msgspec
import psycopg

__all__ = ["NOTIFY_CHANNEL", "HeadListener", "PostgresListener", "notice"]

logger = logging.getLogger(__name__)

NOTIFY_CHANNEL: Final = "history_heads"
_NOTICE: Final = msgspec.json.Decoder(tuple[str, int, str])
_BACKOFF_BASE: Final = 0.1
_BACKOFF_CAP: Final = 5.0

OnHead = Callable[[str, int], None]
OnConnect = Callable[[], Awaitable[None]]


def notice(session_id: str, head: int, origin: str) -> str:
    """One head notice: the session id, its new head seq and the sending store's origin, as JSON (under 8,000 bytes)."""
    return msgspec.json.encode((session_id, head, origin)).decode()


class HeadListener(ABC):
    """Delivers head notices from every process that appends to the store.

    ``state`` is ``connecting``, ``listening`` or ``reconnecting``, for a readiness probe.
    """

    state: str = "connecting"

    @abstractmethod
    async def run(self, on_head: OnHead, on_connect: OnConnect) -> None:
        """Listen until cancelled: ``on_head(session, head)`` per notice, ``on_connect()`` after each (re)connect."""


class PostgresListener(HeadListener):
    """One ``LISTEN`` connection per process, reconnected with jittered exponential backoff.

    Notices whose origin is ``own`` (the store this listener serves) are not passed on.
    """

    def __init__(self, conninfo: str, own: str) -> None:
        self._conninfo = conninfo
        self._own = own

    async def run(self, on_head: OnHead, on_connect: OnConnect) -> None:
        failures = 0
        while True:
            try:
                # The connection sits idle while no one appends: TCP keepalives find a server that vanished
                # without closing it (a host down, a cut that sends no reset) in about 25 s, so `state`,
                # which readiness reports, stops saying "listening" for a connection that is gone.
                connecting = psycopg.AsyncConnection.connect(
                    self._conninfo,
                    autocommit=True,
                    keepalives=1,
                    keepalives_idle=10,
                    keepalives_interval=5,
                    keepalives_count=3,
                )
                async with await connecting as conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self.state = "listening"
                    failures = 0
                    await on_connect()
                    async for message in conn.notifies():
                        try:
                            session_id, head, origin = _NOTICE.decode(message.payload)
                        except msgspec.DecodeError:
                            logger.warning("ignoring a malformed head notice %r", message.payload[:200])
                            continue
                        if origin != self._own:
                            on_head(session_id, head)
            except psycopg.Error as exc:
                failures += 1
                delay = min(_BACKOFF_CAP, _BACKOFF_BASE * 2 ** (failures - 1)) * (0.5 + random.random() / 2)
                self.state = "reconnecting"
                logger.warning("head notices lost (%s); reconnecting in %.2f s", exc, delay)
                await anyio.sleep(delay)

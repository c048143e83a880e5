"""Head notices across processes: which session's head moved, from every process sharing a store.

A store whose appends can come from other processes offers a `HeadListener`. On
PostgreSQL every append sends ``NOTIFY`` on one channel inside its own transaction, so a
notice is sent exactly when the append commits; `persistence.sql.pg_listener` holds one connection
per process that ``LISTEN``s on it, whatever the number of sessions. A notice names the
store instance that sent it, and a listener passes on only other instances' notices: a
process publishes its own appends from memory, and re-reading them would double the
database's work.

Notices can be lost: the connection drops, or the server restarts. The listener therefore
reconnects with backoff and, after every (re)connect, asks its owner to re-read the head
of everything it watches, so nothing stays stuck on a notice that never came. A server
that stopped answering without closing the connection is found by a ping the listener
sends whenever it has waited its bound: unanswered within the bound, the connection is cut
and replaced.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Final

import msgspec

__all__ = ["NOTIFY_CHANNEL", "STREAM_NOTICE", "HeadListener", "Notice", "backoff", "notice", "stream_of"]

NOTIFY_CHANNEL: Final = "history_heads"
# A Durable Stream's notice names it behind this prefix, which no session id can hold
# (docs/protocol.md §2.4), so a follower's channel never takes it for a session's.
STREAM_NOTICE: Final = "\x00ds\x00"

_BACKOFF_BASE: Final = 0.1
_BACKOFF_CAP: Final = 5.0

OnHead = Callable[["Notice"], None]
OnConnect = Callable[[], Awaitable[None]]


class Notice(msgspec.Struct, frozen=True, array_like=True):
    """A head notice as sent: ``closed`` says the session was closed at ``head``, ``deleted`` that it is gone.

    Both are absent from an append's notice. A delete's names the ``incarnation`` it deleted, so
    a process never takes it for the delete of the id's next incarnation.
    """

    session_id: str
    head: int
    origin: str
    closed: bool = False
    deleted: bool = False
    incarnation: str | None = None


def notice(
    session_id: str, head: int, origin: str, *, closed: bool = False, deleted: bool = False, incarnation: str = ""
) -> str:
    """One head notice: the session id, its head seq and the sending store's origin, as JSON (under 8,000 bytes).

    A close's notice adds ``true``; a delete's adds ``false, true`` and the incarnation (its head is -1).
    A listener of a build before closes reads exactly three fields: it logs those notices as malformed
    and drops them (docs/protocol.md §7.6).
    """
    fields: tuple[object, ...] = (session_id, head, origin)
    if deleted:
        fields += (False, True, incarnation)
    elif closed:
        fields += (True,)
    return msgspec.json.encode(fields).decode()


class HeadListener(ABC):
    """Delivers head notices from every process that appends to the store.

    ``state`` is ``connecting``, ``listening`` or ``reconnecting``, for a readiness probe.
    """

    state: str = "connecting"

    @abstractmethod
    async def run(self, on_head: OnHead, on_connect: OnConnect) -> None:
        """Until cancelled: ``on_head(notice)`` per notice of another store, ``on_connect()`` per connect."""

    def catch_up(self) -> None:
        """Hear at once, on the calling loop, every notice committed before this call.

        A listener whose notices are pushed (PostgreSQL) has nothing to do here; one that reads a
        log (`persistence.notice_log`) reads it now, so a cache consulted next is never stale.
        """
        return None


def stream_of(notice: Notice) -> str | None:
    """The Durable Stream a notice tells of a write to, or ``None`` when it is a session's."""
    if notice.session_id.startswith(STREAM_NOTICE):
        return notice.session_id[len(STREAM_NOTICE) :]
    return None


def backoff(failures: int) -> float:
    """Seconds a listener waits before its next try, after ``failures`` in a row: doubling from 0.1 s to 5 s, jittered.

    The jitter keeps the processes of a store that lost their notices together from retrying in step.
    """
    return min(_BACKOFF_CAP, _BACKOFF_BASE * 2.0 ** (failures - 1)) * (0.5 + random.random() / 2)

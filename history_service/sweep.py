"""The sweep of expired sessions (docs/protocol.md §6.5), and the turn every sweep of the process takes.

On a store several processes share, one sweep runs at a time in the whole deployment
(`HistoryStore.sweeping`). Within a process, each sweep (this one, and the expiry of Durable
Streams, `history_service.durable.expiry`) takes its turn in `Sweeper.sweeping`, so they never
contend for that one lock.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import NamedTuple, TypeVar

import anyio

from history_service.expiry import DEFAULT, Default, Expiry
from history_service.lifecycle import Lifecycle
from persistence import HistoryStore, SessionNotFoundError, StoreError, now_ms

__all__ = ["Sweeper", "Swept", "every"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Swept(NamedTuple):
    """What a sweep did: the ids deleted (each tree whole), and those it could not."""

    deleted: list[str]
    failed: list[str]


class Sweeper:
    """Deletes the expired sessions of one store, ``batch`` at a time, as a request would delete them."""

    def __init__(self, store: HistoryStore, expiry: Expiry, lifecycle: Lifecycle, *, batch: int) -> None:
        self.store = store
        self.expiry = expiry
        self.lifecycle = lifecycle
        self.batch = batch
        self._turn = anyio.Lock()

    @asynccontextmanager
    async def sweeping(self) -> AsyncIterator[bool]:
        """This process's turn to sweep, and whether the store lets it (`HistoryStore.sweeping`)."""
        async with self._turn, self.store.sweeping() as mine:
            yield mine

    async def expired_now(self, retention_ms: int | None) -> list[str]:
        """The ids a sweep with ``retention_ms`` would delete now, each with its tree (§6.5), by id."""
        found = await self.store.expired(now=now_ms(), retention_ms=retention_ms, limit=None)
        gone = []
        for session_id in sorted(found):
            try:
                info = await self.store.get_session(session_id)
            except SessionNotFoundError:
                continue
            at = await self.expiry.tree_expires_at(info.header, info.touched_at, retention_ms)
            if at is not None and at <= now_ms():
                gone.append(session_id)
        return gone

    async def sweep(self, retention_ms: int | None | Default = DEFAULT) -> Swept | None:
        """Delete the expired sessions (§6.5), a batch of ``batch`` at a time.

        ``retention_ms`` stands for the settings' (``purge --older-than``). Each session is deleted
        with its subagent tree, as a request would delete it, so its followers are told. A session
        it could not delete (kept by a live session below it, or failing) is not asked for again in
        this sweep, so it never holds the others back. ``None`` while another process sweeps the
        same store (`HistoryStore.sweeping`). In its turn, before anything expired, the store
        finishes what a process that died left half done (`HistoryStore.recover`).
        """
        retention = self.expiry.retention_ms if isinstance(retention_ms, Default) else retention_ms
        batch, swept = self.batch, Swept([], [])
        passed: set[str] = set()

        async def expire(session_id: str) -> None:
            try:
                deleted = await self.lifecycle.expire(session_id, "expired", retention_ms=retention)
            except SessionNotFoundError:
                return  # in the tree of a session deleted before it
            except StoreError as exc:
                passed.add(session_id)
                swept.failed.append(session_id)
                logger.error("the sweep cannot delete session %r: %s", session_id, exc)
                return
            if not deleted:
                passed.add(session_id)
            swept.deleted.extend(deleted)

        async with self.sweeping() as mine:
            if not mine:
                return None
            # The turn is also where what a process that died left half done is finished: once, by one process.
            await self.store.recover()
            while True:
                found = await self.store.expired(now=now_ms(), retention_ms=retention, limit=batch, skip=passed)
                # One at a time: beside 50 appending connections, two at once doubled the sweep's share of the
                # event loop and of each group, and raised the appends' p99 with it (issue 25's closing note).
                for session_id in found:
                    await expire(session_id)
                if len(found) < batch:
                    break
            return swept

    async def run(self, interval: float) -> None:
        """Sweep every ``interval`` seconds, until cancelled; a failure waits for the next."""
        await every(interval, self.sweep, "expired sessions", lambda swept: 0 if swept is None else len(swept.deleted))


async def every(interval: float, sweep: Callable[[], Awaitable[T]], what: str, count: Callable[[T], int]) -> None:
    """Run ``sweep`` every ``interval`` seconds, until cancelled, logging how many of ``what`` each swept (``count``).

    A failure is logged, and waits for the next.
    """
    while True:
        try:
            swept = count(await sweep())
        except Exception:
            # Background work: whatever it met, the service serves on, and the next sweep tries again.
            logger.exception("the sweep of %s failed", what)
        else:
            if swept:
                logger.info("swept %d %s", swept, what)
        await anyio.sleep(interval)

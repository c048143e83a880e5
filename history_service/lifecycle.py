"""A session's life through the service (docs/protocol.md §6): create, append, close and delete.

Each write is durable before it returns, and then told to the process's `Notices`, so every
follower and live reader hears of it. Appends, closes and deletes of one session take its
append lock, so what they tell is told in seq order.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence

import anyio
import msgspec

from codec import Event, SessionHeader
from history_service.access import Access
from history_service.errors import InvalidHeader, InvalidParent, NotOwner
from history_service.expiry import DEFAULT, Default, Expiry
from history_service.metrics import Metrics
from history_service.notices import Notices
from persistence import (
    AppendResult,
    HistoryStore,
    KeyedLocks,
    Life,
    SeqConflictError,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    now_ms,
    subagent_parent,
)

__all__ = ["Lifecycle"]


class Lifecycle:
    """The writes to sessions: each checked by `Access`, made in the store, then told to ``notices``."""

    def __init__(self, store: HistoryStore, access: Access, expiry: Expiry, notices: Notices, metrics: Metrics) -> None:
        self.store = store
        self.access = access
        self.expiry = expiry
        self.notices = notices
        self.metrics = metrics
        self.append_locks = KeyedLocks()

    async def create(self, principal: str, header: SessionHeader, *, ttl_ms: int | None = None) -> SessionInfo:
        """Create the caller's session (§6.1); ``ttl_ms`` after now becomes its ``expiresAt`` (§6.5)."""
        now = now_ms()
        if ttl_ms is not None:
            if header.expiresAt is not msgspec.UNSET:
                raise InvalidHeader("give expiresAt in the header or ttlMs in the query, not both")
            header = msgspec.structs.replace(header, expiresAt=now + ttl_ms)
        elif header.expiresAt is not msgspec.UNSET and header.expiresAt <= now:
            raise InvalidHeader(f"expiresAt {header.expiresAt} is not in the future (the service's clock reads {now})")
        parent = subagent_parent(header)
        if parent is not None:
            try:
                await self.access.owned(principal, parent)
            except (SessionNotFoundError, NotOwner):
                raise InvalidParent(parent) from None
        try:
            info = await self.store.create_session(header, owner=principal)
        except SessionExistsError:
            # An expired session the sweep has not reached is gone already (§6.5): its id is free.
            if not await self._expire_now(header.id):
                raise
            info = await self.store.create_session(header, owner=principal)
        self.access.learn(info)
        return info

    @contextlib.contextmanager
    def _written(self, session_id: str, life: Life) -> Iterator[None]:
        """Around a write to ``life``: if the store finds that life over, what this process keeps of it goes too."""
        try:
            yield
        except SessionNotFoundError:
            # Deleted since it was checked (through another process, perhaps): the next request reads it afresh.
            self.access.forget(session_id, life.incarnation)
            raise

    async def append(self, principal: str, session_id: str, events: Sequence[Event]) -> AppendResult:
        """Append to the caller's session (§6.2), in the life checked: one deleted meanwhile is not written (§6.4)."""
        owned = await self.access.owned(principal, session_id, need_head=False)
        # Publishing under the lock keeps each session's frames in seq order.
        async with self.append_locks.hold(session_id):
            try:
                result = await self.store.append(session_id, events, life=owned.life)
            except SeqConflictError:
                self.metrics.seq_conflict()
                raise
            except SessionNotFoundError:
                # As `_written` does, inline: this is every append's path.
                self.access.forget(session_id, owned.life.incarnation)
                raise
            self.metrics.appended(result.head_seq - result.first_seq + 1, idempotent=result.idempotent)
            if not result.idempotent:
                self.notices.publish(session_id, events, owned.incarnation)
        return result

    async def close(self, principal: str, session_id: str) -> SessionInfo:
        """Close the caller's session (§6.3): durable before it returns, then every follower is told."""
        owned = await self.access.owned(principal, session_id, need_head=False)
        # Under the append lock: the session's last events are published before its end.
        async with self.append_locks.hold(session_id):
            now = time.time_ns() // 1_000_000
            with self._written(session_id, owned.life):
                info = await self.store.close_session(session_id, closed_at=now, life=owned.life)
            self.access.learn(info)
            if info.header.closedAt == now:
                # This close, not an earlier one, closed it (a repeat keeps the first time).
                self.metrics.session_closed()
            self.notices.advanced(session_id, info.head_seq, closed=True)
        return info

    async def delete(self, principal: str, session_id: str, *, reason: str = "request") -> list[str]:
        """Delete the caller's session and its subagent tree (§6.4): durable before it returns; followers are told.

        ``reason`` is what the metrics count it as: ``request``, or ``expired`` for the sweeper.
        """
        owned = await self.access.owned(principal, session_id)
        return await self.expire(session_id, reason, life=owned.life)

    async def expire(
        self, session_id: str, reason: str, *, life: Life | None = None, retention_ms: int | None | Default = DEFAULT
    ) -> list[str]:
        """Delete ``life`` of the id, and its tree; without one, the life there now unless it is live (a sweep's)."""
        # Shielded: once the store has the delete, this process is told of it, whatever becomes of the request.
        with anyio.CancelScope(shield=True):
            async with self.append_locks.hold(session_id):
                if life is None:
                    # Read again under the append lock: an append of this process since the sweep's read keeps it,
                    # and so does a session below it that is still live.
                    info = await self.store.get_session(session_id)
                    at = await self.expiry.tree_expires_at(info.header, info.touched_at, retention_ms)
                    if at is None or at > now_ms():
                        return []
                    life = info.life
                with self._written(session_id, life):
                    deleted = await self.store.delete_session(session_id, life=life)
            for gone in deleted:
                self.access.forget(gone)
            self.notices.deleted(deleted)
            self.metrics.sessions_deleted(len(deleted), reason)
        return deleted

    async def _expire_now(self, session_id: str) -> bool:
        """Delete ``session_id`` now if it has expired, as the sweep would; whether it is gone."""
        try:
            return bool(await self.expire(session_id, "expired", retention_ms=self.expiry.retention_ms))
        except SessionNotFoundError:
            return True

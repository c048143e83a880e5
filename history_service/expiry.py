"""When a session expires (docs/protocol.md §6.5): its own ``expiresAt``, or the retention after its last write.

A session stays while any session below it in its subagent tree does: its tree's time is
its own while that is to come; once past, the latest time still to come below it.
"""

from __future__ import annotations

import enum
from typing import Final

from codec import SessionHeader
from persistence import HistoryStore, SessionNotFoundError, expires_at_of, expiry, now_ms

__all__ = ["DEFAULT", "Default", "Expiry"]


class Default(enum.Enum):
    """The settings' value, where ``None`` means something else."""

    DEFAULT = enum.auto()


DEFAULT: Final = Default.DEFAULT


class Expiry:
    """The expiry rules of one store, under the service's retention (``retention_ms``; ``None``: forever)."""

    def __init__(self, store: HistoryStore, retention_ms: int | None) -> None:
        self.store = store
        self.retention_ms = retention_ms

    def expires_at(self, header: SessionHeader, touched_at: int) -> int | None:
        """When a session expires (§6.5): its own ``expiresAt``, or the retention after its last write."""
        return expiry(expires_at_of(header), touched_at, self.retention_ms)

    def expired(self, header: SessionHeader, touched_at: int) -> bool:
        at = self.expires_at(header, touched_at)
        return at is not None and at <= now_ms()

    async def tree_expires_at(
        self, header: SessionHeader, touched_at: int, retention_ms: int | None | Default = DEFAULT
    ) -> int | None:
        """When a session expires with its subagent tree (§6.5): a session stays while any session below it does.

        Its own time while that is to come; once past, the latest time still to come below it, else its own.
        Only a session whose own time has passed costs store reads.
        """
        retention = self.retention_ms if isinstance(retention_ms, Default) else retention_ms
        own = expiry(expires_at_of(header), touched_at, retention)
        if own is None or own > now_ms():
            return own
        for child in await self.store.children(header.id):
            try:
                info = await self.store.get_session(child.id)
            except SessionNotFoundError:
                continue  # deleted meanwhile
            below = await self.tree_expires_at(info.header, info.touched_at, retention)
            if below is None or below > now_ms():
                return below
        return own

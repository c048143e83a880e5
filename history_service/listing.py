"""The listings (docs/protocol.md §12.1, §12.3): a caller's sessions, and a session's subagent children.

Newest first, after a key. An expired session the sweep has not reached is left out (§6.5),
and each listed one says when it expires.
"""

from __future__ import annotations

from typing import Final

import msgspec

from history_service.access import Access
from history_service.expiry import Expiry
from persistence import (
    HistoryStore,
    SessionKey,
    SessionNotFoundError,
    SessionSummary,
    closed_at_of,
    expires_at_of,
    expiry,
    in_listing,
    newest_first,
    now_ms,
)

__all__ = ["LISTING_READ", "Listing"]

# The least a listing reads of the store at once.
LISTING_READ: Final = 100


class Listing:
    """The listings of one store, under the expiry rules, each session's access checked by `Access`."""

    def __init__(self, store: HistoryStore, access: Access, expiry: Expiry) -> None:
        self.store = store
        self.access = access
        self.expiry = expiry

    async def sessions(
        self, principal: str, limit: int, before: SessionKey | None, closed: bool | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` of the caller's own sessions that are not children, newest first, after ``before``.

        ``closed`` keeps only the closed (``True``) or the open (``False``) ones. An expired
        session not yet swept is left out (§6.5); each listed one's ``expires_at`` is when it expires.
        """
        listed: list[SessionSummary] = []
        while len(listed) < limit:
            # A page of at least `LISTING_READ`: expired sessions the sweep has not reached cost few reads.
            wanted = max(limit - len(listed), LISTING_READ)
            found = await self.store.list_sessions(principal, limit=wanted, before=before, closed=closed)
            for summary in found:
                if (kept := await self._expiring(summary)) is not None:
                    listed.append(kept)
            if len(found) < wanted:
                break
            before = found[-1].key
        return listed[:limit]

    async def _expiring(self, summary: SessionSummary) -> SessionSummary | None:
        """``summary`` with ``expires_at`` when the session expires, or ``None`` once it has."""
        own = expiry(summary.expires_at, summary.touched_at, self.expiry.retention_ms)
        if own is not None and own <= now_ms():
            try:
                info = await self.store.get_session(summary.id)
            except SessionNotFoundError:
                return None  # swept meanwhile
            own = await self.expiry.tree_expires_at(info.header, info.touched_at)
            if own is not None and own <= now_ms():
                return None
        return msgspec.structs.replace(summary, expires_at=own)

    async def subagents(
        self, principal: str, session_id: str, limit: int, before: SessionKey | None, closed: bool | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` of the direct subagent children of the caller's session, newest first, after ``before``.

        A harness need not name a child in the parent's events, so this listing is how a reader finds them all.
        """
        await self.access.owned(principal, session_id, need_head=False)
        listed: list[SessionSummary] = []
        children = [child for child in await self.store.children(session_id) if in_listing(child, closed)]
        # Newest first, until the page is full of live ones: an expired child does not end the listing early.
        for child in newest_first(children, limit=len(children), before=before):
            try:
                info = await self.store.get_session(child.id)
            except SessionNotFoundError:
                continue  # deleted meanwhile
            grandchildren = await self.store.children(child.id)
            summary = await self._expiring(
                SessionSummary(
                    child.id,
                    child.createdAt,
                    info.head_seq,
                    len(grandchildren),
                    closed_at_of(child),
                    expires_at_of(child),
                    info.touched_at,
                )
            )
            if summary is not None:
                listed.append(summary)
                if len(listed) == limit:
                    break
        return listed

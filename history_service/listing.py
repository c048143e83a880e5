"""The listings (docs/protocol.md §12.1, §12.3): a caller's sessions, and a session's subagent children.

Newest first, after a key, each session with its synopsis (`persistence.synopsis`), filtered
by ``match`` when a caller gives one; with the total the filter holds. An expired session
the sweep has not reached is left out (§6.5), and each listed one says when it expires.
"""

from __future__ import annotations

from typing import Final, NamedTuple

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
    matches,
    newest_first,
    now_ms,
)

__all__ = ["LISTING_READ", "Listed", "Listing"]

# The least a listing reads of the store at once.
LISTING_READ: Final = 100


class Listed(NamedTuple):
    """A page of a listing: up to the sessions asked for, and how many the whole listing holds."""

    sessions: list[SessionSummary]
    total: int


class Listing:
    """The listings of one store, under the expiry rules, each session's access checked by `Access`."""

    def __init__(self, store: HistoryStore, access: Access, expiry: Expiry) -> None:
        self.store = store
        self.access = access
        self.expiry = expiry

    async def sessions(
        self,
        principal: str,
        limit: int,
        before: SessionKey | None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> Listed:
        """Up to ``limit`` of the caller's own sessions that are not children, newest first, after ``before``.

        ``closed`` keeps only the closed (``True``) or the open (``False``) ones, and ``match``
        those whose id or title holds it. An expired session not yet swept is left out (§6.5);
        each listed one's ``expires_at`` is when it expires. The total counts every session the
        listing holds whose own expiry time is still to come (`HistoryStore.count_sessions`).
        """
        listed: list[SessionSummary] = []
        while len(listed) < limit:
            # A page of at least `LISTING_READ`: expired sessions the sweep has not reached cost few reads.
            wanted = max(limit - len(listed), LISTING_READ)
            found = await self.store.list_sessions(principal, limit=wanted, before=before, closed=closed, match=match)
            for summary in found:
                if (kept := await self._expiring(summary)) is not None:
                    listed.append(kept)
            if len(found) < wanted:
                break
            before = found[-1].key
        total = await self.store.count_sessions(
            principal, now=now_ms(), retention_ms=self.expiry.retention_ms, closed=closed, match=match
        )
        return Listed(listed[:limit], total)

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
        self,
        principal: str,
        session_id: str,
        limit: int,
        before: SessionKey | None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> Listed:
        """Up to ``limit`` of the direct subagent children of the caller's session, newest first, after ``before``.

        A harness need not name a child in the parent's events, so this listing is how a reader
        finds them all. It reads every child (a session has few), to count them.
        """
        await self.access.owned(principal, session_id, need_head=False)
        listed: list[SessionSummary] = []
        children = [child for child in await self.store.children(session_id) if in_listing(child, closed)]
        # Newest first; an expired child does not end the listing early.
        for child in newest_first(children, limit=len(children), before=None):
            try:
                info = await self.store.get_session(child.id)
                synopsis = await self.store.synopsis(child.id)
            except SessionNotFoundError:
                continue  # deleted meanwhile
            if not matches(child.id, synopsis.title, match):
                continue
            summary = await self._expiring(
                SessionSummary(
                    child.id,
                    child.createdAt,
                    info.head_seq,
                    0,
                    closed_at_of(child),
                    expires_at_of(child),
                    info.touched_at,
                    synopsis,
                )
            )
            if summary is not None:
                listed.append(summary)
        page = [summary for summary in listed if before is None or summary.key < before][:limit]
        counted = [
            msgspec.structs.replace(summary, child_count=len(await self.store.children(summary.id))) for summary in page
        ]
        return Listed(counted, len(listed))

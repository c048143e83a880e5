"""Who may see a session (docs/protocol.md §8.2): its owner, and a subagent child only through its parent's address.

To anyone else a session answers exactly as an unknown id does, so ids leak nothing. A
session's owner and header never change once it exists, so `Access` keeps them once read:
a caller who may not read a session costs one row, and an append need not ask the store.
What is kept is consulted only once the notices committed so far are heard (``settle``), so
a session deleted through another process is never taken for live.
"""

from __future__ import annotations

from collections.abc import Callable

from codec import SessionHeader, incarnation_of
from history_service.errors import NotADirectChild, NotOwner, SubagentChild
from history_service.expiry import Expiry
from history_service.pages import PageCache
from persistence import HistoryStore, Lru, SessionInfo, SessionNotFoundError, now_ms, subagent_parent

__all__ = ["Access", "check_visible"]


def check_visible(principal: str, session_id: str, child: str | None, info: SessionInfo) -> None:
    """Refuse, as §8 says, a session ``info`` that the address ``session_id`` (and ``child``) may not show the caller.

    For a child address the parent is checked apart; ``info`` is then the child's.
    """
    if child is None:
        if info.owner != principal:
            raise NotOwner(session_id)
        parent = subagent_parent(info.header)
        if parent is not None:
            raise SubagentChild(session_id, parent=parent)
    elif subagent_parent(info.header) != session_id:
        if info.owner == principal:
            raise NotADirectChild(child, parent=session_id)
        raise NotOwner(child)


class Access:
    """The access checks of live sessions, and what this process keeps of them: owners, headers (of up to
    ``sessions``) and ``pages``.

    ``settle`` hears the other processes' notices committed so far (`history_service.notices.Notices.settle`).
    """

    def __init__(
        self,
        store: HistoryStore,
        expiry: Expiry,
        *,
        sessions: int,
        pages: PageCache,
        settle: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.expiry = expiry
        self._pages = pages
        self._settle = settle
        # Owner and header never change once a session exists (but for closedAt, which the store
        # checks on every append), so appends need not ask the store. With them, when the session
        # was last written as far as this process knows: never later than it was (see `live`).
        self._owners: Lru[str, tuple[str, SessionHeader, int]] = Lru(sessions)
        # The incarnation each recently deleted id had: nothing of it is learned or kept again.
        self._gone: Lru[str, str] = Lru(sessions)

    @property
    def sessions_known(self) -> int:
        """How many sessions' owner and header this process keeps."""
        return len(self._owners)

    def learn(self, info: SessionInfo) -> None:
        if self._gone.get(info.header.id) != info.incarnation:
            # A read that began before the delete ended must not bring the deleted session back.
            self._owners.put(info.header.id, (info.owner, info.header, info.touched_at))

    async def live(self, info: SessionInfo) -> SessionInfo:
        """``info``, unless the session has expired: then it answers as unknown (§6.5), swept or not."""
        at = await self.expiry.tree_expires_at(info.header, info.touched_at)
        if at is not None and at <= now_ms():
            raise SessionNotFoundError(info.header.id)
        return info

    async def known(self, session_id: str) -> tuple[str, SessionHeader]:
        """The owner and header of a live session, from what this process keeps when it can.

        What is kept may say expired when another process has written the session since: only
        the store, read again, says so for sure.
        """
        self._settle()
        known = self._owners.get(session_id)
        if known is None or self.expiry.expired(known[1], known[2]):
            info = await self.live(await self.store.get_session(session_id))
            self.learn(info)
            return info.owner, info.header
        return known[0], known[1]

    def deleted(self, session_id: str, incarnation: str) -> bool:
        return self._gone.get(session_id) == incarnation

    def forget(self, session_id: str | None, incarnation: str | None = None) -> None:
        """Drop what this process keeps of a deleted session: its owner, header and pages.

        Only of ``incarnation`` when given (a late notice must not drop the id's next one); of every
        session when ``session_id`` is ``None`` (notices may have been lost).
        """
        if session_id is None:
            self._owners.clear()
            self._pages.clear()
            return
        known = self._owners.get(session_id)
        if known is not None and incarnation in (None, incarnation_of(known[1])):
            self._owners.pop(session_id)
            incarnation = incarnation_of(known[1])
        if incarnation is not None:
            self._gone.put(session_id, incarnation)
        self._pages.forget(session_id, incarnation)

    def drop(self, session_id: str) -> None:
        """Forget what is kept of ``session_id``: the next request reads it afresh."""
        self._owners.pop(session_id)

    async def owned(self, principal: str, session_id: str, *, need_head: bool = True) -> SessionInfo:
        """The caller's own live session; without ``need_head``, from what is kept, its head unread (-1)."""
        if not need_head:
            owner, header = await self.known(session_id)
            if owner != principal:
                raise NotOwner(session_id)
            return SessionInfo(header, owner, -1)
        info = await self.live(await self.store.get_session(session_id))
        if info.owner != principal:
            raise NotOwner(session_id)
        self.learn(info)
        return info

    async def readable(
        self, principal: str, session_id: str, child: str | None = None, *, incarnation: str | None = None
    ) -> SessionInfo:
        """The session a page or follow address names, if the caller may read it.

        ``incarnation``, when given, must be the session's: another one is gone (§2.5), and answers as unknown.
        """
        if child is not None:
            await self.owned(principal, session_id, need_head=False)
        info = await self.live(await self.store.get_session(child or session_id))
        self.learn(info)
        check_visible(principal, session_id, child, info)
        if incarnation is not None and incarnation != info.incarnation:
            raise SessionNotFoundError(info.header.id)
        return info

"""What the endpoints do, once parsed: access rules, appends that wake followers, pages.

Access (docs/protocol.md §8): a session is visible only to its owner; to anyone else it
answers exactly as an unknown id does (404), so ids leak nothing. A subagent child is read
only through its parent's address, by the parent's owner.

A store failure reaches the caller as 503 ``store_unavailable`` with a fixed message; what
failed, with file paths and driver messages, goes to the server log, never to the caller.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence

from codec import Event, SessionHeader, encode, snapshot_body
from history_service.errors import ApiError
from history_service.follow import Hub, sse_frame
from history_service.pages import PageCache, PageQuery, PageReader, ServedPage
from history_service.settings import Settings
from persistence import (
    AppendResult,
    HistoryStore,
    SeqConflictError,
    SessionExistsError,
    SessionInfo,
    SessionKey,
    SessionNotFoundError,
    SessionSummary,
    StoreError,
    subagent_parent,
)
from persistence.locks import KeyedLocks
from persistence.lru import Lru

__all__ = ["HistoryService", "unavailable"]

logger = logging.getLogger(__name__)


def unavailable(exc: StoreError, doing: str) -> ApiError:
    """Log a store failure in full and return the fixed 503 the caller sees."""
    logger.error("store failure while %s: %s", doing, exc, exc_info=exc)
    return ApiError(503, "store_unavailable", f"the store failed while {doing}; the server log has the details")


def _not_found(session_id: str) -> ApiError:
    return ApiError(404, "session_not_found", f"no session {session_id!r}")


def _check_visible(principal: str, session_id: str, child: str | None, info: SessionInfo) -> None:
    """Refuse, as §8 says, a session ``info`` that the address ``session_id`` (and ``child``) may not show the caller.

    For a child address the parent is checked apart; ``info`` is then the child's.
    """
    if child is None:
        if info.owner != principal:
            raise _not_found(session_id)
        parent = subagent_parent(info.header)
        if parent is not None:
            raise ApiError(
                403,
                "subagent_child",
                f"session {session_id!r} is a subagent child; read it through "
                f"/v1/sessions/{parent}/subagents/{session_id}",
            )
    elif subagent_parent(info.header) != session_id:
        if info.owner == principal:
            raise ApiError(
                403, "not_a_direct_child", f"session {child!r} is not a direct subagent child of {session_id!r}"
            )
        raise _not_found(child)


class HistoryService:
    """The service state a lifespan owns: the store, the follow hub and the page cache."""

    def __init__(self, settings: Settings, store: HistoryStore) -> None:
        self.settings = settings
        self.store = store
        self.hub = Hub(
            store,
            settings.follow_buffer,
            ping_interval=settings.ping_interval,
            coalesce=settings.follow_coalesce_ms / 1000,
        )
        self.cache = PageCache(settings.page_cache_bytes, settings.page_cache_entries)
        self.pages = PageReader(store, self.cache)
        self._append_locks = KeyedLocks()
        # Owner and header never change once a session exists, so appends need not ask the store.
        self._owners: Lru[str, tuple[str, SessionHeader]] = Lru(settings.session_cache)

    @property
    def sessions_known(self) -> int:
        """How many sessions' owner and header this process keeps (at most ``settings.session_cache``)."""
        return len(self._owners)

    @property
    def sessions_appending(self) -> int:
        """How many sessions have an append lock: those with an append in flight or waiting."""
        return len(self._append_locks)

    def _learn(self, info: SessionInfo) -> None:
        self._owners.put(info.header.id, (info.owner, info.header))

    async def _session(self, session_id: str) -> SessionInfo | None:
        try:
            return await self.store.get_session(session_id)
        except SessionNotFoundError:
            return None
        except StoreError as exc:
            raise unavailable(exc, f"reading session {session_id!r}") from exc

    async def _owned(self, principal: str, session_id: str, *, need_head: bool = True) -> SessionInfo:
        known = self._owners.get(session_id)
        if known is not None and not need_head:
            owner, header = known
            if owner != principal:
                raise _not_found(session_id)
            return SessionInfo(header, owner, -1)
        info = await self._session(session_id)
        if info is None or info.owner != principal:
            raise _not_found(session_id)
        self._learn(info)
        return info

    async def readable(self, principal: str, session_id: str, child: str | None = None) -> SessionInfo:
        """The session a page or follow address names, if the caller may read it."""
        if child is not None:
            await self._owned(principal, session_id, need_head=False)
        info = await self._session(child or session_id)
        if info is None:
            raise _not_found(child or session_id)
        self._learn(info)
        _check_visible(principal, session_id, child, info)
        return info

    async def sessions(self, principal: str, limit: int, before: SessionKey | None) -> list[SessionSummary]:
        """Up to ``limit`` of the caller's own sessions that are not children, newest first, after ``before``."""
        try:
            return await self.store.list_sessions(principal, limit=limit, before=before)
        except StoreError as exc:
            raise unavailable(exc, "listing sessions") from exc

    async def create(self, principal: str, header: SessionHeader) -> SessionInfo:
        parent = subagent_parent(header)
        if parent is not None:
            try:
                await self._owned(principal, parent)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                raise ApiError(422, "invalid_parent", f"no session {parent!r} to be the parent") from None
        try:
            info = await self.store.create_session(header, owner=principal)
        except SessionExistsError as exc:
            raise ApiError(409, "session_exists", f"session {header.id!r} already exists") from exc
        except StoreError as exc:
            raise unavailable(exc, f"creating session {header.id!r}") from exc
        self._learn(info)
        return info

    async def append(self, principal: str, session_id: str, events: Sequence[Event]) -> AppendResult:
        await self._owned(principal, session_id, need_head=False)
        # Publishing under the lock keeps each session's frames in seq order.
        async with self._append_locks.hold(session_id):
            try:
                result = await self.store.append(session_id, events)
            except SeqConflictError as exc:
                raise ApiError(409, "seq_conflict", str(exc), headSeq=exc.head_seq) from exc
            except StoreError as exc:
                raise unavailable(exc, f"appending to session {session_id!r}") from exc
            if not result.idempotent:
                self.hub.publish(session_id, events)
        return result

    async def page(
        self, principal: str, session_id: str, child: str | None, query: PageQuery, coding: str = "identity"
    ) -> ServedPage:
        """The page an address names, if the caller may read it: one store read once its owner is known.

        Access is decided on the session's owner and header, which never change and are
        kept once read, before any record is read; an immutable page (explicit ``through``)
        then comes from the cache when it is there.
        """
        if child is not None:
            await self._owned(principal, session_id, need_head=False)
        target = child or session_id
        known = self._owners.get(target)
        if known is None:
            # Who may read it is settled before any record is read: a caller who may not costs one row.
            info = await self._session(target)
            if info is None:
                raise _not_found(target)
            self._learn(info)
            known = (info.owner, info.header)
        _check_visible(principal, session_id, child, SessionInfo(known[1], known[0], -1))
        if query.through is not None:
            cached = await self.pages.cached(target, query, coding)
            if cached is not None:
                return cached
        try:
            read = await self.pages.read(target, query)
        except SessionNotFoundError:
            raise _not_found(target) from None
        except StoreError as exc:
            raise unavailable(exc, f"reading a page of session {target!r}") from exc
        head = read.info.head_seq
        if query.through is not None and query.through > head:
            raise ApiError(400, "invalid_parameter", f"through {query.through} is beyond the head {head}")
        try:
            return await self.pages.serve(read, query, coding)
        except StoreError as exc:
            raise unavailable(exc, f"reading a page of session {target!r}") from exc

    async def follow(self, session_id: str, *, after: int | None, max_messages: int) -> AsyncIterator[bytes]:
        """The follow stream of a session the caller may read: opening frames, then events, until shutdown."""

        async def snapshot(info: SessionInfo) -> bytes:
            # The tail page at through = cursor, with the header and cursor in front of its own fields.
            query = PageQuery(
                through=info.head_seq, before=None, max_messages=max_messages, max_bytes=self.settings.default_max_bytes
            )
            return snapshot_body(info.header, info.head_seq, (await self.pages.page(info, query)).body.join())

        try:
            async with self.hub.subscribe(
                session_id, after=after, snapshot=snapshot, retry_ms=self.settings.retry_ms
            ) as subscription:
                async for chunk in subscription:
                    yield chunk
        except StoreError as exc:
            # The status line is sent already: end the stream with an error frame the client retries on.
            unavailable(exc, f"following session {session_id!r}")
            yield sse_frame("error", encode({"code": "store_unavailable"}))

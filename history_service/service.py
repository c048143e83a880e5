"""What the endpoints do, once parsed: the service a lifespan owns, made of one part per concept.

* access to sessions, and what this process keeps of them (`history_service.access`);
* their lives: create, append, close, delete (`history_service.lifecycle`);
* the listings (`history_service.listing`);
* expiry and the sweep (`history_service.expiry`, `history_service.sweep`);
* pages (`history_service.pages`), and follow streams (`history_service.followers`) fed by
  the hub (`history_service.follow`), which hears of every change through the process's
  one fan-out (`history_service.notices`) and counts under the one `FollowerCap`.

Every failure is raised as what happened: a store error as the store raised it, a refusal
as one of `history_service.errors`. How each is answered, and which are logged, is decided
at the edge, in one table (`history_service.answers.ERRORS`).
"""

from __future__ import annotations

import anyio

from history_service.access import Access, check_visible
from history_service.budget import InFlight
from history_service.expiry import Expiry
from history_service.follow import Hub
from history_service.follower_cap import FollowerCap
from history_service.followers import Followers
from history_service.lifecycle import Lifecycle
from history_service.listing import Listing
from history_service.metrics import Metrics
from history_service.notices import Notices
from history_service.pages import PageCache, PageQuery, PageReader, ServedPage
from history_service.search import Search
from history_service.settings import Settings
from history_service.sweep import Sweeper, Swept
from persistence import HistoryStore, SessionInfo, SessionNotFoundError

__all__ = ["HistoryService", "Swept"]


class HistoryService:
    """The service state a lifespan owns: the store, the parts over it, the follow hub and the page cache.

    ``closing`` is the app's one shutdown signal: the hub's, and the Durable Streams reads'.
    """

    def __init__(self, settings: Settings, store: HistoryStore, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.settings = settings
        self.store = store
        self.closing = anyio.Event()
        self.notices = Notices(store.listener())
        self.cap = FollowerCap(settings.follower_cap)
        self.cache = PageCache(settings.page_cache_bytes, settings.page_cache_entries)
        self.expiry = Expiry(store, settings.retention_ms)
        self.access = Access(
            store, self.expiry, sessions=settings.session_cache, pages=self.cache, settle=self.notices.settle
        )
        self.hub = Hub(
            store,
            settings.follow_buffer,
            ping_interval=settings.ping_interval,
            coalesce=settings.follow_coalesce_ms / 1000,
            metrics=self.metrics,
            forget=self.access.forget,
            closing=self.closing,
        )
        self.notices.subscribe(self.hub)
        self.inflight = InFlight(settings.inflight_bytes, wait=settings.inflight_wait, shapes=settings.session_cache)
        self.pages = PageReader(
            store,
            self.cache,
            inflight=self.inflight,
            metrics=self.metrics,
            gone=self.access.deleted,
            settle=self.notices.settle,
        )
        self.reading, self.sending = self.inflight.reading, self.inflight.sending
        self.lifecycle = Lifecycle(store, self.access, self.expiry, self.notices, self.metrics)
        self.listing = Listing(store, self.access, self.expiry)
        self.searching = Search(store, self.expiry)
        self.sweeper = Sweeper(store, self.expiry, self.lifecycle, batch=settings.sweep_batch)
        self.follows = Followers(
            settings, self.hub, self.cap, pages=self.pages, inflight=self.inflight, metrics=self.metrics
        )
        # The service's verbs, each the method of the part that owns its concept.
        self.readable = self.access.readable
        self.sessions = self.listing.sessions
        self.subagents = self.listing.subagents
        self.search = self.searching.search
        self.synopsis = store.synopsis
        self.create = self.lifecycle.create
        self.append = self.lifecycle.append
        self.close = self.lifecycle.close
        self.delete = self.lifecycle.delete
        self.expires_at = self.expiry.expires_at
        self.tree_expires_at = self.expiry.tree_expires_at
        self.sweep = self.sweeper.sweep
        self.expired_now = self.sweeper.expired_now
        self.sweeping = self.sweeper.sweeping
        self.admit_follower = self.follows.admit
        self.follower_left = self.follows.leave
        self.follow = self.follows.stream

    @property
    def followers(self) -> int:
        """How many follow streams are open: ``/v1`` follows and live ``/ds`` reads together."""
        return self.cap.open

    @property
    def sessions_known(self) -> int:
        """How many sessions' owner and header this process keeps (at most ``settings.session_cache``)."""
        return self.access.sessions_known

    @property
    def sessions_appending(self) -> int:
        """How many sessions have an append lock: those with an append in flight or waiting."""
        return len(self.lifecycle.append_locks)

    async def page(
        self, principal: str, session_id: str, child: str | None, query: PageQuery, coding: str = "identity"
    ) -> ServedPage:
        """The page an address names, if the caller may read it (`PageReader.page`).

        Access is decided on the session's owner and header, which never change and are
        kept once read, before any record is read: a caller who may not costs one row.
        """
        if child is not None:
            await self.access.owned(principal, session_id, need_head=False)
        target = child or session_id
        owner, header = await self.access.known(target)
        info = SessionInfo(header, owner, -1)
        check_visible(principal, session_id, child, info)
        try:
            return await self.pages.page(target, query, coding, incarnation=info.incarnation)
        except SessionNotFoundError:
            # Perhaps deleted through another process, and created again: the next request reads it afresh.
            self.access.drop(target)
            raise

"""What the endpoints do, once parsed: access rules, appends that wake followers, pages.

Access (docs/protocol.md §8): a session is visible only to its owner; to anyone else it
answers exactly as an unknown id does, so ids leak nothing. A subagent child is read only
through its parent's address, by the parent's owner.

Every failure is raised as what happened: a store error as the store raised it, a refusal
as one of `history_service.errors`. How each is answered, and which are logged, is decided
at the edge, in one table (`history_service.errors.ERRORS`).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Final, NamedTuple

import anyio
import msgspec

from codec import Event, SessionHeader, incarnation_of, snapshot_body
from history_service.access import check_visible
from history_service.budget import Hold, InFlight
from history_service.errors import (
    InvalidHeader,
    InvalidParent,
    NotOwner,
    Overloaded,
)
from history_service.follow import Hub
from history_service.metrics import Metrics
from history_service.pages import PageCache, PageQuery, PageReader, ServedPage
from history_service.responses import SEND_SIZE
from history_service.settings import Settings
from persistence import (
    AppendResult,
    HistoryStore,
    KeyedLocks,
    Life,
    Lru,
    SeqConflictError,
    SessionExistsError,
    SessionInfo,
    SessionKey,
    SessionNotFoundError,
    SessionSummary,
    StoreError,
    StreamStore,
    closed_at_of,
    expires_at_of,
    expiry,
    in_listing,
    newest_first,
    now_ms,
    subagent_parent,
)

__all__ = ["HistoryService", "Swept"]

logger = logging.getLogger(__name__)


class Default(enum.Enum):
    """The settings' value, where ``None`` means something else."""

    DEFAULT = enum.auto()


DEFAULT: Final = Default.DEFAULT


class Swept(NamedTuple):
    """What a sweep did: the ids deleted (each tree whole), those it could not, and the Durable Streams it expired."""

    deleted: list[str]
    failed: list[str]
    streams: list[str] = []


# The least a listing reads of the store at once.
LISTING_READ: Final = 100


class HistoryService:
    """The service state a lifespan owns: the store, the follow hub and the page cache."""

    def __init__(self, settings: Settings, store: HistoryStore, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.settings = settings
        self.store = store
        self.hub = Hub(
            store,
            settings.follow_buffer,
            ping_interval=settings.ping_interval,
            coalesce=settings.follow_coalesce_ms / 1000,
            metrics=self.metrics,
            forget=self._forget,
        )
        self.cache = PageCache(settings.page_cache_bytes, settings.page_cache_entries)
        self.inflight = InFlight(settings.inflight_bytes, wait=settings.inflight_wait, shapes=settings.session_cache)
        self.pages = PageReader(store, self.cache, inflight=self.inflight, metrics=self.metrics, gone=self._deleted)
        self.reading, self.sending = self.inflight.reading, self.inflight.sending
        self.followers = 0
        self._append_locks = KeyedLocks()
        # Owner and header never change once a session exists (but for closedAt, which the store
        # checks on every append), so appends need not ask the store. With them, when the session
        # was last written as far as this process knows: never later than it was (see `_live`).
        self._owners: Lru[str, tuple[str, SessionHeader, int]] = Lru(settings.session_cache)
        # The incarnation each recently deleted id had: nothing of it is learned or kept again.
        self._gone: Lru[str, str] = Lru(settings.session_cache)

    @property
    def sessions_known(self) -> int:
        """How many sessions' owner and header this process keeps (at most ``settings.session_cache``)."""
        return len(self._owners)

    @property
    def sessions_appending(self) -> int:
        """How many sessions have an append lock: those with an append in flight or waiting."""
        return len(self._append_locks)

    def _learn(self, info: SessionInfo) -> None:
        if self._gone.get(info.header.id) != info.incarnation:
            # A read that began before the delete ended must not bring the deleted session back.
            self._owners.put(info.header.id, (info.owner, info.header, info.touched_at))

    def expires_at(self, header: SessionHeader, touched_at: int) -> int | None:
        """When a session expires (§6.5): its own ``expiresAt``, or the retention after its last write."""
        return expiry(expires_at_of(header), touched_at, self.settings.retention_ms)

    def _expired(self, header: SessionHeader, touched_at: int) -> bool:
        at = self.expires_at(header, touched_at)
        return at is not None and at <= now_ms()

    async def tree_expires_at(
        self, header: SessionHeader, touched_at: int, retention_ms: int | None | Default = DEFAULT
    ) -> int | None:
        """When a session expires with its subagent tree (§6.5): a session stays while any session below it does.

        Its own time while that is to come; once past, the latest time still to come below it, else its own.
        Only a session whose own time has passed costs store reads.
        """
        retention = self.settings.retention_ms if isinstance(retention_ms, Default) else retention_ms
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

    async def _live(self, info: SessionInfo) -> SessionInfo:
        """``info``, unless the session has expired: then it answers as unknown (§6.5), swept or not."""
        at = await self.tree_expires_at(info.header, info.touched_at)
        if at is not None and at <= now_ms():
            raise SessionNotFoundError(info.header.id)
        return info

    async def _known(self, session_id: str) -> tuple[str, SessionHeader]:
        """The owner and header of a live session, from what this process keeps when it can.

        What is kept may say expired when another process has written the session since: only
        the store, read again, says so for sure.
        """
        known = self._owners.get(session_id)
        if known is None or self._expired(known[1], known[2]):
            info = await self._live(await self.store.get_session(session_id))
            self._learn(info)
            return info.owner, info.header
        return known[0], known[1]

    def _deleted(self, session_id: str, incarnation: str) -> bool:
        return self._gone.get(session_id) == incarnation

    def _forget(self, session_id: str | None, incarnation: str | None = None) -> None:
        """Drop what this process keeps of a deleted session: its owner, header and pages.

        Only of ``incarnation`` when given (a late notice must not drop the id's next one); of every
        session when ``session_id`` is ``None`` (notices may have been lost).
        """
        if session_id is None:
            self._owners.clear()
            self.cache.clear()
            return
        known = self._owners.get(session_id)
        if known is not None and incarnation in (None, incarnation_of(known[1])):
            self._owners.pop(session_id)
            incarnation = incarnation_of(known[1])
        if incarnation is not None:
            self._gone.put(session_id, incarnation)
        self.cache.forget(session_id, incarnation)

    async def _owned(self, principal: str, session_id: str, *, need_head: bool = True) -> SessionInfo:
        if not need_head:
            owner, header = await self._known(session_id)
            if owner != principal:
                raise NotOwner(session_id)
            return SessionInfo(header, owner, -1)
        info = await self._live(await self.store.get_session(session_id))
        if info.owner != principal:
            raise NotOwner(session_id)
        self._learn(info)
        return info

    async def readable(
        self, principal: str, session_id: str, child: str | None = None, *, incarnation: str | None = None
    ) -> SessionInfo:
        """The session a page or follow address names, if the caller may read it.

        ``incarnation``, when given, must be the session's: another one is gone (§2.5), and answers as unknown.
        """
        if child is not None:
            await self._owned(principal, session_id, need_head=False)
        info = await self._live(await self.store.get_session(child or session_id))
        self._learn(info)
        check_visible(principal, session_id, child, info)
        if incarnation is not None and incarnation != info.incarnation:
            raise SessionNotFoundError(info.header.id)
        return info

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
        own = expiry(summary.expires_at, summary.touched_at, self.settings.retention_ms)
        if own is not None and own <= now_ms():
            try:
                info = await self.store.get_session(summary.id)
            except SessionNotFoundError:
                return None  # swept meanwhile
            own = await self.tree_expires_at(info.header, info.touched_at)
            if own is not None and own <= now_ms():
                return None
        return msgspec.structs.replace(summary, expires_at=own)

    async def subagents(
        self, principal: str, session_id: str, limit: int, before: SessionKey | None, closed: bool | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` of the direct subagent children of the caller's session, newest first, after ``before``.

        A harness need not name a child in the parent's events, so this listing is how a reader finds them all.
        """
        await self._owned(principal, session_id, need_head=False)
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
                await self._owned(principal, parent)
            except (SessionNotFoundError, NotOwner):
                raise InvalidParent(parent) from None
        try:
            info = await self.store.create_session(header, owner=principal)
        except SessionExistsError:
            # An expired session the sweep has not reached is gone already (§6.5): its id is free.
            if not await self._expire_now(header.id):
                raise
            info = await self.store.create_session(header, owner=principal)
        self._learn(info)
        return info

    @contextlib.contextmanager
    def _written(self, session_id: str, life: Life) -> Iterator[None]:
        """Around a write to ``life``: if the store finds that life over, what this process keeps of it goes too."""
        try:
            yield
        except SessionNotFoundError:
            # Deleted since it was checked (through another process, perhaps): the next request reads it afresh.
            self._forget(session_id, life.incarnation)
            raise

    async def append(self, principal: str, session_id: str, events: Sequence[Event]) -> AppendResult:
        """Append to the caller's session (§6.2), in the life checked: one deleted meanwhile is not written (§6.4)."""
        owned = await self._owned(principal, session_id, need_head=False)
        # Publishing under the lock keeps each session's frames in seq order.
        async with self._append_locks.hold(session_id):
            try:
                with self._written(session_id, owned.life):
                    result = await self.store.append(session_id, events, life=owned.life)
            except SeqConflictError:
                self.metrics.seq_conflict()
                raise
            self.metrics.appended(result.head_seq - result.first_seq + 1, idempotent=result.idempotent)
            if not result.idempotent:
                self.hub.publish(session_id, events, owned.incarnation)
        return result

    async def close(self, principal: str, session_id: str) -> SessionInfo:
        """Close the caller's session (§6.3): durable before it returns, then every follower is told."""
        owned = await self._owned(principal, session_id, need_head=False)
        # Under the append lock: the session's last events are published before its end.
        async with self._append_locks.hold(session_id):
            now = time.time_ns() // 1_000_000
            with self._written(session_id, owned.life):
                info = await self.store.close_session(session_id, closed_at=now, life=owned.life)
            self._learn(info)
            if info.header.closedAt == now:
                # This close, not an earlier one, closed it (a repeat keeps the first time).
                self.metrics.session_closed()
            self.hub.ended(session_id, info.head_seq)
        return info

    async def delete(self, principal: str, session_id: str, *, reason: str = "request") -> list[str]:
        """Delete the caller's session and its subagent tree (§6.4): durable before it returns; followers are told.

        ``reason`` is what the metrics count it as: ``request``, or ``expired`` for the sweeper.
        """
        owned = await self._owned(principal, session_id)
        return await self._delete(session_id, reason, life=owned.life)

    async def _delete(
        self, session_id: str, reason: str, *, life: Life | None = None, retention_ms: int | None | Default = DEFAULT
    ) -> list[str]:
        """Delete ``life`` of the id, and its tree; without one, the life there now unless it is live (a sweep's)."""
        # Shielded: once the store has the delete, this process is told of it, whatever becomes of the request.
        with anyio.CancelScope(shield=True):
            async with self._append_locks.hold(session_id):
                if life is None:
                    # Read again under the append lock: an append of this process since the sweep's read keeps it,
                    # and so does a session below it that is still live.
                    info = await self.store.get_session(session_id)
                    at = await self.tree_expires_at(info.header, info.touched_at, retention_ms)
                    if at is None or at > now_ms():
                        return []
                    life = info.life
                with self._written(session_id, life):
                    deleted = await self.store.delete_session(session_id, life=life)
            for gone in deleted:
                self._forget(gone)
            self.hub.deleted(deleted)
            self.metrics.sessions_deleted(len(deleted), reason)
        return deleted

    async def _expire_now(self, session_id: str) -> bool:
        """Delete ``session_id`` now if it has expired, as the sweep would; whether it is gone."""
        try:
            return bool(await self._delete(session_id, "expired", retention_ms=self.settings.retention_ms))
        except SessionNotFoundError:
            return True

    async def expired_now(self, retention_ms: int | None) -> list[str]:
        """The ids a sweep with ``retention_ms`` would delete now, each with its tree (§6.5), by id."""
        found = await self.store.expired(now=now_ms(), retention_ms=retention_ms, limit=None)
        gone = []
        for session_id in sorted(found):
            try:
                info = await self.store.get_session(session_id)
            except SessionNotFoundError:
                continue
            at = await self.tree_expires_at(info.header, info.touched_at, retention_ms)
            if at is not None and at <= now_ms():
                gone.append(session_id)
        return gone

    async def sweep(self, retention_ms: int | None | Default = DEFAULT) -> Swept | None:
        """Delete the expired sessions (§6.5), a batch of ``settings.sweep_batch`` at a time.

        ``retention_ms`` stands for the settings' (``purge --older-than``). Each session is deleted
        with its subagent tree, as a request would delete it, so its followers are told. A session
        it could not delete (kept by a live session below it, or failing) is not asked for again in
        this sweep, so it never holds the others back. ``None`` while another process sweeps the
        same store (`HistoryStore.sweeping`).
        """
        retention = self.settings.retention_ms if isinstance(retention_ms, Default) else retention_ms
        batch, swept = self.settings.sweep_batch, Swept([], [], [])
        passed: set[str] = set()

        async def expire(session_id: str) -> None:
            try:
                deleted = await self._delete(session_id, "expired", retention_ms=retention)
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

        async with self.store.sweeping() as mine:
            if not mine:
                return None
            while True:
                found = await self.store.expired(now=now_ms(), retention_ms=retention, limit=batch, skip=passed)
                # One at a time: beside 50 appending connections, two at once doubled the sweep's share of the
                # event loop and of each group, and raised the appends' p99 with it (issue 25's closing note).
                for session_id in found:
                    await expire(session_id)
                if len(found) < batch:
                    break
            if self.store.streams is not None:
                await self._sweep_streams(self.store.streams, swept)
            return swept

    async def _sweep_streams(self, streams: StreamStore, swept: Swept) -> None:
        """Expire the Durable Streams past their TTL or Expires-At (docs/protocol.md §13.5), one at a time."""
        tried: set[str] = set()
        while True:
            found = [name for name in await streams.expired(now_ms(), self.settings.sweep_batch) if name not in tried]
            if not found:
                return
            for name in found:
                tried.add(name)
                try:
                    if await streams.sweep(name):
                        swept.streams.append(name)
                        if self.hub.streams_changed is not None:
                            self.hub.streams_changed(name)  # its live readers learn it is gone
                except StoreError as exc:
                    logger.error("the sweep cannot expire stream %r: %s", name, exc)

    async def sweeper(self) -> None:
        """Sweep every ``settings.sweep_interval`` seconds, until cancelled; a failure waits for the next."""
        while True:
            try:
                swept = await self.sweep()
            except Exception:
                # Background work: whatever it met, the service serves on, and the next sweep tries again.
                logger.exception("the sweep of expired sessions failed")
            else:
                if swept is not None and swept.deleted:
                    logger.info("swept %d expired sessions", len(swept.deleted))
                if swept is not None and swept.streams:
                    logger.info("swept %d expired Durable Streams", len(swept.streams))
            await anyio.sleep(self.settings.sweep_interval)

    async def page(
        self, principal: str, session_id: str, child: str | None, query: PageQuery, coding: str = "identity"
    ) -> ServedPage:
        """The page an address names, if the caller may read it (`PageReader.page`).

        Access is decided on the session's owner and header, which never change and are
        kept once read, before any record is read: a caller who may not costs one row.
        """
        if child is not None:
            await self._owned(principal, session_id, need_head=False)
        target = child or session_id
        owner, header = await self._known(target)
        info = SessionInfo(header, owner, -1)
        check_visible(principal, session_id, child, info)
        try:
            return await self.pages.page(target, query, coding, incarnation=info.incarnation)
        except SessionNotFoundError:
            # Perhaps deleted through another process, and created again: the next request reads it afresh.
            self._owners.pop(target)
            raise

    async def admit_follower(self, session_id: str, *, snapshot: bool, max_messages: int) -> tuple[Hold, Hold]:
        """A place for a new follow stream, and its snapshot's holds; `Overloaded` when there is none.

        The snapshot holds its estimate both to be read and to be sent, so a stream that could
        not send it is refused with a 503 before it opens. The estimate is what the session's
        last snapshot of that size held, when this process made one, else the byte target; a
        resumed stream has no snapshot and holds nothing. The caller gives both back with
        `follower_left` once the stream ends (`follow` releases them as soon as the snapshot
        is read, and sent).
        """
        if self.followers >= self.settings.follower_cap:
            raise Overloaded(f"{self.followers} follow streams are open, the most this server keeps")
        # Counted before the wait for the budget, so streams waiting meanwhile cannot pass the cap.
        self.followers += 1
        reading: Hold | None = None
        try:
            estimate = self.inflight.estimate(
                (session_id, "snapshot", max_messages), self.settings.default_max_bytes, 2
            )
            reading = await self.reading.hold(estimate if snapshot else 0)
            return reading, await self.sending.hold(estimate if snapshot else 0)
        except BaseException:
            if reading is not None:
                reading.release()
            self.followers -= 1
            raise

    def follower_left(self, holds: tuple[Hold, Hold]) -> None:
        for hold in holds:
            hold.release()
        self.followers -= 1

    async def follow(
        self, info: SessionInfo, holds: tuple[Hold, Hold], *, after: int | None, max_messages: int
    ) -> AsyncGenerator[bytes | memoryview, None]:
        """The follow stream of a session the caller may read: opening frames, then events, until shutdown.

        ``holds`` are the snapshot's, to be read and to be sent (`admit_follower`): the first
        is given back once the snapshot is read, the second once the server has taken its
        last piece. A reader that does not read keeps the second, and so keeps it counted.
        """
        reading, sending = holds
        session_id = info.header.id

        async def snapshot(info: SessionInfo) -> bytes:
            # The tail page at through = cursor, with the header and cursor in front of its own fields.
            query = PageQuery(
                through=info.head_seq,
                before=None,
                max_messages=max_messages,
                max_bytes=self.settings.default_max_bytes,
                incarnation=info.incarnation,
            )
            page = await self.pages.page(session_id, query, holds=holds, incarnation=info.incarnation)
            body = snapshot_body(info.header, info.head_seq, page.body.join())
            self.inflight.learned((session_id, "snapshot", max_messages), len(body))
            sending.resize(len(body))
            reading.release()
            return body

        try:
            async with self.hub.subscribe(
                session_id,
                after=after,
                snapshot=snapshot,
                retry_ms=self.settings.retry_ms,
                incarnation=info.incarnation,
            ) as subscription:
                opened = False
                async for chunk in subscription:
                    if opened:
                        yield chunk
                        continue
                    opened = True
                    # The opening is sent in pieces: each send waits until the socket took the one before.
                    view = memoryview(chunk)
                    for at in range(0, len(view), SEND_SIZE):
                        yield view[at : at + SEND_SIZE]
                    reading.release()
                    sending.release()
        except SessionNotFoundError:
            raise  # deleted meanwhile: not the store's failure
        except StoreError as exc:
            self.metrics.store_error(exc)
            raise

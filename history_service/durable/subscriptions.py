"""The store's subscriptions as one process sees them (docs/protocol.md §13.6): webhooks and pull-wake.

A subscription links streams of its owner, named or matched by a glob ``pattern`` (``*`` one
segment, ``**`` any number), and keeps for each the offset its consumer has acked. When a
linked stream holds data past that offset and no wake is open, it opens one: a new
``generation`` and ``wake_id``, and a snapshot of the tails. A webhook subscription POSTs the
wake, signed; the receiver acks on the callback URL with the token it was sent, or answers
``{"done": true}`` to ack the snapshot. A pull-wake subscription appends a wake event to its
wake stream; a worker claims the wake, acks and releases it. A lease of ``lease_ttl_ms``
bounds a held wake: when it runs out the wake closes, and the next opens if work is pending.
A token or body of a closed wake is refused as `history_service.errors.WakeFenced`. The
requests are `history_service.durable.subscription_api`'s, the deliveries
`history_service.durable.webhooks`', and when the background work runs
`history_service.durable.tending`'s.

Subscriptions live in the store (`persistence.SubscriptionRecord`), their wakes and leases
with them, so they survive a restart and every process of a store serves them alike: each
change is made to the store's current copy and saved over its version, so of two processes
that open a wake at once one does and the other reads it again. A write through any process
wakes them (on PostgreSQL by its notice), and each process reads them all again every
`history_service.durable.tending.RELOAD_S`. A pattern links a stream at the stream's next
write, with nothing acked, since a store cannot list the streams a pattern matches (the
reference links those at their tails when the subscription is made). What a caller can grow
is bounded: subscriptions per owner and per store, streams per subscription, deliveries
waiting, and request bodies.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, TypeVar

import anyio
import httpx
import msgspec
from msgspec import Struct

from history_service.durable import subscription_bodies as bodies, webhooks
from history_service.durable.egress import Egress
from history_service.durable.signing import Signer
from history_service.durable.subscription import Subscription, info, now_ms
from history_service.durable.tails import Tails
from history_service.durable.tending import Tending
from history_service.errors import (
    SubscriptionNotFound,
    SubscriptionRefused,
    WakeFenced,
)
from history_service.logs import Warnings
from history_service.settings import Settings
from persistence import (
    SHARED_OWNER,
    AppendRequest,
    StreamError,
    StreamStore,
    SubscriptionRecord,
)

__all__ = ["KEYS", "Subscriptions"]

logger = logging.getLogger(__name__)

_MAX_SUBSCRIPTIONS: Final = 4096
_MAX_PER_OWNER: Final = 64
_MAX_BODY: Final = 1024 * 1024
# The shared record of the signing keys (`persistence.streams.subscribed.SHARED_OWNER` owns it).
KEYS: Final = "signer"
# Times a change is made again when another process saved the subscription first.
_TRIES: Final = 5

T = TypeVar("T")
Change = Callable[[Subscription], Awaitable[None]]
_UNQUEUED: Final = (
    "a webhook delivery could not be queued (the queue, or its owner's share, is full): its lease reopens the wake"
)


class _Job(Struct, frozen=True):
    """A webhook delivery: of the wake ``generation`` of the owner's subscription ``id``."""

    owner: str
    id: str
    generation: int


def _not_found() -> SubscriptionNotFound:
    return SubscriptionNotFound("Subscription not found")


class Subscriptions:
    """The store's subscriptions, as this process sees them: matched against every write to a generic stream."""

    def __init__(self, settings: Settings, streams: StreamStore | None, changed: Callable[[str], None]) -> None:
        self._streams = streams
        self._tails = Tails(streams)
        self._changed = changed
        # The most a request body of the API holds.
        self.limit = min(settings.max_body_bytes, _MAX_BODY)
        self._signer: Signer | None = None
        self._signing = anyio.Lock()
        # This process's copies of the store's subscriptions, read again before each change and at each reload.
        self._owners: dict[str, dict[str, Subscription]] = {}
        self._tending = Tending()
        self._egress = Egress.of(settings)
        self._deliveries = webhooks.Deliveries[_Job](self._egress)
        self._warnings = Warnings()

    async def on_append(self, name: str, owner: str) -> None:
        """A write to the stream ``name`` committed here (a create with a body, an append, a close).

        The owner's patterns that match it link it before the write is answered; its wakes open in the background.
        """
        for sub in list(self._owners.get(owner, {}).values()):
            if sub.glob is not None and sub.wants(name) and not (name in sub.links and sub.links[name].glob):
                await self._tended(sub, self._matched(name))
        self._touch(self._owners.get(owner, {}).values(), name)

    def heard(self, name: str | None) -> None:
        """A write to ``name`` committed in some process (``None``: notices were lost, perhaps to any stream)."""
        # It may have deleted the stream and made it again, in another life: its offsets are read afresh.
        self._tails.forget_all(name)
        for owned in list(self._owners.values()):
            self._touch(owned.values(), name)

    async def on_delete(self, name: str, owner: str) -> None:
        """The stream ``name`` was deleted here: its links go."""
        self._tails.forget(name, owner)
        for sub in list(self._owners.get(owner, {}).values()):
            if name in sub.links:
                await self._tended(sub, lambda sub: sub.unlink(name, dropped=True))

    async def run(self) -> None:
        """The background work, for the app's lifespan to run until it cancels it: deliveries, and tending."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._deliveries.run, self._deliver)
            try:
                await self._tend()
            finally:
                tasks.cancel_scope.cancel()

    def close(self) -> None:
        """Stop taking work: the app is shutting down."""
        self._tending.close()

    def _touch(self, subs: Iterable[Subscription], name: str | None) -> None:
        for sub in list(subs):
            if name is None or sub.wants(name):
                self._tending.touch(sub.owner, sub.id, name)

    async def signed(self) -> Signer:
        """The store's signing keys, made by the first process to need them."""
        if self._signer is None:
            assert self._streams is not None
            async with self._signing:
                if self._signer is None:
                    shared = SubscriptionRecord(owner=SHARED_OWNER, id=KEYS, config=b"", state=Signer.new_keys())
                    created = await self._streams.create_subscription(shared, _MAX_PER_OWNER, _MAX_SUBSCRIPTIONS)
                    assert created is not None  # the shared owner counts against no limit
                    self._signer = Signer(created[0].state)
        return self._signer

    # What the API (`history_service.durable.subscription_api`) asks for.

    @property
    def tails(self) -> Tails:
        return self._tails

    def rejected(self, url: str) -> str | None:
        """Why ``url`` may not be a webhook's here, or None (`history_service.durable.egress`)."""
        return self._egress.rejected(url)

    async def make(self, record: SubscriptionRecord) -> tuple[Subscription, bool] | None:
        """The subscription of ``record``, made unless its id is taken (whether it was made now); None past a limit."""
        assert self._streams is not None
        made = await self._streams.create_subscription(record, _MAX_PER_OWNER, _MAX_SUBSCRIPTIONS)
        return None if made is None else (self._keep(made[0]), made[1])

    async def view(self, sub: Subscription) -> bodies.View:
        return sub.view(await self.signed(), await self._tails.lives(sub.links, sub.owner))

    async def found(self, owner: str, sub_id: str) -> Subscription:
        """The subscription as the store holds it now, or `SubscriptionNotFound`."""
        sub = await self.read(owner, sub_id)
        if sub is None:
            raise _not_found()
        return sub

    async def remove(self, owner: str, sub_id: str) -> None:
        assert self._streams is not None
        await self._streams.remove_subscription(owner, sub_id)
        self._forget(owner, sub_id)

    # This process's copies, and the changes made to them.

    def _find(self, owner: str, sub_id: str) -> Subscription | None:
        return self._owners.get(owner, {}).get(sub_id)

    def _keep(self, record: SubscriptionRecord) -> Subscription:
        """This process's copy of ``record``: the one it holds, brought up to date, or a new one."""
        sub = self._find(record.owner, record.id)
        if sub is None:
            sub = self._owners.setdefault(record.owner, {})[record.id] = Subscription(record)
        else:
            sub.load(record)
        return sub

    def _forget(self, owner: str, sub_id: str) -> None:
        owned = self._owners.get(owner)
        if owned is not None and owned.pop(sub_id, None) is not None:
            self._tending.forget(owner, sub_id)
            if not owned:
                del self._owners[owner]

    async def read(self, owner: str, sub_id: str) -> Subscription | None:
        """The subscription as the store holds it now, or None (and this process forgets it)."""
        assert self._streams is not None
        record = await self._streams.subscription(owner, sub_id)
        if record is None:
            self._forget(owner, sub_id)
            return None
        return self._keep(record)

    async def change(self, sub: Subscription, change: Callable[[Subscription], Awaitable[T]]) -> T:
        """``change`` made to the store's current ``sub`` under its lock, and saved; made again on the newer
        copy when another process saved first. What it opened (a delivery, a wake event) goes out once saved."""
        assert self._streams is not None
        for _ in range(_TRIES):
            async with sub.lock:
                if await self.read(sub.owner, sub.id) is not sub:
                    raise _not_found()
                before = sub.record()
                opened = sub.opened = []
                try:
                    result = await change(sub)
                    changed = sub.state() != before.state
                    saved = await self._streams.change_subscription(sub.record()) if changed else before
                except BaseException:
                    sub.load(before)  # refused or failed: the copy stays the store's
                    raise
                if saved is None:
                    continue
                sub.version = saved.version
            for trigger in opened:
                await self._announce(sub, trigger)
            return result
        raise WakeFenced("the subscription changed meanwhile: try again")

    def _all(self) -> list[Subscription]:
        return [sub for owned in self._owners.values() for sub in owned.values()]

    async def _reload(self) -> None:
        """Read every subscription of the store again: those other processes made, changed or deleted."""
        assert self._streams is not None
        records = [record for record in await self._streams.subscriptions() if record.owner != SHARED_OWNER]
        present = {(record.owner, record.id) for record in records}
        for record in records:
            known = self._find(record.owner, record.id)
            if known is None or (known.version != record.version and not known.lock.locked()):
                self._keep(record)
        for sub in self._all():
            if (sub.owner, sub.id) not in present and not sub.lock.locked():
                self._forget(sub.owner, sub.id)

    # Wakes: opened, leased, sent and closed.

    def lease(self, sub: Subscription) -> None:
        sub.lease_until = now_ms() + sub.config.lease_ttl_ms
        self._tending.leased()

    async def next(self, sub: Subscription) -> bool:
        """Open the next wake if a linked stream has work pending; whether it did. Within `change`."""
        tails = await self._tails.of(sub)
        first = sub.first_pending(tails)
        if first is None:
            return False
        await self.open(sub, tails, first)
        return True

    async def open(self, sub: Subscription, tails: dict[str, int], trigger: str) -> str:
        """Open a wake over ``tails``, for a write to ``trigger``; within `change`, which sends it once saved."""
        assert self._signer is not None
        sub.generation += 1
        sub.wake_id = wake_id = f"w_{secrets.token_hex(12)}"
        sub.snapshot = dict(tails)
        if sub.config.type == "webhook":
            sub.token = self._signer.token(sub.subject, sub.generation)
            self.lease(sub)
        sub.opened.append(trigger)
        return wake_id

    async def _announce(self, sub: Subscription, trigger: str) -> None:
        """Send the wake just saved: a webhook's delivery, or a pull-wake's event on its wake stream."""
        if sub.config.type == "webhook":
            if not self._deliveries.send(sub.owner, _Job(sub.owner, sub.id, sub.generation)):
                self._warnings.warning(logger, _UNQUEUED)
            return
        wake_stream = sub.config.wake_stream
        if self._streams is None or wake_stream is None:
            return
        event = bodies.WakeEvent(
            subscription_id=sub.id, stream=trigger, generation=sub.generation, ts=int(time.time() * 1000)
        )
        request = AppendRequest(
            name=wake_stream, owner=sub.owner, content_type="application/json", body=msgspec.json.encode(event)
        )
        try:
            await self._streams.append(request)
        except StreamError as exc:
            logger.warning("subscription %r cannot append to its wake stream %r: %s", sub.id, wake_stream, exc)
            return
        # Not `on_append`: a subscription whose pattern matched its own wake stream would wake itself forever.
        self._changed(wake_stream)

    # The background work, one round at a time (`history_service.durable.tending`).

    async def _tend(self) -> None:
        """Until closed: read the store's subscriptions now and then, close the wakes whose lease ran out, and
        open those that writes have made due."""
        tending = self._tending
        while not tending.closing:
            leases = [sub.lease_until for sub in self._all() if sub.lease_until is not None]
            reload = await tending.next_round(leases)
            try:
                if self._streams is not None and reload:
                    await self.signed()
                    await self._reload()
                    tending.loaded()
            except Exception as exc:  # the store may be down: try again at the next round
                self._warnings.warning(logger, "subscriptions could not be read from the store: %s", exc)
                tending.loaded()
                continue
            touched = tending.take()
            now = now_ms()
            for expired in [sub for sub in self._all() if sub.expired(now)]:
                await self._tended(expired, self._expire)
            for (owner, sub_id), trigger in touched.items():
                if (found := self._find(owner, sub_id)) is not None:
                    await self._tended(found, self._due(trigger))

    async def _tended(self, sub: Subscription, change: Change) -> None:
        try:
            await self.change(sub, change)
        except SubscriptionRefused:
            pass  # deleted meanwhile, or changed again and again by other processes: theirs to tend
        except Exception:
            self._warnings.warning(logger, "a subscription's wake could not be tended", exc_info=True)

    async def _expire(self, sub: Subscription) -> None:
        """Close the wake if its lease ran out, and open the next if work is pending."""
        if sub.expired(now_ms()):
            sub.close_wake()
            await self.next(sub)

    def _matched(self, name: str) -> Change:
        """Link ``name``, a stream of the owner's that the pattern matches, with nothing acked."""

        async def match(sub: Subscription) -> None:
            sub.link_matched(name)

        return match

    def _due(self, trigger: str) -> Change:
        """Link ``trigger`` if the pattern matches it, then open a wake if none is open and work is pending."""

        async def due(sub: Subscription) -> None:
            # A notice names no owner: the stream is linked only if it is the subscription owner's.
            if trigger and sub.wants(trigger) and sub.matches_anew(trigger):
                if await self._tails.head(trigger, sub.owner) is not None:
                    sub.link_matched(trigger)
            if sub.wake_id is None and sub.holder is None:
                tails = await self._tails.of(sub)
                if (first := sub.first_pending(tails)) is not None:
                    await self.open(sub, tails, trigger if trigger in tails else first)

        return due

    async def _deliver(self, http: httpx.AsyncClient, job: _Job) -> None:
        sub = self._find(job.owner, job.id)

        def wanted() -> bool:
            return (
                not self._tending.closing
                and sub is not None
                and self._find(job.owner, job.id) is sub
                and sub.generation == job.generation
                and sub.wake_id is not None
            )

        if sub is None or not wanted() or sub.config.webhook is None or sub.wake_id is None or sub.token is None:
            return
        if self._egress.rejected(sub.config.webhook) is not None:
            # Made before this server's egress settings changed: its lease reopens the wake, undelivered.
            await self._tended(sub, self._settled(job, None))
            return
        assert self._signer is not None
        lives = await self._tails.lives(sub.snapshot, sub.owner)
        streams = [
            info(name, link, lives[name], tail) for name, tail in sub.snapshot.items() if (link := sub.links.get(name))
        ]
        body = webhooks.notification(sub.id, sub.wake_id, sub.generation, streams, sub.url("callback"), sub.token)
        done = await webhooks.deliver(http, sub.config.webhook, body, self._signer, wanted=wanted)
        if wanted():
            await self._tended(sub, self._settled(job, done))

    def _settled(self, job: _Job, done: bool | None) -> Change:
        """The delivery of ``job`` is over: whether its receiver took the snapshot whole (None: it failed)."""

        async def settled(sub: Subscription) -> None:
            if sub.generation != job.generation or sub.wake_id is None:
                return
            sub.status = "failed" if done is None else "active"
            if done:
                sub.take_snapshot()
                await self.next(sub)

        return settled

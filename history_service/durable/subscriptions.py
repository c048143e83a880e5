"""The reserved subscription API under ``/ds/v1/stream/__ds/`` (docs/protocol.md §13.6): webhooks and pull-wake.

A subscription links streams of its owner, named or matched by a glob ``pattern`` (``*`` one
segment, ``**`` any number), and keeps for each the offset its consumer has acked. When a
linked stream holds data past that offset and no wake is open, it opens one: a new
``generation`` and ``wake_id``, and a snapshot of the tails. A webhook subscription POSTs the
wake, signed; the receiver acks on the callback URL with the token it was sent, or answers
``{"done": true}`` to ack the snapshot. A pull-wake subscription appends a wake event to its
wake stream; a worker claims the wake, acks and releases it. A lease of ``lease_ttl_ms``
bounds a held wake: when it runs out the wake closes, and the next opens if work is pending.
A token or body of a closed wake is answered 409 FENCED. What crosses the wire, the
signatures and the deliveries are `history_service.durable.webhooks`'.

Subscriptions live in the store (`persistence.SubscriptionRecord`), their wakes and leases
with them, so they survive a restart and every process of a store serves them alike: each
change is made to the store's current copy and saved over its version, so of two processes
that open a wake at once one does and the other reads it again. A write through any process
wakes them (on PostgreSQL by its notice), and each process reads them all again every
`_RELOAD_S`. A pattern links a stream at the stream's next
write, with nothing acked, since a store cannot list the streams a pattern matches (the
reference links those at their tails when the subscription is made). What a caller can grow
is bounded: subscriptions per owner and per store, streams per subscription, deliveries
waiting, and request bodies.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, TypeVar

import anyio
import httpx
import msgspec
from msgspec import Struct
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from codec import parse_stream_offset
from history_service.durable import webhooks
from history_service.durable.egress import Egress
from history_service.durable.streams import plain
from history_service.durable.subscription import Subscription, info, new_record, now_ms
from history_service.durable.tails import Tails
from history_service.durable.webhooks import MAX_LINKS, Callback, Config, Refusal, answer, stream_path
from history_service.logs import Warnings
from history_service.settings import Settings
from persistence import (
    SHARED_OWNER,
    AppendRequest,
    StreamError,
    StreamStore,
    SubscriptionRecord,
)

__all__ = ["Subscriptions"]

logger = logging.getLogger(__name__)

_MAX_SUBSCRIPTIONS: Final = 4096
_MAX_PER_OWNER: Final = 64
_MAX_BODY: Final = 1024 * 1024
_MAX_ID: Final = 256
# The shared record of the signing keys (`persistence.streams.subscribed.SHARED_OWNER` owns it).
_KEYS: Final = "signer"
# Seconds between two reads of every subscription: how soon one made or changed by another process is tended here.
_RELOAD_S: Final = 1.0
# Times a change is made again when another process saved the subscription first.
_TRIES: Final = 5
# The least wait of the background work: a lease it cannot close (the store is down) is tried again, not spun on.
_MOMENT_S: Final = 0.05

T = TypeVar("T")
_ACTIONS: Final = ("callback", "claim", "ack", "release")
_UNQUEUED: Final = (
    "a webhook delivery could not be queued (the queue, or its owner's share, is full): its lease reopens the wake"
)


class _Job(Struct, frozen=True):
    """A webhook delivery: of the wake ``generation`` of the owner's subscription ``id``."""

    owner: str
    id: str
    generation: int


def _not_found() -> Refusal:
    return Refusal(404, "SUBSCRIPTION_NOT_FOUND", "Subscription not found")


def _not_allowed(allowed: str, headers: dict[str, str]) -> Response:
    return PlainTextResponse("method not allowed", 405, {**headers, "Allow": allowed})


class Subscriptions:
    """The store's subscriptions, as this process sees them: matched against every write to a generic stream."""

    def __init__(self, settings: Settings, streams: StreamStore | None, changed: Callable[[str], None]) -> None:
        self._streams = streams
        self._tails = Tails(streams)
        self._changed = changed
        self._limit = min(settings.max_body_bytes, _MAX_BODY)
        self._signer: webhooks.Signer | None = None
        self._signing = anyio.Lock()
        # This process's copies of the store's subscriptions, read again before each change and every `_RELOAD_S`.
        self._owners: dict[str, dict[str, Subscription]] = {}
        self._loaded_at = -math.inf
        # The subscriptions a write has touched since the background work last looked, and the stream that did
        # ("" when any may have: notices were lost).
        self._touched: dict[tuple[str, str], str] = {}
        self._kick = anyio.Event()
        self._egress = Egress.of(settings)
        self._deliveries = webhooks.Deliveries[_Job](self._egress)
        self._warnings = Warnings()
        self._closing = False

    async def handle(self, request: Request, path: str, owner: str | None, headers: dict[str, str]) -> Response:
        """A request to ``__ds/<path>``; ``owner`` is ``None`` for one that proves itself by its wake token alone."""
        if self._streams is None:
            return PlainTextResponse("this store keeps no Durable Streams (docs/protocol.md §13)", 501, headers)
        try:
            signer = await self._signed()
            if owner is None:
                try:
                    owner = signer.owner(webhooks.bearer(request))
                except webhooks.TokenError as exc:
                    raise Refusal(401, exc.code, "Token invalid") from None
            return await self._route(request, path, owner, headers)
        except Refusal as refusal:
            return refusal.answer(headers)

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
        """The deliveries' background work, for the app's lifespan to run until it cancels it."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._deliveries.run, self._deliver)
            try:
                await self._tend()
            finally:
                tasks.cancel_scope.cancel()

    def close(self) -> None:
        """Stop taking work: the app is shutting down."""
        self._closing = True
        self._kick.set()

    def _touch(self, subs: Iterable[Subscription], name: str | None) -> None:
        if self._closing:
            return
        for sub in list(subs):
            if name is None or sub.wants(name):
                self._touched.setdefault((sub.owner, sub.id), name or "")
                self._kick.set()

    async def _signed(self) -> webhooks.Signer:
        """The store's signing keys, made by the first process to need them."""
        if self._signer is None:
            assert self._streams is not None
            async with self._signing:
                if self._signer is None:
                    shared = SubscriptionRecord(
                        owner=SHARED_OWNER, id=_KEYS, config=b"", state=webhooks.Signer.new_keys()
                    )
                    created = await self._streams.create_subscription(shared, _MAX_PER_OWNER, _MAX_SUBSCRIPTIONS)
                    assert created is not None  # the shared owner counts against no limit
                    self._signer = webhooks.Signer(created[0].state)
        return self._signer

    async def _route(self, request: Request, path: str, owner: str, headers: dict[str, str]) -> Response:
        method = request.method
        signer = await self._signed()
        if path == "jwks.json":
            if method != "GET":
                return _not_allowed("GET", headers)
            jwks = {"Content-Type": "application/jwk-set+json", "Cache-Control": "public, max-age=300"}
            return Response(signer.jwks, 200, {**headers, **jwks})
        parts = path.split("/")
        if len(parts) < 2 or parts[0] != "subscriptions" or not parts[1]:
            raise Refusal(404, "SUBSCRIPTION_NOT_FOUND", "Durable Streams control route not found")
        sub_id, rest = parts[1], parts[2:]
        if not plain(sub_id, _MAX_ID) or (owner == SHARED_OWNER and sub_id == _KEYS):
            raise Refusal(
                400, "INVALID_REQUEST", f"a subscription id is 1 to {_MAX_ID} characters, no control characters"
            )
        if not rest:
            if method == "PUT":
                return await self._create(request, owner, sub_id, headers)
            if method == "GET":
                return answer(await self._view(await self._found(owner, sub_id), signer), 200, headers)
            if method == "DELETE":
                await self._remove(owner, sub_id)
                return Response(None, 204, headers)
            return _not_allowed("PUT, GET, DELETE", headers)
        if rest[0] == "streams":
            if method != ("POST" if len(rest) == 1 else "DELETE"):
                return _not_allowed("POST" if len(rest) == 1 else "DELETE", headers)
            if len(rest) == 1:
                await self._link(request, owner, sub_id)
            else:
                name = stream_path("/".join(rest[1:]), "the stream")
                await self._change(await self._found(owner, sub_id), lambda sub: sub.unlink(name))
            return Response(None, 204, headers)
        if len(rest) == 1 and rest[0] in _ACTIONS:
            if method != "POST":
                return _not_allowed("POST", headers)
            if rest[0] == "claim":
                return await self._claim(request, owner, sub_id, headers)
            return await self._settle(request, owner, sub_id, rest[0], headers)
        raise Refusal(404, "SUBSCRIPTION_NOT_FOUND", "Durable Streams control route not found")

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
            self._touched.pop((owner, sub_id), None)
            if not owned:
                del self._owners[owner]

    async def _read(self, owner: str, sub_id: str) -> Subscription | None:
        """The subscription as the store holds it now, or None (and this process forgets it)."""
        assert self._streams is not None
        record = await self._streams.subscription(owner, sub_id)
        if record is None:
            self._forget(owner, sub_id)
            return None
        return self._keep(record)

    async def _found(self, owner: str, sub_id: str) -> Subscription:
        sub = await self._read(owner, sub_id)
        if sub is None:
            raise _not_found()
        return sub

    async def _change(self, sub: Subscription, change: Callable[[Subscription], Awaitable[T]]) -> T:
        """``change`` made to the store's current ``sub`` under its lock, and saved; made again on the newer
        copy when another process saved first. What it opened (a delivery, a wake event) goes out once saved."""
        assert self._streams is not None
        for _ in range(_TRIES):
            async with sub.lock:
                if await self._read(sub.owner, sub.id) is not sub:
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
        raise Refusal(409, "FENCED", "the subscription changed meanwhile: try again")

    async def _remove(self, owner: str, sub_id: str) -> None:
        assert self._streams is not None
        await self._streams.remove_subscription(owner, sub_id)
        self._forget(owner, sub_id)

    async def _create(self, request: Request, owner: str, sub_id: str, headers: dict[str, str]) -> Response:
        assert self._streams is not None
        config = webhooks.config(await webhooks.read(request, webhooks.CREATE, self._limit))
        if (existing := await self._read(owner, sub_id)) is not None:
            return await self._confirm(existing, config, headers)
        if config.webhook is not None and (why := self._egress.rejected(config.webhook)) is not None:
            raise Refusal(400, "WEBHOOK_URL_REJECTED", why)
        links = {name: await self._tails.link(name, owner, explicit=True) for name in config.streams}
        base = str(request.base_url.replace(path=request.scope.get("root_path", ""))).rstrip("/")
        record = new_record(owner, sub_id, config, base, links)
        made = await self._streams.create_subscription(record, _MAX_PER_OWNER, _MAX_SUBSCRIPTIONS)
        if made is None:
            raise Refusal(409, "LIMIT_EXCEEDED", "too many subscriptions: delete one first")
        sub = self._keep(made[0])
        # Another PUT of the same id may have made it while the tails were read.
        if not made[1]:
            return await self._confirm(sub, config, headers)
        return answer(await self._view(sub, await self._signed()), 201, headers)

    async def _confirm(self, existing: Subscription, config: Config, headers: dict[str, str]) -> Response:
        if existing.config != config:
            raise Refusal(409, "SUBSCRIPTION_ALREADY_EXISTS", "Subscription already exists with another configuration")
        assert self._signer is not None
        return answer(await self._view(existing, self._signer), 200, headers)

    async def _view(self, sub: Subscription, signer: webhooks.Signer) -> webhooks.View:
        return sub.view(signer, await self._tails.lives(sub.links, sub.owner))

    async def _link(self, request: Request, owner: str, sub_id: str) -> None:
        given = (await webhooks.read(request, webhooks.STREAMS, self._limit)).streams
        if not given:
            raise Refusal(400, "INVALID_REQUEST", "streams must be a non-empty string array")
        names = list(dict.fromkeys(stream_path(name, "each of streams") for name in given))

        async def link(sub: Subscription) -> None:
            if len(sub.links) + sum(name not in sub.links for name in names) > MAX_LINKS:
                raise Refusal(409, "LIMIT_EXCEEDED", f"a subscription links at most {MAX_LINKS} streams")
            for name in names:
                link = sub.links.get(name) or await self._tails.link(name, owner)
                sub.links[name] = msgspec.structs.replace(link, explicit=True)

        await self._change(await self._found(owner, sub_id), link)

    async def _claim(self, request: Request, owner: str, sub_id: str, headers: dict[str, str]) -> Response:
        worker = (await webhooks.read(request, webhooks.CLAIM, self._limit)).worker
        if not worker or len(worker) > _MAX_ID:
            raise Refusal(400, "INVALID_REQUEST", f"worker must be a string of 1 to {_MAX_ID} characters")
        sub = await self._found(owner, sub_id)
        if sub.config.type != "pull-wake":
            raise Refusal(400, "INVALID_REQUEST", "Subscription is not pull-wake")
        signer = await self._signed()

        async def claim(sub: Subscription) -> webhooks.Claimed:
            if sub.holder is not None and not sub.expired(now_ms()):
                raise Refusal(409, "ALREADY_CLAIMED", "the wake is held", holder=sub.holder, generation=sub.generation)
            if sub.holder is not None:
                sub.close_wake()
            tails = await self._tails.of(sub)
            first = sub.first_pending(tails)
            if first is None:
                raise Refusal(409, "NO_PENDING_WORK", "Subscription has no pending work")
            wake_id = sub.wake_id or await self._open(sub, tails, first)
            sub.holder = worker
            sub.token = token = signer.token(sub.subject, sub.generation)
            self._lease(sub)
            return webhooks.Claimed(
                wake_id=wake_id,
                generation=sub.generation,
                token=token,
                streams=[
                    info(name, link, self._tails.life(name, sub.owner), tails[name])
                    for name, link in sub.links.items()
                    if name in tails
                ],
                lease_ttl_ms=sub.config.lease_ttl_ms,
            )

        return answer(await self._change(sub, claim), 200, headers)

    async def _settle(
        self, request: Request, owner: str, sub_id: str, action: str, headers: dict[str, str]
    ) -> Response:
        """A callback or an ack (acks, and ``done`` closes the wake), or a release (closes it), by the wake's token."""
        token = webhooks.bearer(request)
        body = await webhooks.read(request, webhooks.CALLBACK, self._limit)
        sub = await self._found(owner, sub_id)
        if (sub.config.type == "webhook") != (action == "callback"):
            kind = "webhook" if action == "callback" else "pull-wake"
            raise Refusal(400, "INVALID_REQUEST", f"Subscription is not {kind}")

        async def settle(sub: Subscription) -> Response:
            assert self._signer is not None
            sub.fence(self._signer, token, body)
            if action == "release":
                sub.close_wake()
                await self._next(sub)
                return Response(None, 204, headers)
            await self._apply(sub, body)
            self._lease(sub)
            next_wake = False
            if body.done:
                sub.close_wake()
                next_wake = await self._next(sub)
            return answer(webhooks.Acked(ok=True, next_wake=next_wake), 200, headers)

        return await self._change(sub, settle)

    async def _apply(self, sub: Subscription, body: Callback) -> None:
        """Move the acked offsets, all or none: each must be a linked stream's, not behind its ack nor past its tail."""
        if len(body.acks) > MAX_LINKS:
            raise Refusal(400, "INVALID_REQUEST", f"at most {MAX_LINKS} acks")
        checked: dict[str, tuple[int, int]] = {}
        for ack in body.acks:
            name = (ack.stream or ack.path or "").strip("/")
            link = sub.links.get(name)
            if not name or link is None:
                raise Refusal(409, "INVALID_OFFSET", "Ack references an unknown subscription stream")
            parsed = parse_stream_offset(ack.offset)
            tail, life = await self._tails.at(name, sub.owner)
            if parsed is None or parsed[0] != life:
                raise Refusal(409, "INVALID_OFFSET", "Ack offset is not an offset of the stream (nor may it be -1)")
            if parsed[1] < link.acked_in(life):
                raise Refusal(409, "INVALID_OFFSET", "Ack offset regresses the committed cursor")
            if parsed[1] > tail:
                raise Refusal(409, "INVALID_OFFSET", "Ack offset is beyond stream tail")
            checked[name] = (parsed[1], life)
        for name, (position, life) in checked.items():
            if (link := sub.links.get(name)) is not None:
                sub.links[name] = msgspec.structs.replace(link, acked=position, life=life)

    def _lease(self, sub: Subscription) -> None:
        sub.lease_until = now_ms() + sub.config.lease_ttl_ms
        self._kick.set()

    async def _next(self, sub: Subscription) -> bool:
        """Open the next wake if a linked stream has work pending; whether it did. Within `_change`."""
        tails = await self._tails.of(sub)
        first = sub.first_pending(tails)
        if first is None:
            return False
        await self._open(sub, tails, first)
        return True

    async def _open(self, sub: Subscription, tails: dict[str, int], trigger: str) -> str:
        """Open a wake over ``tails``, for a write to ``trigger``; within `_change`, which sends it once saved."""
        assert self._signer is not None
        sub.generation += 1
        sub.wake_id = wake_id = f"w_{secrets.token_hex(12)}"
        sub.snapshot = dict(tails)
        if sub.config.type == "webhook":
            sub.token = self._signer.token(sub.subject, sub.generation)
            self._lease(sub)
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
        event = webhooks.WakeEvent(
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
        self._loaded_at = time.monotonic()

    async def _tend(self) -> None:
        """Until closed: read the store's subscriptions now and then, close the wakes whose lease ran out, and
        open those that writes have made due."""
        while not self._closing:
            leases = [sub.lease_until for sub in self._all() if sub.lease_until is not None]
            wait = self._loaded_at + _RELOAD_S - time.monotonic()
            if leases:
                wait = min(wait, (min(leases) - now_ms()) / 1000)
            with anyio.move_on_after(max(_MOMENT_S, wait)):
                await self._kick.wait()
            self._kick = anyio.Event()
            try:
                if self._streams is not None and time.monotonic() - self._loaded_at >= _RELOAD_S:
                    await self._signed()
                    await self._reload()
            except Exception as exc:  # the store may be down: try again at the next round
                self._warnings.warning(logger, "subscriptions could not be read from the store: %s", exc)
                self._loaded_at = time.monotonic()
                continue
            touched, self._touched = self._touched, {}
            now = now_ms()
            for expired in [sub for sub in self._all() if sub.expired(now)]:
                await self._tended(expired, self._expire)
            for (owner, sub_id), trigger in touched.items():
                if (found := self._find(owner, sub_id)) is not None:
                    await self._tended(found, self._due(trigger))

    async def _tended(self, sub: Subscription, change: Callable[[Subscription], Awaitable[None]]) -> None:
        try:
            await self._change(sub, change)
        except Refusal:
            pass  # deleted meanwhile, or changed again and again by other processes: theirs to tend
        except Exception:
            self._warnings.warning(logger, "a subscription's wake could not be tended", exc_info=True)

    async def _expire(self, sub: Subscription) -> None:
        """Close the wake if its lease ran out, and open the next if work is pending."""
        if sub.expired(now_ms()):
            sub.close_wake()
            await self._next(sub)

    def _matched(self, name: str) -> Callable[[Subscription], Awaitable[None]]:
        """Link ``name``, a stream of the owner's that the pattern matches, with nothing acked."""

        async def match(sub: Subscription) -> None:
            sub.link_matched(name)

        return match

    def _due(self, trigger: str) -> Callable[[Subscription], Awaitable[None]]:
        """Link ``trigger`` if the pattern matches it, then open a wake if none is open and work is pending."""

        async def due(sub: Subscription) -> None:
            # A notice names no owner: the stream is linked only if it is the subscription owner's.
            if trigger and sub.wants(trigger) and sub.matches_anew(trigger):
                if await self._tails.head(trigger, sub.owner) is not None:
                    sub.link_matched(trigger)
            if sub.wake_id is None and sub.holder is None:
                tails = await self._tails.of(sub)
                if (first := sub.first_pending(tails)) is not None:
                    await self._open(sub, tails, trigger if trigger in tails else first)

        return due

    async def _deliver(self, http: httpx.AsyncClient, job: _Job) -> None:
        sub = self._find(job.owner, job.id)

        def wanted() -> bool:
            return (
                not self._closing
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

    def _settled(self, job: _Job, done: bool | None) -> Callable[[Subscription], Awaitable[None]]:
        """The delivery of ``job`` is over: whether its receiver took the snapshot whole (None: it failed)."""

        async def settled(sub: Subscription) -> None:
            if sub.generation != job.generation or sub.wake_id is None:
                return
            sub.status = "failed" if done is None else "active"
            if done:
                sub.take_snapshot()
                await self._next(sub)

        return settled

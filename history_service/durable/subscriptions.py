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

Subscriptions live in this process's memory: they do not survive a restart, and replicas
that share a store do not see each other's. A pattern links a stream at the stream's next
write, with nothing acked, since a store cannot list the streams a pattern matches (the
reference links those at their tails when the subscription is made). What a caller can grow
is bounded: subscriptions per owner and per process, streams per subscription, deliveries
waiting, and request bodies.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import math
import operator
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final
from urllib.parse import quote

import anyio
import httpx
import msgspec
from msgspec import Struct
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from codec import parse_stream_offset, stream_offset
from history_service.durable import webhooks
from history_service.durable.egress import Egress
from history_service.durable.streams import plain
from history_service.durable.webhooks import MAX_LINKS, Callback, Config, Refusal, StreamInfo, answer, stream_path
from history_service.logs import Warnings
from history_service.settings import Settings
from persistence import AppendRequest, StreamError, StreamGoneError, StreamNotFoundError, StreamStore

__all__ = ["Subscriptions"]

logger = logging.getLogger(__name__)

_MAX_SUBSCRIPTIONS: Final = 4096
_MAX_PER_OWNER: Final = 64
_MAX_BODY: Final = 1024 * 1024
_MAX_ID: Final = 256
# Before a stream's first byte: what a pattern's new link has acked.
_BEFORE_FIRST: Final = -1
_ACTIONS: Final = ("callback", "claim", "ack", "release")
_UNQUEUED: Final = (
    "a webhook delivery could not be queued (the queue, or its owner's share, is full): its lease reopens the wake"
)


class _Link(Struct, frozen=True):
    """A linked stream: the position its consumer has acked, and whether it is named, matched, or both."""

    acked: int
    explicit: bool = False
    glob: bool = False


class _Job(Struct, frozen=True):
    """A webhook delivery: of the wake ``generation`` of the owner's subscription ``id``."""

    owner: str
    id: str
    generation: int


def _not_found() -> Refusal:
    return Refusal(404, "SUBSCRIPTION_NOT_FOUND", "Subscription not found")


def _segments(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def _matches(glob: list[str], name: str) -> bool:
    segments = _segments(name)
    # reach[j]: the glob's segments so far match the name's first j; linear, whatever the pattern.
    reach = [True] + [False] * len(segments)
    for part in glob:
        if part == "**":
            reach = list(itertools.accumulate(reach, operator.or_))
        else:
            literal = part.replace("%2A", "*").replace("%2a", "*")
            reach = [False] + [reach[j] and (part == "*" or literal == seg) for j, seg in enumerate(segments)]
    return reach[-1]


def _offset(position: int) -> str:
    return "-1" if position == _BEFORE_FIRST else stream_offset(position)


def _info(name: str, link: _Link, tail: int | None = None) -> StreamInfo:
    """The stream as a subscription shows it; with its ``tail``, as a wake does."""
    kind, acked = "explicit" if link.explicit else "glob", _offset(link.acked)
    if tail is None:
        return StreamInfo(name, kind, acked)
    return StreamInfo(name, kind, acked, tail_offset=stream_offset(tail), has_pending=tail > link.acked)


def _not_allowed(allowed: str, headers: dict[str, str]) -> Response:
    return PlainTextResponse("method not allowed", 405, {**headers, "Allow": allowed})


class _Subscription:
    """One subscription and its open wake; the wake changes only under ``lock``."""

    def __init__(self, id: str, owner: str, config: Config, base: str, links: dict[str, _Link]) -> None:
        self.id = id
        self.owner = owner
        self.config = config
        self.base = base
        self.glob = _segments(config.pattern) if config.pattern else None
        self.links = links
        self.created_at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        self.status = "active"
        self.full = False
        self.generation = 0
        self.wake_id: str | None = None
        self.snapshot: dict[str, int] = {}
        self.token: str | None = None
        self.holder: str | None = None
        self.lease_until: float | None = None
        self.lock = anyio.Lock()

    @property
    def subject(self) -> list[str]:
        return [self.owner, self.id]

    def url(self, action: str) -> str:
        return f"{self.base}/v1/stream/__ds/subscriptions/{quote(self.id, safe='')}/{action}"

    def close_wake(self) -> None:
        self.wake_id = self.token = self.holder = self.lease_until = None
        self.snapshot = {}

    def first_pending(self, tails: dict[str, int]) -> str | None:
        for name, tail in tails.items():
            link = self.links.get(name)
            if link is not None and tail > link.acked:
                return name
        return None

    def view(self, signer: webhooks.Signer) -> webhooks.View:
        hook = None
        if self.config.webhook is not None:
            signing = webhooks.Signing(alg="ed25519", kid=signer.kid, jwks_url=f"{self.base}/v1/stream/__ds/jwks.json")
            hook = webhooks.HookView(url=self.config.webhook, signing=signing)
        return webhooks.View(
            id=self.id,
            subscription_id=self.id,
            type=self.config.type,
            streams=[_info(name, link) for name, link in self.links.items()],
            lease_ttl_ms=self.config.lease_ttl_ms,
            created_at=self.created_at,
            status=self.status,
            pattern=self.config.pattern,
            webhook=hook,
            wake_stream=self.config.wake_stream,
            description=self.config.description,
        )


class Subscriptions:
    """Subscriptions of this process: matched against every write to a generic stream."""

    def __init__(self, settings: Settings, streams: StreamStore | None, changed: Callable[[str], None]) -> None:
        self._streams = streams
        self._changed = changed
        self._limit = min(settings.max_body_bytes, _MAX_BODY)
        self._signer = webhooks.Signer()
        self._owners: dict[str, dict[str, _Subscription]] = {}
        self._count = 0
        # The subscriptions a write has touched since the background work last looked, and the stream that did.
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
            if owner is None:
                try:
                    owner = self._signer.owner(webhooks.bearer(request))
                except webhooks.TokenError as exc:
                    raise Refusal(401, exc.code, "Token invalid") from None
            return await self._route(request, path, owner, headers)
        except Refusal as refusal:
            return refusal.answer(headers)

    def on_append(self, name: str, owner: str) -> None:
        """A write to the stream ``name`` committed (a create with a body, an append, a close)."""
        owned = self._owners.get(owner)
        if self._closing or not owned:
            return
        for sub in owned.values():
            link = sub.links.get(name)
            if sub.glob is not None and (link is None or not link.glob) and _matches(sub.glob, name):
                if link is None and len(sub.links) >= MAX_LINKS:
                    if not sub.full:
                        sub.full = True
                        logger.warning("subscription %r links %d streams: no more are linked", sub.id, MAX_LINKS)
                    continue
                link = _Link(acked=_BEFORE_FIRST) if link is None else link
                link = sub.links[name] = msgspec.structs.replace(link, glob=True)
            if link is not None:
                self._touched.setdefault((owner, sub.id), name)
                self._kick.set()

    def on_delete(self, name: str, owner: str) -> None:
        """The stream ``name`` was deleted."""
        for sub in self._owners.get(owner, {}).values():
            sub.links.pop(name, None)

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

    async def _route(self, request: Request, path: str, owner: str, headers: dict[str, str]) -> Response:
        method = request.method
        if path == "jwks.json":
            if method != "GET":
                return _not_allowed("GET", headers)
            jwks = {"Content-Type": "application/jwk-set+json", "Cache-Control": "public, max-age=300"}
            return Response(self._signer.jwks, 200, {**headers, **jwks})
        parts = path.split("/")
        if len(parts) < 2 or parts[0] != "subscriptions" or not parts[1]:
            raise Refusal(404, "SUBSCRIPTION_NOT_FOUND", "Durable Streams control route not found")
        sub_id, rest = parts[1], parts[2:]
        if not plain(sub_id, _MAX_ID):
            raise Refusal(
                400, "INVALID_REQUEST", f"a subscription id is 1 to {_MAX_ID} characters, no control characters"
            )
        if not rest:
            if method == "PUT":
                return await self._create(request, owner, sub_id, headers)
            if method == "GET":
                return answer(self._found(owner, sub_id).view(self._signer), 200, headers)
            if method == "DELETE":
                self._remove(owner, sub_id)
                return Response(None, 204, headers)
            return _not_allowed("PUT, GET, DELETE", headers)
        if rest[0] == "streams":
            if method != ("POST" if len(rest) == 1 else "DELETE"):
                return _not_allowed("POST" if len(rest) == 1 else "DELETE", headers)
            if len(rest) == 1:
                await self._link(request, owner, sub_id)
            else:
                self._unlink(self._found(owner, sub_id), stream_path("/".join(rest[1:]), "the stream"))
            return Response(None, 204, headers)
        if len(rest) == 1 and rest[0] in _ACTIONS:
            if method != "POST":
                return _not_allowed("POST", headers)
            if rest[0] == "claim":
                return await self._claim(request, owner, sub_id, headers)
            return await self._settle(request, owner, sub_id, rest[0], headers)
        raise Refusal(404, "SUBSCRIPTION_NOT_FOUND", "Durable Streams control route not found")

    def _find(self, owner: str, sub_id: str) -> _Subscription | None:
        return self._owners.get(owner, {}).get(sub_id)

    def _found(self, owner: str, sub_id: str) -> _Subscription:
        sub = self._find(owner, sub_id)
        if sub is None:
            raise _not_found()
        return sub

    def _current(self, sub: _Subscription) -> None:
        """Refuse when ``sub`` was deleted while a request waited for its lock."""
        if self._find(sub.owner, sub.id) is not sub:
            raise _not_found()

    def _remove(self, owner: str, sub_id: str) -> None:
        owned = self._owners.get(owner)
        if owned is not None and owned.pop(sub_id, None) is not None:
            self._count -= 1
            self._touched.pop((owner, sub_id), None)
            if not owned:
                del self._owners[owner]

    def _room(self, owner: str) -> None:
        if self._count >= _MAX_SUBSCRIPTIONS or len(self._owners.get(owner, {})) >= _MAX_PER_OWNER:
            raise Refusal(409, "LIMIT_EXCEEDED", "too many subscriptions: delete one first")

    async def _create(self, request: Request, owner: str, sub_id: str, headers: dict[str, str]) -> Response:
        config = webhooks.config(await webhooks.read(request, webhooks.CREATE, self._limit))
        if (existing := self._find(owner, sub_id)) is not None:
            return self._confirm(existing, config, headers)
        if config.webhook is not None and (why := self._egress.rejected(config.webhook)) is not None:
            raise Refusal(400, "WEBHOOK_URL_REJECTED", why)
        self._room(owner)
        links = {name: _Link(acked=await self._tail(name, owner), explicit=True) for name in config.streams}
        # Another PUT of the same id may have finished while the tails were read.
        if (existing := self._find(owner, sub_id)) is not None:
            return self._confirm(existing, config, headers)
        self._room(owner)
        base = str(request.base_url.replace(path=request.scope.get("root_path", ""))).rstrip("/")
        sub = self._owners.setdefault(owner, {})[sub_id] = _Subscription(sub_id, owner, config, base, links)
        self._count += 1
        return answer(sub.view(self._signer), 201, headers)

    def _confirm(self, existing: _Subscription, config: Config, headers: dict[str, str]) -> Response:
        if existing.config != config:
            raise Refusal(409, "SUBSCRIPTION_ALREADY_EXISTS", "Subscription already exists with another configuration")
        return answer(existing.view(self._signer), 200, headers)

    async def _link(self, request: Request, owner: str, sub_id: str) -> None:
        given = (await webhooks.read(request, webhooks.STREAMS, self._limit)).streams
        if not given:
            raise Refusal(400, "INVALID_REQUEST", "streams must be a non-empty string array")
        names = list(dict.fromkeys(stream_path(name, "each of streams") for name in given))
        sub = self._found(owner, sub_id)
        async with sub.lock:
            self._current(sub)
            if len(sub.links) + sum(name not in sub.links for name in names) > MAX_LINKS:
                raise Refusal(409, "LIMIT_EXCEEDED", f"a subscription links at most {MAX_LINKS} streams")
            for name in names:
                link = sub.links.get(name)
                if link is None:
                    tail = await self._tail(name, owner)
                    link = sub.links.get(name) or _Link(acked=tail)
                sub.links[name] = msgspec.structs.replace(link, explicit=True)

    @staticmethod
    def _unlink(sub: _Subscription, name: str) -> None:
        link = sub.links.get(name)
        if link is not None and link.glob:
            sub.links[name] = msgspec.structs.replace(link, explicit=False)
        elif link is not None:
            del sub.links[name]

    async def _claim(self, request: Request, owner: str, sub_id: str, headers: dict[str, str]) -> Response:
        worker = (await webhooks.read(request, webhooks.CLAIM, self._limit)).worker
        if not worker or len(worker) > _MAX_ID:
            raise Refusal(400, "INVALID_REQUEST", f"worker must be a string of 1 to {_MAX_ID} characters")
        sub = self._found(owner, sub_id)
        if sub.config.type != "pull-wake":
            raise Refusal(400, "INVALID_REQUEST", "Subscription is not pull-wake")
        async with sub.lock:
            self._current(sub)
            if sub.holder is not None:
                raise Refusal(409, "ALREADY_CLAIMED", "the wake is held", holder=sub.holder, generation=sub.generation)
            tails = await self._tails(sub)
            first = sub.first_pending(tails)
            if first is None:
                raise Refusal(409, "NO_PENDING_WORK", "Subscription has no pending work")
            wake_id = sub.wake_id or await self._open(sub, tails, first)
            sub.holder = worker
            sub.token = token = self._signer.token(sub.subject, sub.generation)
            self._lease(sub)
            streams = [_info(name, link, tails[name]) for name, link in sub.links.items() if name in tails]
            claimed = webhooks.Claimed(
                wake_id=wake_id,
                generation=sub.generation,
                token=token,
                streams=streams,
                lease_ttl_ms=sub.config.lease_ttl_ms,
            )
        return answer(claimed, 200, headers)

    async def _settle(
        self, request: Request, owner: str, sub_id: str, action: str, headers: dict[str, str]
    ) -> Response:
        """A callback or an ack (acks, and ``done`` closes the wake), or a release (closes it), by the wake's token."""
        token = webhooks.bearer(request)
        body = await webhooks.read(request, webhooks.CALLBACK, self._limit)
        sub = self._found(owner, sub_id)
        if (sub.config.type == "webhook") != (action == "callback"):
            raise Refusal(
                400, "INVALID_REQUEST", f"Subscription is not {'webhook' if action == 'callback' else 'pull-wake'}"
            )
        async with sub.lock:
            self._current(sub)
            self._fence(sub, token, body)
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

    def _fence(self, sub: _Subscription, token: str, body: Callback) -> None:
        try:
            epoch = self._signer.epoch(token, sub.subject)
        except webhooks.TokenError as exc:
            raise Refusal(401, exc.code, "Token expired" if exc.code == "TOKEN_EXPIRED" else "Token invalid") from None
        if (
            sub.wake_id is None
            or sub.token is None
            or not hmac.compare_digest(token.encode(), sub.token.encode())
            or epoch != sub.generation
            or body.generation != sub.generation
            or body.wake_id != sub.wake_id
        ):
            raise Refusal(409, "FENCED", "Wake generation is stale")

    async def _apply(self, sub: _Subscription, body: Callback) -> None:
        """Move the acked offsets, all or none: each must be a linked stream's, not behind its ack nor past its tail."""
        if len(body.acks) > MAX_LINKS:
            raise Refusal(400, "INVALID_REQUEST", f"at most {MAX_LINKS} acks")
        checked: dict[str, int] = {}
        for ack in body.acks:
            name = (ack.stream or ack.path or "").strip("/")
            link = sub.links.get(name)
            if not name or link is None:
                raise Refusal(409, "INVALID_OFFSET", "Ack references an unknown subscription stream")
            parsed = parse_stream_offset(ack.offset)
            if parsed is None or parsed[0] != 0:
                raise Refusal(409, "INVALID_OFFSET", "Ack offset is not an offset of the stream (nor may it be -1)")
            if parsed[1] < link.acked:
                raise Refusal(409, "INVALID_OFFSET", "Ack offset regresses the committed cursor")
            if parsed[1] > await self._tail(name, sub.owner):
                raise Refusal(409, "INVALID_OFFSET", "Ack offset is beyond stream tail")
            checked[name] = parsed[1]
        for name, position in checked.items():
            if (link := sub.links.get(name)) is not None:
                sub.links[name] = msgspec.structs.replace(link, acked=position)

    async def _tail(self, name: str, owner: str) -> int:
        if self._streams is None:
            return 0
        try:
            return (await self._streams.head(name, owner)).tail
        except (StreamNotFoundError, StreamGoneError):
            return 0

    async def _tails(self, sub: _Subscription) -> dict[str, int]:
        return {name: await self._tail(name, sub.owner) for name in list(sub.links)}

    def _lease(self, sub: _Subscription) -> None:
        sub.lease_until = time.monotonic() + sub.config.lease_ttl_ms / 1000
        self._kick.set()

    async def _next(self, sub: _Subscription) -> bool:
        """Open the next wake if a linked stream has work pending; whether it did. Under ``sub.lock``."""
        tails = await self._tails(sub)
        first = sub.first_pending(tails)
        if first is None:
            return False
        await self._open(sub, tails, first)
        return True

    async def _open(self, sub: _Subscription, tails: dict[str, int], trigger: str) -> str:
        """Open a wake over ``tails``, for a write to ``trigger``; under ``sub.lock``."""
        sub.generation += 1
        sub.wake_id = wake_id = f"w_{secrets.token_hex(12)}"
        sub.snapshot = dict(tails)
        if sub.config.type == "webhook":
            sub.token = self._signer.token(sub.subject, sub.generation)
            self._lease(sub)
            if not self._deliveries.send(sub.owner, _Job(sub.owner, sub.id, sub.generation)):
                self._warnings.warning(logger, _UNQUEUED)
        else:
            await self._announce(sub, trigger)
        return wake_id

    async def _announce(self, sub: _Subscription, trigger: str) -> None:
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

    def _all(self) -> list[_Subscription]:
        return [sub for owned in self._owners.values() for sub in owned.values()]

    async def _tend(self) -> None:
        """Until closed: close the wakes whose lease ran out, and open those that writes have made due."""
        while not self._closing:
            leases = [sub.lease_until for sub in self._all() if sub.lease_until is not None]
            with anyio.move_on_after(max(0.0, min(leases) - time.monotonic()) if leases else math.inf):
                await self._kick.wait()
            self._kick = anyio.Event()
            now = time.monotonic()
            touched, self._touched = self._touched, {}
            for expired in [sub for sub in self._all() if sub.lease_until is not None and sub.lease_until <= now]:
                await self._tended(expired, None)
            for (owner, sub_id), trigger in touched.items():
                if (sub := self._find(owner, sub_id)) is not None:
                    await self._tended(sub, trigger)

    async def _tended(self, sub: _Subscription, trigger: str | None) -> None:
        """Close ``sub``'s wake if its lease ran out (no ``trigger``), or open one if a write to ``trigger`` is due."""
        try:
            async with sub.lock:
                if self._find(sub.owner, sub.id) is not sub:
                    return
                if trigger is None:
                    if sub.lease_until is not None and sub.lease_until <= time.monotonic():
                        sub.close_wake()
                        await self._next(sub)
                elif sub.wake_id is None and sub.holder is None:
                    tails = await self._tails(sub)
                    if sub.first_pending(tails) is not None:
                        await self._open(sub, tails, trigger)
        except Exception:
            logger.exception("subscription %r: its wake could not be tended", sub.id)

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
            sub.status = "failed"
            return
        streams = [
            _info(name, link, tail) for name, tail in sub.snapshot.items() if (link := sub.links.get(name)) is not None
        ]
        body = webhooks.notification(sub.id, sub.wake_id, sub.generation, streams, sub.url("callback"), sub.token)
        done = await webhooks.deliver(http, sub.config.webhook, body, self._signer, wanted=wanted)
        if not wanted():
            return
        sub.status = "failed" if done is None else "active"
        if done:
            async with sub.lock:
                if not wanted():
                    return
                # The receiver took the whole snapshot: ack it, as far as no callback already has.
                for name, tail in sub.snapshot.items():
                    if (link := sub.links.get(name)) is not None and tail > link.acked:
                        sub.links[name] = msgspec.structs.replace(link, acked=tail)
                sub.close_wake()
                await self._next(sub)

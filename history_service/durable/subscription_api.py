"""The endpoints of the subscription API under ``/ds/v1/stream/__ds/`` (docs/protocol.md §13.6).

`history_service.durable.routes` routes each of its paths here; an endpoint reads the
request (`history_service.durable.subscription_bodies`), asks the process's
`history_service.durable.subscriptions.Subscriptions` to act, and answers. Every route
answers 501 on a store that keeps no streams, reads the store's signing keys (made by the
first process to need them), and, for a wake's callback, ack and release, finds the owner by
the wake's token. A method a route does not serve is answered 405 with the ones it does,
and a refusal as the protocol answers one (`history_service.durable.subscription_bodies.refused`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import msgspec
from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import Response

from codec import parse_stream_offset
from history_service.durable import subscription_bodies as bodies
from history_service.durable.app import Durable, Handler, not_allowed
from history_service.durable.streams import STREAMS, checked_name, plain, unkept
from history_service.durable.subscription import Subscription, info, new_record, now_ms
from history_service.durable.subscription_bodies import MAX_LINKS, Callback, Config, answer_json, refused, stream_path
from history_service.durable.subscriptions import KEYS, Subscriptions
from history_service.durable.tails import Tails
from history_service.errors import (
    InvalidAck,
    NoPendingWork,
    SubscriptionExists,
    SubscriptionInvalid,
    SubscriptionLimit,
    SubscriptionNotFound,
    SubscriptionRefused,
    WakeClaimed,
    WebhookUrlRejected,
)
from persistence import SHARED_OWNER

__all__ = [
    "claim",
    "create",
    "endpoint",
    "jwks",
    "link",
    "remove",
    "settle",
    "unlink",
    "view",
]

_MAX_ID: Final = 256

# An action of the API: on the process's subscriptions, for the request's owner and subscription id.
Action = Callable[[Subscriptions, Request, str, str, dict[str, str]], Awaitable[Response]]


def endpoint(actions: Mapping[str, Action]) -> Handler:
    """The endpoint of one route of the API, which serves ``actions`` by method (none: a path the API has not)."""

    async def handle(request: Request, durable: Durable, owner: str | None, headers: dict[str, str]) -> Response:
        # The reserved names are stream names first: the rule every stream path keeps.
        checked_name(get_route_path(request.scope).removeprefix(STREAMS))
        subscriptions = durable.subscriptions
        if durable.streams is None:
            return unkept(headers)
        try:
            signer = await subscriptions.signed()
            if owner is None:
                owner = signer.owner(bodies.bearer(request))
            sub_id = request.path_params.get("sub_id", "")
            if "sub_id" in request.path_params and (
                not plain(sub_id, _MAX_ID) or (owner == SHARED_OWNER and sub_id == KEYS)
            ):
                raise SubscriptionInvalid(f"a subscription id is 1 to {_MAX_ID} characters, no control characters")
            if not actions:
                raise SubscriptionNotFound("Durable Streams control route not found")
            action = actions.get(request.method)
            if action is None:
                return not_allowed(", ".join(actions), headers)
            return await action(subscriptions, request, owner, sub_id, headers)
        except SubscriptionRefused as exc:
            return refused(exc, headers)

    return handle


async def jwks(
    subscriptions: Subscriptions, request: Request, owner: str, sub_id: str, headers: dict[str, str]
) -> Response:
    signer = await subscriptions.signed()
    cached = {"Content-Type": "application/jwk-set+json", "Cache-Control": "public, max-age=300"}
    return Response(signer.jwks, 200, {**headers, **cached})


async def create(
    subscriptions: Subscriptions, request: Request, owner: str, sub_id: str, headers: dict[str, str]
) -> Response:
    """Make the subscription the body asks for, or confirm one that exists alike."""
    config = bodies.config(await bodies.read(request, bodies.CREATE, subscriptions.limit))
    if (existing := await subscriptions.read(owner, sub_id)) is not None:
        return answer_json(await _confirm(subscriptions, existing, config), 200, headers)
    if config.webhook is not None and (why := subscriptions.rejected(config.webhook)) is not None:
        raise WebhookUrlRejected(why)
    links = {name: await subscriptions.tails.link(name, owner, explicit=True) for name in config.streams}
    base = str(request.base_url.replace(path=request.scope.get("root_path", ""))).rstrip("/")
    made = await subscriptions.make(new_record(owner, sub_id, config, base, links))
    if made is None:
        raise SubscriptionLimit("too many subscriptions: delete one first")
    sub, created = made
    # Another PUT of the same id may have made it while the tails were read.
    if not created:
        return answer_json(await _confirm(subscriptions, sub, config), 200, headers)
    return answer_json(await subscriptions.view(sub), 201, headers)


async def _confirm(subscriptions: Subscriptions, existing: Subscription, config: Config) -> bodies.View:
    if existing.config != config:
        raise SubscriptionExists("Subscription already exists with another configuration")
    return await subscriptions.view(existing)


async def view(
    subscriptions: Subscriptions, request: Request, owner: str, sub_id: str, headers: dict[str, str]
) -> Response:
    return answer_json(await subscriptions.view(await subscriptions.found(owner, sub_id)), 200, headers)


async def remove(
    subscriptions: Subscriptions, request: Request, owner: str, sub_id: str, headers: dict[str, str]
) -> Response:
    await subscriptions.remove(owner, sub_id)
    return Response(None, 204, headers)


async def link(
    subscriptions: Subscriptions, request: Request, owner: str, sub_id: str, headers: dict[str, str]
) -> Response:
    """Link the named streams, each acked at its tail now unless it is linked already."""
    given = (await bodies.read(request, bodies.LINK, subscriptions.limit)).streams
    if not given:
        raise SubscriptionInvalid("streams must be a non-empty string array")
    names = list(dict.fromkeys(stream_path(name, "each of streams") for name in given))
    tails = subscriptions.tails

    async def link(sub: Subscription) -> None:
        if len(sub.links) + sum(name not in sub.links for name in names) > MAX_LINKS:
            raise SubscriptionLimit(f"a subscription links at most {MAX_LINKS} streams")
        for name in names:
            link = sub.links.get(name) or await tails.link(name, owner)
            sub.links[name] = msgspec.structs.replace(link, explicit=True)

    await subscriptions.change(await subscriptions.found(owner, sub_id), link)
    return Response(None, 204, headers)


async def unlink(
    subscriptions: Subscriptions, request: Request, owner: str, sub_id: str, headers: dict[str, str]
) -> Response:
    name = stream_path(request.path_params["name"], "the stream")
    await subscriptions.change(await subscriptions.found(owner, sub_id), lambda sub: sub.unlink(name))
    return Response(None, 204, headers)


async def claim(
    subscriptions: Subscriptions, request: Request, owner: str, sub_id: str, headers: dict[str, str]
) -> Response:
    """The pull-wake's wake for the worker: the open one, or one opened now; refused while another holds it."""
    worker = (await bodies.read(request, bodies.CLAIM, subscriptions.limit)).worker
    if not worker or len(worker) > _MAX_ID:
        raise SubscriptionInvalid(f"worker must be a string of 1 to {_MAX_ID} characters")
    sub = await subscriptions.found(owner, sub_id)
    if sub.config.type != "pull-wake":
        raise SubscriptionInvalid("Subscription is not pull-wake")
    signer = await subscriptions.signed()
    tails = subscriptions.tails

    async def claim(sub: Subscription) -> bodies.Claimed:
        if sub.holder is not None and not sub.expired(now_ms()):
            raise WakeClaimed("the wake is held", holder=sub.holder, generation=sub.generation)
        if sub.holder is not None:
            sub.close_wake()
        at = await tails.of(sub)
        first = sub.first_pending(at)
        if first is None:
            raise NoPendingWork("Subscription has no pending work")
        wake_id = sub.wake_id or await subscriptions.open(sub, at, first)
        sub.holder = worker
        sub.token = token = signer.token(sub.subject, sub.generation)
        subscriptions.lease(sub)
        return bodies.Claimed(
            wake_id=wake_id,
            generation=sub.generation,
            token=token,
            streams=[
                info(name, link, tails.life(name, sub.owner), at[name])
                for name, link in sub.links.items()
                if name in at
            ],
            lease_ttl_ms=sub.config.lease_ttl_ms,
        )

    return answer_json(await subscriptions.change(sub, claim), 200, headers)


def settle(action: str) -> Action:
    """A callback or an ack (acks, and ``done`` closes the wake), or a release (closes it), by the wake's token.

    The three carry the wake's token where the API's credentials go (`history_service.durable.routes`).
    """

    async def settled(
        subscriptions: Subscriptions, request: Request, owner: str, sub_id: str, headers: dict[str, str]
    ) -> Response:
        token = bodies.bearer(request)
        body = await bodies.read(request, bodies.CALLBACK, subscriptions.limit)
        sub = await subscriptions.found(owner, sub_id)
        if (sub.config.type == "webhook") != (action == "callback"):
            kind = "webhook" if action == "callback" else "pull-wake"
            raise SubscriptionInvalid(f"Subscription is not {kind}")
        signer = await subscriptions.signed()

        async def settle(sub: Subscription) -> Response:
            sub.fence(signer, token, body)
            if action == "release":
                sub.close_wake()
                await subscriptions.next(sub)
                return Response(None, 204, headers)
            await _apply(subscriptions.tails, sub, body)
            subscriptions.lease(sub)
            next_wake = False
            if body.done:
                sub.close_wake()
                next_wake = await subscriptions.next(sub)
            return answer_json(bodies.Acked(ok=True, next_wake=next_wake), 200, headers)

        return await subscriptions.change(sub, settle)

    return settled


async def _apply(tails: Tails, sub: Subscription, body: Callback) -> None:
    """Move the acked offsets, all or none: each must be a linked stream's, not behind its ack nor past its tail."""
    if len(body.acks) > MAX_LINKS:
        raise SubscriptionInvalid(f"at most {MAX_LINKS} acks")
    checked: dict[str, tuple[int, int]] = {}
    for ack in body.acks:
        name = (ack.stream or ack.path or "").strip("/")
        link = sub.links.get(name)
        if not name or link is None:
            raise InvalidAck("Ack references an unknown subscription stream")
        parsed = parse_stream_offset(ack.offset)
        tail, life = await tails.at(name, sub.owner)
        if parsed is None or parsed[0] != life:
            raise InvalidAck("Ack offset is not an offset of the stream (nor may it be -1)")
        if parsed[1] < link.acked_in(life):
            raise InvalidAck("Ack offset regresses the committed cursor")
        if parsed[1] > tail:
            raise InvalidAck("Ack offset is beyond stream tail")
        checked[name] = (parsed[1], life)
    for name, (position, life) in checked.items():
        if (link := sub.links.get(name)) is not None:
            sub.links[name] = msgspec.structs.replace(link, acked=position, life=life)

"""The subscription API's bodies (docs/protocol.md §13.6): the JSON it reads and answers, and the checks of it.

`history_service.durable.subscription_api` serves them; a refusal is one of the error tree's
`SubscriptionRefused`, answered here in the protocol's shape, its status the one error
table's (`history_service.answers.ERRORS`).
"""

from __future__ import annotations

from typing import Final, Literal, TypeVar

import msgspec
from msgspec import Struct
from starlette.requests import Request
from starlette.responses import Response

from history_service.answers import answer_for
from history_service.durable.streams import MAX_NAME, RESERVED, plain
from history_service.errors import (
    BodyTooLarge,
    SubscriptionBodyTooLarge,
    SubscriptionInvalid,
    SubscriptionRefused,
    WakeClaimed,
    WakeTokenInvalid,
)
from history_service.requests import read_body

__all__ = [
    "CALLBACK",
    "CLAIM",
    "CREATE",
    "LINK",
    "MAX_LINKS",
    "Ack",
    "Acked",
    "Callback",
    "Claimed",
    "Config",
    "Create",
    "HookView",
    "Signing",
    "StreamInfo",
    "View",
    "WakeEvent",
    "answer_json",
    "bearer",
    "config",
    "read",
    "refused",
    "stream_path",
]

# Most streams a subscription links, and most acks one request carries.
MAX_LINKS: Final = 256
_MAX_TEXT: Final = 4096
_LEASE_MS: Final = (1_000, 600_000)

T = TypeVar("T")


class Hook(Struct, frozen=True):
    url: str


class Create(Struct, frozen=True):
    """A PUT of a subscription."""

    type: Literal["webhook", "pull-wake"]
    pattern: str | None = None
    streams: tuple[str, ...] = ()
    webhook: Hook | None = None
    wake_stream: str | None = None
    lease_ttl_ms: int = 30_000
    description: str | None = None


class Ack(Struct, frozen=True):
    offset: str
    stream: str | None = None
    path: str | None = None


class Callback(Struct, frozen=True):
    """A callback, an ack or a release: the wake it is for, its acks, and whether it closes the wake."""

    wake_id: str | None = None
    generation: int | None = None
    acks: tuple[Ack, ...] = ()
    done: bool = False


class _Claim(Struct, frozen=True):
    worker: str


class _Streams(Struct, frozen=True):
    streams: tuple[str, ...]


class StreamInfo(Struct, frozen=True, omit_defaults=True):
    """A linked stream as a subscription shows it; a wake adds its tail and whether data waits past the ack."""

    path: str
    link_type: str
    acked_offset: str
    tail_offset: str | None = None
    has_pending: bool | None = None


class Signing(Struct, frozen=True):
    alg: str
    kid: str
    jwks_url: str


class HookView(Struct, frozen=True):
    url: str
    signing: Signing


class View(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A subscription as GET and PUT answer it."""

    id: str
    subscription_id: str
    type: str
    streams: list[StreamInfo]
    lease_ttl_ms: int
    created_at: str
    status: str
    pattern: str | None = None
    webhook: HookView | None = None
    wake_stream: str | None = None
    description: str | None = None


class Claimed(Struct, frozen=True, kw_only=True):
    wake_id: str
    generation: int
    token: str
    streams: list[StreamInfo]
    lease_ttl_ms: int


class Acked(Struct, frozen=True):
    ok: bool
    next_wake: bool


class WakeEvent(Struct, frozen=True, kw_only=True, tag_field="type", tag="wake"):
    """What a pull-wake subscription appends to its wake stream."""

    subscription_id: str
    stream: str
    generation: int
    ts: int


class _Error(Struct, frozen=True, omit_defaults=True):
    code: str
    message: str
    current_holder: str | None = None
    generation: int | None = None


class _Errored(Struct, frozen=True):
    error: _Error


def refused(exc: SubscriptionRefused, headers: dict[str, str]) -> Response:
    """A refusal as the protocol answers it: its status the one error table's, its code the protocol's spelling."""
    answer = answer_for(type(exc))
    assert answer is not None, "every error class is in ERRORS"
    holder, generation = (exc.holder, exc.generation) if isinstance(exc, WakeClaimed) else (None, None)
    error = _Error(code=exc.code, message=answer.message(exc), current_holder=holder, generation=generation)
    return answer_json(_Errored(error), answer.status, headers)


CREATE: Final = msgspec.json.Decoder(Create)
CALLBACK: Final = msgspec.json.Decoder(Callback)
CLAIM: Final = msgspec.json.Decoder(_Claim)
LINK: Final = msgspec.json.Decoder(_Streams)


def answer_json(value: Struct, status: int, headers: dict[str, str]) -> Response:
    """``value`` as a JSON answer."""
    return Response(msgspec.json.encode(value), status, {**headers, "Content-Type": "application/json"})


async def read(request: Request, decoder: msgspec.json.Decoder[T], limit: int) -> T:
    """The request's JSON body (an empty one is ``{}``), or a `SubscriptionRefused`."""
    try:
        body = await read_body(request, limit)
    except BodyTooLarge as exc:
        raise SubscriptionBodyTooLarge(str(exc)) from None
    try:
        return decoder.decode(body or b"{}")
    except msgspec.DecodeError as exc:
        raise SubscriptionInvalid(f"invalid request body: {exc}") from None


def bearer(request: Request) -> str:
    """The token of ``Authorization: Bearer <token>``, or a `SubscriptionRefused`."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise WakeTokenInvalid("Missing or malformed Authorization header")
    return token


class Config(Struct, frozen=True, kw_only=True):
    """What a PUT asked for: the same again is answered 200, another 409."""

    type: str
    pattern: str | None
    streams: tuple[str, ...]
    webhook: str | None
    wake_stream: str | None
    lease_ttl_ms: int
    description: str | None


def stream_path(text: str, what: str) -> str:
    path = text.strip("/")
    if not plain(path):
        raise SubscriptionInvalid(f"{what} is 1 to {MAX_NAME} characters, no control characters")
    if path == RESERVED or path.startswith(RESERVED + "/"):
        raise SubscriptionInvalid(f"{what} may not be under {RESERVED}/")
    return path


def config(body: Create) -> Config:
    """What a PUT asks for, checked, or a `SubscriptionRefused`."""
    pattern = stream_path(body.pattern, "pattern") if body.pattern else None
    streams = tuple(sorted({stream_path(name, "each of streams") for name in body.streams}))
    if len(streams) > MAX_LINKS:
        raise SubscriptionInvalid(f"a subscription names at most {MAX_LINKS} streams")
    if pattern is None and not streams:
        raise SubscriptionInvalid("At least one of pattern or streams is required")
    if not _LEASE_MS[0] <= body.lease_ttl_ms <= _LEASE_MS[1]:
        raise SubscriptionInvalid("lease_ttl_ms must be an integer from 1000 to 600000")
    if body.description is not None and len(body.description) > _MAX_TEXT:
        raise SubscriptionInvalid(f"description is at most {_MAX_TEXT} characters")
    webhook = wake_stream = None
    if body.type == "webhook":
        if body.webhook is None or not body.webhook.url:
            raise SubscriptionInvalid("webhook subscriptions require webhook.url")
        webhook = body.webhook.url
    elif body.wake_stream:
        wake_stream = stream_path(body.wake_stream, "wake_stream")
    else:
        raise SubscriptionInvalid("pull-wake subscriptions require wake_stream")
    return Config(
        type=body.type,
        pattern=pattern,
        streams=streams,
        webhook=webhook,
        wake_stream=wake_stream,
        lease_ttl_ms=body.lease_ttl_ms,
        description=body.description,
    )

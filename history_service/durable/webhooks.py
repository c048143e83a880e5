"""The subscription API's wire: the JSON it reads and answers, and what it signs and sends.

`history_service.durable.subscriptions` keeps the state; this module holds what crosses the
wire, with no state of its own beyond a `Signer`'s keys and a `Deliveries` queue.

A notification carries ``Webhook-Signature: t=<unix seconds>,kid=<kid>,ed25519=<signature>``,
the base64url Ed25519 signature of ``<t>.<body>``; a receiver checks it against the key set
served at ``__ds/jwks.json``. A callback token is ``<claims>.<HMAC>``, both base64url, bound
to one subscription and one wake generation. Both keys are kept in the store, like the
subscriptions they sign for.

Deliveries wait in a bounded queue for a few workers that share one client; a delivery is
tried `ATTEMPTS` times at most, with backoff, while its wake is still open.

Where a webhook may go, by its URL and by the address it connects to, is
`history_service.durable.egress`'s: the client the workers share is its.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, Literal, TypeVar

import anyio
import httpx
import msgspec
from anyio.abc import TaskGroup
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from msgspec import Struct
from starlette.requests import Request
from starlette.responses import Response

from history_service.durable.egress import Egress
from history_service.durable.streams import MAX_NAME, plain
from history_service.errors import BodyTooLarge, TokenError
from history_service.requests import read_body

__all__ = [
    "ATTEMPTS",
    "CALLBACK",
    "CLAIM",
    "CREATE",
    "MAX_LINKS",
    "STREAMS",
    "Ack",
    "Acked",
    "Callback",
    "Claimed",
    "Config",
    "Create",
    "Deliveries",
    "HookView",
    "Refusal",
    "Signer",
    "Signing",
    "StreamInfo",
    "TokenError",
    "View",
    "WakeEvent",
    "answer",
    "bearer",
    "config",
    "deliver",
    "notification",
    "read",
    "stream_path",
]

logger = logging.getLogger(__name__)

ATTEMPTS: Final = 3
_BACKOFF_S: Final = 1.0
# A receiver's answer is read only for its ``done``; a larger one is not worth holding.
_MAX_ANSWER: Final = 64 * 1024
_TOKEN_TTL_S: Final = 3600
# Most streams a subscription links, and most acks one request carries.
MAX_LINKS: Final = 256
_MAX_TEXT: Final = 4096
_LEASE_MS: Final = (1_000, 600_000)
_WAITING: Final = 256
_WORKERS: Final = 8
# An owner's share: of the workers, and of the deliveries waiting (as many as its subscriptions may be).
_PER_OWNER: Final = 2
_OWNER_WAITING: Final = 64

Job = TypeVar("Job")
Work = Callable[[httpx.AsyncClient, Job], Awaitable[None]]
T = TypeVar("T")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


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


class _Notification(Struct, frozen=True):
    subscription_id: str
    wake_id: str
    generation: int
    streams: list[StreamInfo]
    callback_url: str
    callback_token: str


class _Error(Struct, frozen=True, omit_defaults=True):
    code: str
    message: str
    current_holder: str | None = None
    generation: int | None = None


class _Errored(Struct, frozen=True):
    error: _Error


CREATE: Final = msgspec.json.Decoder(Create)
CALLBACK: Final = msgspec.json.Decoder(Callback)
CLAIM: Final = msgspec.json.Decoder(_Claim)
STREAMS: Final = msgspec.json.Decoder(_Streams)


class Refusal(Exception):
    """A request the subscription API answers with ``{"error": {"code": ..., "message": ...}}``."""

    def __init__(
        self, status: int, code: str, message: str, *, holder: str | None = None, generation: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = _Error(code=code, message=message, current_holder=holder, generation=generation)

    def answer(self, headers: dict[str, str]) -> Response:
        return answer(_Errored(self.error), self.status, headers)


def answer(value: Struct, status: int, headers: dict[str, str]) -> Response:
    """``value`` as a JSON answer."""
    return Response(msgspec.json.encode(value), status, {**headers, "Content-Type": "application/json"})


async def read(request: Request, decoder: msgspec.json.Decoder[T], limit: int) -> T:
    """The request's JSON body (an empty one is ``{}``), or a `Refusal`."""
    try:
        body = await read_body(request, limit)
    except BodyTooLarge as exc:
        raise Refusal(413, "INVALID_REQUEST", str(exc)) from None
    try:
        return decoder.decode(body or b"{}")
    except msgspec.DecodeError as exc:
        raise Refusal(400, "INVALID_REQUEST", f"invalid request body: {exc}") from None


def bearer(request: Request) -> str:
    """The token of ``Authorization: Bearer <token>``, or a `Refusal`."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Refusal(401, "TOKEN_INVALID", "Missing or malformed Authorization header")
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
        raise Refusal(400, "INVALID_REQUEST", f"{what} is 1 to {MAX_NAME} characters, no control characters")
    if path == "__ds" or path.startswith("__ds/"):
        raise Refusal(400, "INVALID_REQUEST", f"{what} may not be under __ds/")
    return path


def config(body: Create) -> Config:
    """What a PUT asks for, checked, or a `Refusal`."""
    pattern = stream_path(body.pattern, "pattern") if body.pattern else None
    streams = tuple(sorted({stream_path(name, "each of streams") for name in body.streams}))
    if len(streams) > MAX_LINKS:
        raise Refusal(400, "INVALID_REQUEST", f"a subscription names at most {MAX_LINKS} streams")
    if pattern is None and not streams:
        raise Refusal(400, "INVALID_REQUEST", "At least one of pattern or streams is required")
    if not _LEASE_MS[0] <= body.lease_ttl_ms <= _LEASE_MS[1]:
        raise Refusal(400, "INVALID_REQUEST", "lease_ttl_ms must be an integer from 1000 to 600000")
    if body.description is not None and len(body.description) > _MAX_TEXT:
        raise Refusal(400, "INVALID_REQUEST", f"description is at most {_MAX_TEXT} characters")
    webhook = wake_stream = None
    if body.type == "webhook":
        if body.webhook is None or not body.webhook.url:
            raise Refusal(400, "INVALID_REQUEST", "webhook subscriptions require webhook.url")
        webhook = body.webhook.url
    elif body.wake_stream:
        wake_stream = stream_path(body.wake_stream, "wake_stream")
    else:
        raise Refusal(400, "INVALID_REQUEST", "pull-wake subscriptions require wake_stream")
    return Config(
        type=body.type,
        pattern=pattern,
        streams=streams,
        webhook=webhook,
        wake_stream=wake_stream,
        lease_ttl_ms=body.lease_ttl_ms,
        description=body.description,
    )


class _Jwk(Struct, frozen=True):
    kty: str
    crv: str
    x: str
    kid: str
    use: str
    alg: str


class _Jwks(Struct, frozen=True):
    keys: list[_Jwk]


class _Thumbprinted(Struct, frozen=True):
    """RFC 7638: the required members of an OKP key, in lexical order."""

    crv: str
    kty: str
    x: str


class _Claims(Struct, frozen=True):
    sub: list[str]
    epoch: int
    exp: int
    jti: str


class _Answer(Struct, frozen=True):
    done: Any = None


_CLAIMS: Final = msgspec.json.Decoder(_Claims)
_ANSWER: Final = msgspec.json.Decoder(_Answer)


class _Keys(Struct, frozen=True, array_like=True):
    ed25519: bytes
    hmac: bytes


_KEYS: Final = msgspec.msgpack.Decoder(_Keys)


class Signer:
    """The webhook signing key (its key set in ``jwks``) and the callback-token key.

    Made from `Signer.new_keys` once and kept in the store, so every process of a store, and
    every life of one, signs and checks alike.
    """

    def __init__(self, keys: bytes) -> None:
        held = _KEYS.decode(keys)
        self._key = Ed25519PrivateKey.from_private_bytes(held.ed25519)
        self._hmac_key = held.hmac
        x = _b64url(self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
        thumbprint = hashlib.sha256(msgspec.json.encode(_Thumbprinted(crv="Ed25519", kty="OKP", x=x))).digest()
        self.kid = f"ds_{_b64url(thumbprint)}"
        self.jwks = msgspec.json.encode(
            _Jwks(keys=[_Jwk(kty="OKP", crv="Ed25519", x=x, kid=self.kid, use="sig", alg="EdDSA")])
        )

    @staticmethod
    def new_keys() -> bytes:
        """New keys for `Signer`, encoded."""
        raw = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return msgspec.msgpack.encode(_Keys(raw, secrets.token_bytes(32)))

    def sign(self, body: bytes) -> str:
        """The ``Webhook-Signature`` of ``body``, sent now."""
        stamp = int(time.time())
        signature = self._key.sign(b"%d." % stamp + body)
        return f"t={stamp},kid={self.kid},ed25519={_b64url(signature)}"

    def token(self, subject: list[str], epoch: int) -> str:
        """A callback token for ``subject`` (owner and subscription id) at wake generation ``epoch``."""
        claims = _Claims(sub=subject, epoch=epoch, exp=int(time.time()) + _TOKEN_TTL_S, jti=secrets.token_hex(8))
        payload = _b64url(msgspec.json.encode(claims))
        return f"{payload}.{self._mac(payload)}"

    def epoch(self, token: str, subject: list[str]) -> int:
        """The generation a token for ``subject`` was given at; `TokenError` when it is not one, or has expired."""
        claims = self._claims(token)
        if claims.sub != subject:
            raise TokenError("TOKEN_INVALID")
        if time.time() > claims.exp:
            raise TokenError("TOKEN_EXPIRED")
        return claims.epoch

    def owner(self, token: str) -> str:
        """The owner a callback token of ours was given for; `TokenError` when it is not one of ours."""
        subject = self._claims(token).sub
        if len(subject) != 2:
            raise TokenError("TOKEN_INVALID")
        return subject[0]

    def _claims(self, token: str) -> _Claims:
        payload, dot, mac = token.partition(".")
        if not dot or not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            raise TokenError("TOKEN_INVALID")
        try:
            return _CLAIMS.decode(_unb64url(payload))
        except (ValueError, msgspec.DecodeError):
            raise TokenError("TOKEN_INVALID") from None

    def _mac(self, payload: str) -> str:
        return _b64url(hmac.digest(self._hmac_key, payload.encode(), "sha256"))


def notification(
    subscription_id: str, wake_id: str, generation: int, streams: list[StreamInfo], callback_url: str, token: str
) -> bytes:
    """The body POSTed to a webhook for a wake."""
    wake = _Notification(subscription_id, wake_id, generation, streams, callback_url, token)
    return msgspec.json.encode(wake)


class _Lane:
    """One owner's deliveries: how many wait or run, and its share of the workers."""

    def __init__(self) -> None:
        self.queued = 0
        self.slots = anyio.Semaphore(_PER_OWNER)


class Deliveries(Generic[Job]):
    """Deliveries waiting, a bounded number in all and per owner, and the workers that make them through one client.

    Fair per owner: an owner's deliveries run on at most `_PER_OWNER` of the `_WORKERS` slots,
    so one owner's slow endpoints always leave the others room, and since each owner has at
    most that many waiting for a slot, owners take the freed slots in turn.
    """

    def __init__(self, egress: Egress) -> None:
        self._egress = egress
        # While `run` runs: its task group, the work, the client, and the workers' slots.
        self._running: tuple[TaskGroup, Work[Job], httpx.AsyncClient, anyio.Semaphore] | None = None
        self._lanes: dict[str, _Lane] = {}
        self._waiting = 0

    def send(self, owner: str, job: Job) -> bool:
        """Queue ``job`` of ``owner``'s; False when the queue, or the owner's part of it, is full, or no workers run."""
        lane = self._lanes.get(owner)
        if self._running is None or self._waiting >= _WAITING or (lane is not None and lane.queued >= _OWNER_WAITING):
            return False
        if lane is None:
            lane = self._lanes[owner] = _Lane()
        lane.queued += 1
        self._waiting += 1
        self._running[0].start_soon(self._one, owner, lane, job)
        return True

    async def run(self, work: Work[Job]) -> None:
        """Make the deliveries with ``work`` until cancelled; a delivery that raises is logged and dropped."""
        http = self._egress.client(timeout=httpx.Timeout(10.0, connect=5.0), max_connections=_WORKERS)
        async with http, anyio.create_task_group() as tasks:
            self._running = (tasks, work, http, anyio.Semaphore(_WORKERS))
            try:
                await anyio.sleep_forever()
            finally:
                self._running = None
                tasks.cancel_scope.cancel()

    async def _one(self, owner: str, lane: _Lane, job: Job) -> None:
        try:
            if self._running is not None:
                _, work, http, slots = self._running
                async with lane.slots, slots:
                    await work(http, job)
        except Exception:
            logger.exception("a webhook delivery failed")
        finally:
            self._waiting -= 1
            lane.queued -= 1
            if not lane.queued and self._lanes.get(owner) is lane:
                del self._lanes[owner]


async def _post(http: httpx.AsyncClient, url: str, body: bytes, signer: Signer) -> bool | None:
    """One attempt: None when it failed, else whether the receiver answered ``{"done": true}``."""
    headers = {"content-type": "application/json", "webhook-signature": signer.sign(body)}
    answer = bytearray()
    try:
        async with http.stream("POST", url, content=body, headers=headers) as response:
            if not response.is_success:
                logger.debug("webhook %s answered %d", url, response.status_code)
                return None
            async for chunk in response.aiter_bytes():
                answer += chunk
                if len(answer) > _MAX_ANSWER:
                    return False
    except httpx.HTTPError as exc:
        logger.debug("webhook %s failed: %s", url, exc)
        return None
    try:
        return _ANSWER.decode(answer).done is True
    except msgspec.DecodeError:
        return False


async def deliver(
    http: httpx.AsyncClient, url: str, body: bytes, signer: Signer, *, wanted: Callable[[], bool]
) -> bool | None:
    """POST ``body`` until it is taken, up to `ATTEMPTS` times while ``wanted()``; as `_post` answers."""
    for attempt in range(ATTEMPTS):
        if attempt:
            await anyio.sleep(_BACKOFF_S * 2 ** (attempt - 1) * random.uniform(0.8, 1.2))
        if not wanted():
            return None
        outcome = await _post(http, url, body, signer)
        if outcome is not None:
            return outcome
    logger.warning("webhook %s did not take its wake in %d attempts", url, ATTEMPTS)
    return None

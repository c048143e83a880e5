"""One subscription (docs/protocol.md §13.6): its configuration, its linked streams and its open wake.

A subscription is kept in the store as a `persistence.SubscriptionRecord`: its `Config` and its
`State`, each encoded, and the version a change is made over. A process holds a `Subscription`
as a copy, read again before each change (`history_service.durable.subscriptions`). A lease is
a wall-clock time, so any process of the store can see that it ran out.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import operator
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final
from urllib.parse import quote

import anyio
import msgspec
from msgspec import Struct

from codec import stream_offset
from history_service.durable import webhooks
from history_service.durable.webhooks import MAX_LINKS, Callback, Config, Refusal, StreamInfo
from persistence import SubscriptionRecord

__all__ = ["BEFORE_FIRST", "Link", "Subscription", "info", "matches", "new_record", "now_ms", "segments"]

logger = logging.getLogger("history_service.durable.subscriptions")

# Before a stream's first byte: what a pattern's new link has acked.
BEFORE_FIRST: Final = -1


class Link(Struct, frozen=True, array_like=True):
    """A linked stream: the position its consumer has acked, and whether it is named, matched, or both.

    ``life`` is the life of the stream (§13.3) that ``acked`` is a position in: a stream deleted
    and made again, by any process, is a new stream, with nothing of it acked.
    """

    acked: int
    explicit: bool = False
    glob: bool = False
    life: int = 0

    def acked_in(self, life: int) -> int:
        """What is acked of the stream in its ``life``."""
        return self.acked if life == self.life else BEFORE_FIRST


class _State(Struct, frozen=True, kw_only=True):
    """What a subscription's record holds besides its configuration."""

    base: str
    created_at: str
    links: dict[str, Link] = msgspec.field(default_factory=dict)
    status: str = "active"
    generation: int = 0
    wake_id: str | None = None
    snapshot: dict[str, int] = msgspec.field(default_factory=dict)
    token: str | None = None
    holder: str | None = None
    lease_until: int | None = None


_ENCODER: Final = msgspec.msgpack.Encoder()
_CONFIG: Final = msgspec.msgpack.Decoder(Config)
_STATE: Final = msgspec.msgpack.Decoder(_State)


def now_ms() -> int:
    return int(time.time() * 1000)


def segments(path: str) -> list[str]:
    return [part for part in path.split("/") if part]


def matches(glob: list[str], name: str) -> bool:
    parts = segments(name)
    # reach[j]: the glob's segments so far match the name's first j; linear, whatever the pattern.
    reach = [True] + [False] * len(parts)
    for part in glob:
        if part == "**":
            reach = list(itertools.accumulate(reach, operator.or_))
        else:
            literal = part.replace("%2A", "*").replace("%2a", "*")
            reach = [False] + [reach[j] and (part == "*" or literal == seg) for j, seg in enumerate(parts)]
    return reach[-1]


def _offset(position: int, life: int) -> str:
    return "-1" if position == BEFORE_FIRST else stream_offset(position, life)


def info(name: str, link: Link, life: int, tail: int | None = None) -> StreamInfo:
    """The stream as a subscription shows it, offsets in its ``life``; with its ``tail``, as a wake does."""
    position = link.acked_in(life)
    kind, acked = "explicit" if link.explicit else "glob", _offset(position, life)
    if tail is None:
        return StreamInfo(name, kind, acked)
    return StreamInfo(name, kind, acked, tail_offset=stream_offset(tail, life), has_pending=tail > position)


def new_record(owner: str, id: str, config: Config, base: str, links: dict[str, Link]) -> SubscriptionRecord:
    """The record of a subscription made now, with no wake open."""
    created_at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    state = _State(base=base, created_at=created_at, links=links)
    return SubscriptionRecord(owner=owner, id=id, config=_ENCODER.encode(config), state=_ENCODER.encode(state))


class Subscription:
    """A process's copy of one subscription and its open wake; changed only under ``lock``, then saved."""

    def __init__(self, record: SubscriptionRecord) -> None:
        self.id = record.id
        self.owner = record.owner
        self.config = _CONFIG.decode(record.config)
        self._config = record.config
        self.glob = segments(self.config.pattern) if self.config.pattern else None
        self.lock = anyio.Lock()
        self.full = False
        # The wakes a change has opened, to send once it is saved (`Subscriptions._change`).
        self.opened: list[str] = []
        self.load(record)

    def load(self, record: SubscriptionRecord) -> None:
        """Take the state of ``record``, the store's."""
        state = _STATE.decode(record.state)
        self.version = record.version
        self.base = state.base
        self.created_at = state.created_at
        self.links = dict(state.links)
        self.status = state.status
        self.generation = state.generation
        self.wake_id = state.wake_id
        self.snapshot = dict(state.snapshot)
        self.token = state.token
        self.holder = state.holder
        self.lease_until = state.lease_until

    def state(self) -> bytes:
        state = _State(
            base=self.base,
            created_at=self.created_at,
            links=self.links,
            status=self.status,
            generation=self.generation,
            wake_id=self.wake_id,
            snapshot=self.snapshot,
            token=self.token,
            holder=self.holder,
            lease_until=self.lease_until,
        )
        return _ENCODER.encode(state)

    def record(self) -> SubscriptionRecord:
        """The copy as a record, at the version it was read at."""
        return SubscriptionRecord(
            owner=self.owner, id=self.id, config=self._config, state=self.state(), version=self.version
        )

    @property
    def subject(self) -> list[str]:
        return [self.owner, self.id]

    def url(self, action: str) -> str:
        return f"{self.base}/v1/stream/__ds/subscriptions/{quote(self.id, safe='')}/{action}"

    def close_wake(self) -> None:
        self.wake_id = self.token = self.holder = self.lease_until = None
        self.snapshot = {}

    def expired(self, now: int) -> bool:
        return self.lease_until is not None and self.lease_until <= now

    def fence(self, signer: webhooks.Signer, token: str, body: Callback) -> None:
        """Refuse ``token`` and ``body`` unless they are the open wake's, its lease still running."""
        try:
            epoch = signer.epoch(token, self.subject)
        except webhooks.TokenError as exc:
            raise Refusal(401, exc.code, "Token expired" if exc.code == "TOKEN_EXPIRED" else "Token invalid") from None
        if (
            self.wake_id is None
            or self.token is None
            or self.expired(now_ms())
            or not hmac.compare_digest(token.encode(), self.token.encode())
            or epoch != self.generation
            or body.generation != self.generation
            or body.wake_id != self.wake_id
        ):
            raise Refusal(409, "FENCED", "Wake generation is stale")

    def matches_anew(self, name: str) -> bool:
        """Whether the pattern matches ``name`` and has not linked it yet."""
        link = self.links.get(name)
        return self.glob is not None and (link is None or not link.glob) and matches(self.glob, name)

    def link_matched(self, name: str) -> None:
        """Link ``name``, a stream of the owner's, if the pattern matches it: with nothing acked, if it is new."""
        if not self.matches_anew(name):
            return
        link = self.links.get(name)
        if link is None and len(self.links) >= MAX_LINKS:
            if not self.full:
                self.full = True
                logger.warning("subscription %r links %d streams: no more are linked", self.id, MAX_LINKS)
            return
        link = Link(acked=BEFORE_FIRST) if link is None else link
        self.links[name] = msgspec.structs.replace(link, glob=True)

    async def unlink(self, name: str, *, dropped: bool = False) -> None:
        """Unlink a named stream (a pattern's link stays), or drop every link to a deleted one."""
        link = self.links.get(name)
        if link is not None and link.glob and not dropped:
            self.links[name] = msgspec.structs.replace(link, explicit=False)
        elif link is not None:
            del self.links[name]

    def take_snapshot(self) -> None:
        """The receiver took the whole snapshot: ack it, as far as no callback already has, and close the wake."""
        for name, tail in self.snapshot.items():
            if (link := self.links.get(name)) is not None and tail > link.acked:
                self.links[name] = msgspec.structs.replace(link, acked=tail)
        self.close_wake()

    def relive(self, lives: Mapping[str, int]) -> None:
        """Links acked in another life of their stream than ``lives`` says start again, with nothing acked."""
        for name, life in lives.items():
            if (link := self.links.get(name)) is not None and link.life != life:
                self.links[name] = msgspec.structs.replace(link, acked=BEFORE_FIRST, life=life)

    def first_pending(self, tails: dict[str, int]) -> str | None:
        for name, tail in tails.items():
            link = self.links.get(name)
            if link is not None and tail > link.acked:
                return name
        return None

    def wants(self, name: str) -> bool:
        """Whether a write to ``name`` concerns this subscription: a stream it links or its pattern matches."""
        if name == self.config.wake_stream:
            return False  # its own wake events would wake it again, without end
        return name in self.links or (self.glob is not None and matches(self.glob, name))

    def view(self, signer: webhooks.Signer, lives: Mapping[str, int]) -> webhooks.View:
        hook = None
        if self.config.webhook is not None:
            signing = webhooks.Signing(alg="ed25519", kid=signer.kid, jwks_url=f"{self.base}/v1/stream/__ds/jwks.json")
            hook = webhooks.HookView(url=self.config.webhook, signing=signing)
        return webhooks.View(
            id=self.id,
            subscription_id=self.id,
            type=self.config.type,
            streams=[info(name, link, lives.get(name, 0)) for name, link in self.links.items()],
            lease_ttl_ms=self.config.lease_ttl_ms,
            created_at=self.created_at,
            status=self.status,
            pattern=self.config.pattern,
            webhook=hook,
            wake_stream=self.config.wake_stream,
            description=self.config.description,
        )

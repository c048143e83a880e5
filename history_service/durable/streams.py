"""Generic Durable Streams over HTTP (docs/protocol.md §13.2): create, append and close, head, read and delete.

The handlers parse the protocol's headers and hand the store one request; the rules are
the store's (`persistence.streams.rules`). A refusal is a `persistence.errors.StreamError`,
answered by `history_service.durable.app`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final, Literal
from urllib.parse import quote, unquote, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from codec import MAX_SAFE_INTEGER, decimal, parse_stream_offset, stream_offset
from history_service.control import has_control
from history_service.durable.reading import CLOSED, NEXT, Snapshot
from history_service.params import MAX_TTL_MS
from persistence import (
    AppendRequest,
    CreateRequest,
    ProducerClaim,
    StreamGoneError,
    StreamMeta,
    StreamRequestError,
    StreamStore,
    media_type,
)

__all__ = [
    "MAX_NAME",
    "MAX_TTL_S",
    "RESERVED",
    "STREAMS",
    "UNKEPT",
    "StreamView",
    "append",
    "checked_name",
    "create",
    "delete",
    "head",
    "plain",
    "unkept",
]

STREAMS: Final = "/v1/stream/"
# The stream names of the protocol's own API (docs/protocol.md §13.6): ``__ds`` and those under ``__ds/``.
RESERVED: Final = "__ds"
# What every request to a generic stream, the subscription API's included, answers on a store that keeps none (JSONL).
UNKEPT: Final = "this store keeps no Durable Streams (docs/protocol.md §13)"
MAX_NAME: Final = 1024
_MEDIA_TYPE: Final = re.compile(r"^[\w.+-]+/[\w.+-]+")
# The longest Stream-TTL: 100 years, as a session's ttlMs, so every deadline it gives is a safe integer.
MAX_TTL_S: Final = MAX_TTL_MS // 1000


def _position(text: str) -> tuple[int, int]:
    """``(life, position)`` of an offset (docs/protocol.md §13.3)."""
    parsed = parse_stream_offset(text)
    if parsed is None:
        raise StreamRequestError(f"not an offset: {text[:40]!r}")
    return parsed


class StreamView:
    """A generic stream as `history_service.durable.reading` reads it."""

    variant = ""

    def __init__(self, store: StreamStore, name: str, owner: str, meta: StreamMeta) -> None:
        self.name = name
        self.key: tuple[object, ...] = ("stream", owner, name)
        self._store = store
        self._owner = owner
        self._ttl = meta.ttl_seconds is not None
        self._meta = meta
        self._life = meta.life
        mode = media_type(meta.content_type)
        self.mode: Literal["json", "text", "base64"] = (
            "json" if mode == "application/json" else "text" if mode.startswith("text/") else "base64"
        )

    def offset(self, position: int) -> str:
        return stream_offset(position, self._life)

    def position(self, offset: str) -> int:
        life, position = _position(offset)
        if not self._meta.owns(life, position):
            raise StreamGoneError("the offset is of an earlier life of this stream, which was deleted")
        return position

    async def read(self, after: int | None, budget: int) -> Snapshot:
        result = await self._store.read(self.name, self._owner, after, budget, self._life)
        meta = result.meta
        return Snapshot(
            content_type=meta.content_type,
            tail=meta.tail,
            chunks=result.chunks,
            complete=result.complete,
            closed=meta.closed,
        )

    async def touch(self) -> None:
        if self._ttl:
            await self._store.touch(self.name)


def _one(request: Request, name: str) -> str | None:
    values = request.headers.getlist(name)
    return values[0] if values else None


def _closing(request: Request) -> bool:
    given = _one(request, "stream-closed")
    if given not in (None, "true", "false"):
        raise StreamRequestError("Stream-Closed is true or false")
    return given == "true"


def _whole(value: str, label: str, high: int, *, leading_zeros: bool = True) -> int:
    """A header's whole number from 0 to ``high`` (`codec.numerals.decimal`), or `StreamRequestError`."""
    number = decimal(value, low=0, high=high, leading_zeros=leading_zeros)
    if number is None:
        unpadded = "" if leading_zeros else ", without sign or leading zeros"
        raise StreamRequestError(f"{label} is a whole number from 0 to {high}{unpadded}")
    return number


def _expiry(request: Request) -> tuple[int | None, str | None, int | None]:
    ttl, expires_at = _one(request, "stream-ttl"), _one(request, "stream-expires-at")
    if ttl is not None and expires_at is not None:
        raise StreamRequestError("send Stream-TTL or Stream-Expires-At, not both")
    if ttl is not None:
        return _whole(ttl, "Stream-TTL", MAX_TTL_S, leading_zeros=False), None, None
    if expires_at is not None:
        try:
            when = datetime.fromisoformat(expires_at.strip())
        except ValueError:
            raise StreamRequestError("Stream-Expires-At is an RFC 3339 time") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return None, expires_at, int(when.timestamp() * 1000)
    return None, None, None


def _source(request: Request) -> str | None:
    """The name ``Stream-Forked-From`` gives: a stream's path (``/v1/stream/<name>``, under ``/ds`` or not) or name."""
    given = _one(request, "stream-forked-from")
    if given is None:
        return None
    path = unquote(urlsplit(given).path)
    for prefix in (request.scope.get("root_path", "") + STREAMS, STREAMS):
        if path.startswith(prefix):
            return checked_name(path[len(prefix) :])
    return checked_name(path.lstrip("/"))


def plain(text: str, most: int = MAX_NAME) -> bool:
    """Whether ``text`` may name a stream or a subscription: 1 to ``most`` characters, no control character."""
    return 0 < len(text) <= most and not has_control(text)


def unkept(headers: dict[str, str]) -> Response:
    """The 501 of a store that keeps no generic streams."""
    return PlainTextResponse(UNKEPT, 501, headers)


def checked_name(name: str) -> str:
    """A stream's name, or `StreamRequestError`: 1 to 1024 characters, none of them control characters."""
    if not plain(name):
        raise StreamRequestError("a stream name is 1 to 1024 characters, none of them control characters")
    return name


async def create(
    request: Request, store: StreamStore, name: str, owner: str, body: bytes, *, max_values: int
) -> tuple[Response, bool]:
    """PUT: the answer, and whether the stream was new (with a body, its readers are woken).

    A JSON-mode body holds at most ``max_values`` values (as `append`'s).
    """
    forked_from = _source(request)
    content_type = _one(request, "content-type")
    if not content_type or not _MEDIA_TYPE.match(content_type.strip()):
        content_type = None
    ttl, expires_at, expires_ms = _expiry(request)
    fork_at: int | None = None
    fork_life: int | None = None
    if (fork_offset := _one(request, "stream-fork-offset")) is not None:
        if forked_from is None:
            raise StreamRequestError("Stream-Fork-Offset needs Stream-Forked-From")
        fork_life, fork_at = _position(fork_offset)
    fork_sub = 0
    if (sub := _one(request, "stream-fork-sub-offset")) is not None:
        if forked_from is None:
            raise StreamRequestError("Stream-Fork-Sub-Offset needs Stream-Forked-From")
        fork_sub = _whole(sub, "Stream-Fork-Sub-Offset", MAX_SAFE_INTEGER, leading_zeros=False)
    meta, created = await store.create(
        CreateRequest(
            name=name,
            owner=owner,
            content_type=content_type,
            body=body,
            ttl_seconds=ttl,
            expires_at=expires_at,
            expires_ms=expires_ms,
            closed=_closing(request),
            forked_from=forked_from,
            fork_at=fork_at,
            fork_life=fork_life,
            fork_sub=fork_sub,
            max_values=max_values,
        )
    )
    headers = {"Content-Type": meta.content_type, NEXT: stream_offset(meta.tail, meta.life)}
    if created:
        # The name may hold any character; a header holds Latin-1 only: the path goes percent-encoded.
        url = request.url
        headers["Location"] = f"{url.scheme}://{url.netloc}{quote(url.path)}"
    if meta.closed:
        headers[CLOSED] = "true"
    return Response(None, 201 if created else 200, headers), created


def _claim(request: Request) -> ProducerClaim | None:
    producer_id, epoch, seq = (_one(request, f"producer-{part}") for part in ("id", "epoch", "seq"))
    if producer_id is None and epoch is None and seq is None:
        return None
    if producer_id is None or epoch is None or seq is None:
        raise StreamRequestError("send Producer-Id, Producer-Epoch and Producer-Seq together")
    if not producer_id:
        raise StreamRequestError("Producer-Id is empty")
    # The protocol bounds producer epochs and seqs by JavaScript's Number.MAX_SAFE_INTEGER.
    return ProducerClaim(
        producer_id, _whole(epoch, "Producer-Epoch", MAX_SAFE_INTEGER), _whole(seq, "Producer-Seq", MAX_SAFE_INTEGER)
    )


async def append(
    request: Request, store: StreamStore, name: str, owner: str, body: bytes, *, max_values: int
) -> Response:
    """POST: an append, a close (``Stream-Closed: true`` with no body), or both.

    A JSON-mode body holds at most ``max_values`` values, counted before it is decoded (413 past it).
    """
    claim = _claim(request)
    close = _closing(request)
    content_type = _one(request, "content-type")
    if not body and not close:
        raise StreamRequestError("an append needs a body")
    if body and not content_type:
        raise StreamRequestError("an append needs a Content-Type")
    outcome = await store.append(
        AppendRequest(
            name=name,
            owner=owner,
            content_type=content_type,
            body=body,
            close=close,
            stream_seq=_one(request, "stream-seq"),
            producer=claim,
            max_values=max_values,
        )
    )
    headers = {NEXT: stream_offset(outcome.tail, outcome.life)}
    if outcome.closed and (close or outcome.status == "duplicate"):
        headers[CLOSED] = "true"
    if claim is not None:
        headers["Producer-Epoch"] = str(claim.epoch)
        headers["Producer-Seq"] = str(outcome.producer_seq)
    status = 200 if claim is not None and outcome.status == "appended" and body else 204
    return Response(None, status, headers)


async def head(store: StreamStore, name: str, owner: str) -> Response:
    meta = await store.head(name, owner)
    headers = {
        NEXT: stream_offset(meta.tail, meta.life),
        "Cache-Control": "no-store",
        "Content-Type": meta.content_type,
    }
    if meta.closed:
        headers[CLOSED] = "true"
    if meta.ttl_seconds is not None:
        headers["Stream-TTL"] = str(meta.ttl_seconds)
    if meta.expires_at is not None:
        headers["Stream-Expires-At"] = meta.expires_at
    return Response(None, 200, headers)


async def delete(store: StreamStore, name: str, owner: str) -> Response:
    await store.delete(name, owner)
    return Response(None, 204)

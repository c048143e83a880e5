"""What a Durable Stream is to a store: its metadata, its producers, and the requests and outcomes of writes."""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

__all__ = [
    "AppendOutcome",
    "AppendRequest",
    "Chunk",
    "CreateRequest",
    "Producer",
    "ProducerClaim",
    "StreamMeta",
    "SubscriptionRecord",
]


class Producer(Struct, frozen=True, array_like=True):
    """An idempotent producer's state on one stream: its epoch and the last seq it had accepted."""

    epoch: int
    seq: int
    updated_ms: int


class ProducerClaim(Struct, frozen=True, array_like=True):
    """The ``Producer-Id``/``-Epoch``/``-Seq`` a write carries."""

    id: str
    epoch: int
    seq: int


class StreamMeta(Struct, frozen=True, kw_only=True):
    """One stream's state. ``tail`` is the byte position after its last chunk, ``life`` its offsets' epoch.

    A fork reads its source's chunks up to ``fork_at``, then its own; ``depth`` is how many
    forks lie between it and a stream that is none. ``refs`` counts the
    forks that read through it; a deleted stream that still has some is only ``gone``
    (read through by its forks, answered 410 to everyone else) until the last one goes.
    """

    name: str
    owner: str
    content_type: str
    created_ms: int
    accessed_ms: int
    tail: int = 0
    ttl_seconds: int | None = None
    expires_at: str | None = None
    expires_ms: int | None = None
    closed: bool = False
    closed_by: ProducerClaim | None = None
    stream_seq: str | None = None
    forked_from: str | None = None
    depth: int = 0
    fork_at: int | None = None
    fork_sub: int = 0
    refs: int = 0
    gone: bool = False
    # The epoch of the stream's offsets: drawn at its creation, so no offset of an earlier life of the name is
    # one of this life's (0: a stream stored before lives were drawn).
    life: int = 0
    # A fork's sources' lives, nearest first, each with the last position of the fork its offsets may name.
    source_lives: tuple[tuple[int, int], ...] = ()

    def owns(self, life: int, position: int) -> bool:
        """Whether an offset ``<life>_<position>`` is one of this stream's (its place is checked apart).

        An offset of this life is; so is the zero offset, the start of any stream; and so is an
        offset a source gave, up to where the fork left it.
        """
        if life == self.life or (life == 0 and position == 0):
            return True
        return any(life == source and position <= through for source, through in self.source_lives)

    @property
    def json(self) -> bool:
        return media_type(self.content_type) == "application/json"

    def expired(self, now: int) -> bool:
        if self.expires_ms is not None and now >= self.expires_ms:
            return True
        return self.ttl_seconds is not None and now >= self.accessed_ms + self.ttl_seconds * 1000


class Chunk(Struct, frozen=True, array_like=True):
    """One append's bytes (a JSON stream's fragment), and the position after them: its offset."""

    end: int
    data: bytes


class CreateRequest(Struct, frozen=True, kw_only=True):
    name: str
    owner: str
    content_type: str | None
    body: bytes = b""
    ttl_seconds: int | None = None
    expires_at: str | None = None
    expires_ms: int | None = None
    closed: bool = False
    forked_from: str | None = None
    depth: int = 0
    fork_at: int | None = None
    # The life ``Stream-Fork-Offset`` named: an offset of another life of the source is refused.
    fork_life: int | None = None
    fork_sub: int = 0
    # The most JSON values the body may hold, if the stream is JSON (`codec.values_within`); None: no bound.
    max_values: int | None = None


class AppendRequest(Struct, frozen=True, kw_only=True):
    """An append (``body``), a close (``close`` with no body), or both at once."""

    name: str
    owner: str
    content_type: str | None
    body: bytes = b""
    close: bool = False
    stream_seq: str | None = None
    producer: ProducerClaim | None = None
    # As `CreateRequest.max_values`.
    max_values: int | None = None


class AppendOutcome(Struct, frozen=True, kw_only=True):
    """``appended`` (or closed) now, or a ``duplicate`` a producer had already had accepted.

    ``producer_seq`` is the highest seq accepted for the claim's epoch.
    """

    status: Literal["appended", "duplicate"]
    tail: int
    closed: bool
    producer_seq: int | None = None
    life: int = 0


class SubscriptionRecord(Struct, frozen=True, kw_only=True):
    """A subscription as a store keeps it (docs/protocol.md §13.6): its owner and id, and the configuration a
    second PUT is compared with and the state, both opaque to the store. ``version`` counts its changes, so a
    change made to a copy that another process has changed since is refused (`persistence.streams.subscribed`).
    """

    owner: str
    id: str
    config: bytes
    state: bytes
    version: int = 0


def media_type(content_type: str | None) -> str:
    """The media type alone, lower case: what two content types are compared by."""
    return (content_type or "").split(";", 1)[0].strip().lower()

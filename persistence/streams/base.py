"""The contract of every store's Durable Streams (docs/protocol.md §13); `persistence.streams.rules` has the rules."""

from __future__ import annotations

from abc import ABC, abstractmethod

from msgspec import Struct

from persistence.streams.model import AppendOutcome, AppendRequest, Chunk, CreateRequest, StreamMeta, SubscriptionRecord

__all__ = ["ReadResult", "StreamStore"]


class ReadResult(Struct, frozen=True):
    """A read: the stream as it stood, its chunks, and whether they reach its tail (``complete``)."""

    meta: StreamMeta
    chunks: list[Chunk]
    complete: bool


class StreamStore(ABC):
    """Generic Durable Streams on a store: any content type, forks, producers, closure and expiry.

    Every write is one transaction (on SQL, one unit of the store's group commit). Reads
    never write, except `touch`, which a TTL stream's read calls to restart its clock.
    """

    @abstractmethod
    async def create(self, request: CreateRequest) -> tuple[StreamMeta, bool]:
        """The stream, and whether it was created now; raises a `persistence.errors.StreamError`."""

    @abstractmethod
    async def append(self, request: AppendRequest) -> AppendOutcome: ...

    @abstractmethod
    async def delete(self, name: str, owner: str) -> None: ...

    @abstractmethod
    async def head(self, name: str, owner: str) -> StreamMeta:
        """The stream's metadata; `StreamNotFoundError` or `StreamGoneError`."""

    @abstractmethod
    async def read(self, name: str, owner: str, after: int | None, budget: int, life: int | None = None) -> ReadResult:
        """The chunks past ``after`` within ``budget`` bytes (``None``: none, only the state); `rules.read` says more.

        ``life`` is the epoch of the offset ``after`` came from: another life's is `StreamGoneError`.
        """

    @abstractmethod
    async def touch(self, name: str) -> None: ...

    @abstractmethod
    async def expired(self, now: int, limit: int) -> list[str]:
        """Up to ``limit`` names of streams expired at ``now`` and not yet swept."""

    @abstractmethod
    async def sweep(self, name: str) -> bool:
        """Delete (or mark gone) the stream if it has expired; whether it did."""

    @abstractmethod
    async def subscription(self, owner: str, id: str) -> SubscriptionRecord | None: ...

    @abstractmethod
    async def subscriptions(self) -> list[SubscriptionRecord]:
        """Every subscription record (a bounded number: the service limits them)."""

    @abstractmethod
    async def create_subscription(
        self, record: SubscriptionRecord, per_owner: int, total: int
    ) -> tuple[SubscriptionRecord, bool] | None:
        """As `persistence.streams.subscribed.create`."""

    @abstractmethod
    async def change_subscription(self, record: SubscriptionRecord) -> SubscriptionRecord | None:
        """As `persistence.streams.subscribed.change`."""

    @abstractmethod
    async def remove_subscription(self, owner: str, id: str) -> bool: ...

"""Durable Streams in memory: the rules on dicts, each call whole on the event loop."""

from __future__ import annotations

import bisect

import persistence.streams.rules as rules
import persistence.streams.subscribed as subscribed
from persistence.clock import now_ms
from persistence.streams.base import ReadResult, StreamStore
from persistence.streams.model import (
    AppendOutcome,
    AppendRequest,
    Chunk,
    CreateRequest,
    Producer,
    StreamMeta,
    SubscriptionRecord,
)

__all__ = ["MemoryStreams"]


class _Tx:
    """`rules.Tx` on the store's dicts; each rule runs to its end before another starts, so it is atomic."""

    def __init__(self, store: MemoryStreams) -> None:
        self._store = store

    def meta(self, name: str) -> StreamMeta | None:
        return self._store.metas.get(name)

    def save(self, meta: StreamMeta) -> None:
        self._store.metas[meta.name] = meta

    def drop(self, name: str) -> None:
        self._store.metas.pop(name, None)
        self._store.chunks.pop(name, None)
        self._store.ends.pop(name, None)
        self._store.producers.pop(name, None)

    def producer(self, name: str, producer_id: str) -> Producer | None:
        return self._store.producers.get(name, {}).get(producer_id)

    def save_producer(self, name: str, producer_id: str, state: Producer) -> None:
        self._store.producers.setdefault(name, {})[producer_id] = state

    def add(self, name: str, chunk: Chunk) -> None:
        self._store.chunks.setdefault(name, []).append(chunk)
        self._store.ends.setdefault(name, []).append(chunk.end)

    def ends_at(self, name: str, position: int) -> bool:
        ends = self._store.ends.get(name, [])
        at = bisect.bisect_left(ends, position)
        return at < len(ends) and ends[at] == position

    def chunks(self, name: str, after: int, through: int | None, budget: int) -> list[Chunk]:
        chunks, ends = self._store.chunks.get(name, []), self._store.ends.get(name, [])
        found: list[Chunk] = []
        size = 0
        for index in range(bisect.bisect_right(ends, after), len(chunks)):
            chunk = chunks[index]
            if (through is not None and chunk.end > through) or (found and size + len(chunk.data) > budget):
                break
            found.append(chunk)
            size += len(chunk.data)
        return found


class _Subscribed:
    """`subscribed.Tx` on the store's dict of records."""

    def __init__(self, records: dict[tuple[str, str], SubscriptionRecord]) -> None:
        self._records = records

    def subscription(self, owner: str, id: str) -> SubscriptionRecord | None:
        return self._records.get((owner, id))

    def count(self, owner: str | None) -> int:
        if owner is None:
            return sum(key[0] != subscribed.SHARED_OWNER for key in self._records)
        return sum(key[0] == owner for key in self._records)

    def put(self, record: SubscriptionRecord) -> None:
        self._records[record.owner, record.id] = record

    def drop(self, owner: str, id: str) -> None:
        self._records.pop((owner, id), None)


class MemoryStreams(StreamStore):
    def __init__(self) -> None:
        self.metas: dict[str, StreamMeta] = {}
        self.chunks: dict[str, list[Chunk]] = {}
        self.ends: dict[str, list[int]] = {}
        self.producers: dict[str, dict[str, Producer]] = {}
        self._tx = _Tx(self)
        self.subscribed: dict[tuple[str, str], SubscriptionRecord] = {}
        self._subscribed = _Subscribed(self.subscribed)

    async def create(self, request: CreateRequest) -> tuple[StreamMeta, bool]:
        return rules.create(self._tx, request, now_ms())

    async def append(self, request: AppendRequest) -> AppendOutcome:
        return rules.append(self._tx, request, now_ms())

    async def delete(self, name: str, owner: str) -> None:
        rules.delete(self._tx, name, owner, now_ms())

    async def head(self, name: str, owner: str) -> StreamMeta:
        return rules.live(self._tx, name, owner, now_ms())

    async def read(self, name: str, owner: str, after: int | None, budget: int, life: int | None = None) -> ReadResult:
        return ReadResult(*rules.read(self._tx, name, owner, after, budget, now_ms(), life))

    async def touch(self, name: str) -> None:
        rules.touch(self._tx, name, now_ms())

    async def expired(self, now: int, limit: int) -> list[str]:
        return [meta.name for meta in self.metas.values() if meta.expired(now) and not meta.gone][:limit]

    async def sweep(self, name: str) -> bool:
        return rules.sweep(self._tx, name, now_ms())

    async def subscription(self, owner: str, id: str) -> SubscriptionRecord | None:
        return self._subscribed.subscription(owner, id)

    async def subscriptions(self) -> list[SubscriptionRecord]:
        return list(self.subscribed.values())

    async def create_subscription(
        self, record: SubscriptionRecord, per_owner: int, total: int
    ) -> tuple[SubscriptionRecord, bool] | None:
        return subscribed.create(self._subscribed, record, per_owner, total)

    async def change_subscription(self, record: SubscriptionRecord) -> SubscriptionRecord | None:
        return subscribed.change(self._subscribed, record)

    async def remove_subscription(self, owner: str, id: str) -> bool:
        return subscribed.remove(self._subscribed, owner, id)

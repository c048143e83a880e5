"""Durable Streams on the SQL store: the rules (`persistence.streams.rules`) over its tables.

A write is one unit of the store's group commit, so it shares the group's transaction and
fsync with the session appends beside it, and a producer's state commits with its append.
A unit reads the stream's row ``FOR UPDATE`` (on PostgreSQL; SQLite's one writer already
serializes them), so two processes' writes to one stream take turns. Reads take the store's
kept readers, as a page does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

import msgspec
import sqlalchemy as sa
from sqlalchemy.engine import Dialect as SaDialect

import persistence.streams.rules as rules
import persistence.streams.subscribed as subscribed
from persistence.clock import now_ms
from persistence.errors import StoreError, StreamGoneError
from persistence.sql.backend import Backend
from persistence.sql.dialect import Dialect
from persistence.sql.prepared import Prepared
from persistence.sql.schema import ds_chunks_table, ds_producers_table, ds_streams_table, ds_subscriptions_table
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

__all__ = ["SqlStreams"]

T = TypeVar("T")
_KEY: Final = "ds\x00"
_SUBSCRIPTION_KEY: Final = "dss\x00"
_meta_encoder = msgspec.msgpack.Encoder()
_meta_decoder = msgspec.msgpack.Decoder(StreamMeta)
_producer_decoder = msgspec.msgpack.Decoder(Producer)


def _deadline(meta: StreamMeta) -> int | None:
    """When the stream expires, by its own clock: what the sweeper's index is on."""
    ends = [meta.expires_ms] if meta.expires_ms is not None else []
    if meta.ttl_seconds is not None:
        ends.append(meta.accessed_ms + meta.ttl_seconds * 1000)
    return min(ends) if ends and not meta.gone else None


class _Statements:
    def __init__(self, dialect: SaDialect, ways: Dialect) -> None:
        s, c, p = ds_streams_table.c, ds_chunks_table.c, ds_producers_table.c
        b = sa.bindparam

        def prepared(statement: Any) -> Prepared:
            return Prepared(statement, dialect)

        self.meta = prepared(sa.select(s.meta).where(s.name == b("name")))
        self.meta_for_update = prepared(ways.lock_head(sa.select(s.meta).where(s.name == b("name"))))
        self.insert = prepared(sa.insert(ds_streams_table))
        self.update = prepared(
            sa.update(ds_streams_table).where(s.name == b("name")).values(meta=b("meta"), deadline=b("deadline"))
        )
        self.drop = prepared(sa.delete(ds_streams_table).where(s.name == b("name")))
        self.drop_chunks = prepared(sa.delete(ds_chunks_table).where(c.name == b("name")))
        self.drop_producers = prepared(sa.delete(ds_producers_table).where(p.name == b("name")))
        self.producer = prepared(sa.select(p.state).where(p.name == b("name"), p.producer_id == b("producer_id")))
        self.insert_producer = prepared(sa.insert(ds_producers_table))
        self.update_producer = prepared(
            sa.update(ds_producers_table)
            .where(p.name == b("name"), p.producer_id == b("producer_id"))
            .values(state=b("state"))
        )
        self.add = prepared(sa.insert(ds_chunks_table))
        self.ends_at = prepared(sa.select(c.end_pos).where(c.name == b("name"), c.end_pos == b("at")))
        # A read first learns its chunks' sizes, then fetches only the data of those within its budget.
        sizes = sa.select(c.end_pos, sa.func.length(c.data)).where(c.name == b("name"), c.end_pos > b("after"))
        self.sizes = prepared(sizes.where(c.end_pos <= b("through")).order_by(c.end_pos).limit(b("limit")))
        self.chunks = prepared(
            sa.select(c.end_pos, c.data)
            .where(c.name == b("name"), c.end_pos > b("after"), c.end_pos <= b("through"))
            .order_by(c.end_pos)
        )
        self.expired = prepared(sa.select(s.name).where(s.deadline <= b("now")).order_by(s.deadline).limit(b("limit")))
        u = ds_subscriptions_table.c
        record = sa.select(u.owner, u.id, u.config, u.state, u.version)
        one = (u.owner == b("owner"), u.id == b("id"))
        self.subscription = prepared(record.where(*one))
        self.subscription_for_update = prepared(ways.lock_head(record.where(*one)))
        self.subscriptions = prepared(record.order_by(u.owner, u.id))
        self.count_owner = prepared(sa.select(sa.func.count()).where(u.owner == b("owner")))
        self.count_all = prepared(sa.select(sa.func.count()).where(u.owner != subscribed.SHARED_OWNER))
        self.insert_subscription = prepared(sa.insert(ds_subscriptions_table))
        self.update_subscription = prepared(
            sa.update(ds_subscriptions_table)
            .where(*one)
            .values(config=b("config"), state=b("state"), version=b("version"))
        )
        self.drop_subscription = prepared(sa.delete(ds_subscriptions_table).where(*one))


# Chunk sizes learned per round trip of a read: a budget's worth of small appends takes a few.
_BATCH: Final = 256
# Past any position: the bound of a read not capped by a tail.
_END: Final = 2**62


class _Tx:
    """`rules.Tx` on a DBAPI cursor; ``lock`` reads a stream's row for update (a write's unit)."""

    def __init__(self, sql: _Statements, cursor: Any, *, lock: bool) -> None:
        self._sql = sql
        self._cursor = cursor
        self._lock = lock
        self._present: set[str] = set()

    def meta(self, name: str) -> StreamMeta | None:
        statement = self._sql.meta_for_update if self._lock else self._sql.meta
        row = statement.run(self._cursor, name=name).fetchone()
        if row is None:
            return None
        self._present.add(name)
        return _meta_decoder.decode(row[0])

    def save(self, meta: StreamMeta) -> None:
        values = {"name": meta.name, "meta": _meta_encoder.encode(meta), "deadline": _deadline(meta)}
        if meta.name in self._present:
            self._sql.update.run(self._cursor, **values)
        else:
            self._sql.insert.run(self._cursor, **values)
            self._present.add(meta.name)

    def drop(self, name: str) -> None:
        for statement in (self._sql.drop_chunks, self._sql.drop_producers, self._sql.drop):
            statement.run(self._cursor, name=name)
        self._present.discard(name)

    def producer(self, name: str, producer_id: str) -> Producer | None:
        row = self._sql.producer.run(self._cursor, name=name, producer_id=producer_id).fetchone()
        return None if row is None else _producer_decoder.decode(row[0])

    def save_producer(self, name: str, producer_id: str, state: Producer) -> None:
        values = {"name": name, "producer_id": producer_id, "state": _meta_encoder.encode(state)}
        if self._sql.update_producer.run(self._cursor, **values).rowcount == 0:
            self._sql.insert_producer.run(self._cursor, **values)

    def add(self, name: str, chunk: Chunk) -> None:
        self._sql.add.run(self._cursor, name=name, end_pos=chunk.end, data=chunk.data)

    def ends_at(self, name: str, position: int) -> bool:
        return self._sql.ends_at.run(self._cursor, name=name, at=position).fetchone() is not None

    def chunks(self, name: str, after: int, through: int | None, budget: int) -> list[Chunk]:
        ends: list[int] = []
        size, last, full = 0, after, False
        while not full:
            rows = self._sql.sizes.run(
                self._cursor, name=name, after=last, through=_END if through is None else through, limit=_BATCH
            ).fetchall()
            for end, length in rows:
                if ends and size + length > budget:
                    full = True
                    break
                ends.append(end)
                size += length
            if len(rows) < _BATCH:
                break
            last = ends[-1]
        if not ends:
            return []
        rows = self._sql.chunks.run(self._cursor, name=name, after=after, through=ends[-1]).fetchall()
        found = [Chunk(end, bytes(data)) for end, data in rows]
        if [chunk.end for chunk in found] != ends:
            # Deleted, and perhaps made again, between the two statements (each its own snapshot on PostgreSQL).
            raise StreamGoneError("the stream changed while it was read")
        return found


def _record(row: Any) -> SubscriptionRecord:
    owner, id, config, state, version = row
    return SubscriptionRecord(owner=owner, id=id, config=bytes(config), state=bytes(state), version=version)


class _Subscribed:
    """`subscribed.Tx` on a DBAPI cursor; ``lock`` reads a record for update (a write's unit)."""

    def __init__(self, sql: _Statements, cursor: Any, *, lock: bool) -> None:
        self._sql = sql
        self._cursor = cursor
        self._lock = lock
        self._present: set[tuple[str, str]] = set()

    def subscription(self, owner: str, id: str) -> SubscriptionRecord | None:
        statement = self._sql.subscription_for_update if self._lock else self._sql.subscription
        row = statement.run(self._cursor, owner=owner, id=id).fetchone()
        if row is None:
            return None
        self._present.add((owner, id))
        return _record(row)

    def count(self, owner: str | None) -> int:
        if owner is None:
            return int(self._sql.count_all.run(self._cursor).fetchone()[0])
        return int(self._sql.count_owner.run(self._cursor, owner=owner).fetchone()[0])

    def put(self, record: SubscriptionRecord) -> None:
        values = {
            "owner": record.owner,
            "id": record.id,
            "config": record.config,
            "state": record.state,
            "version": record.version,
        }
        if (record.owner, record.id) in self._present:
            self._sql.update_subscription.run(self._cursor, **values)
        else:
            self._sql.insert_subscription.run(self._cursor, **values)
            self._present.add((record.owner, record.id))

    def drop(self, owner: str, id: str) -> None:
        self._sql.drop_subscription.run(self._cursor, owner=owner, id=id)
        self._present.discard((owner, id))


class SqlStreams(StreamStore):
    """The streams of a SQL store on ``dialect`` (SQLAlchemy's), through its ``backend``'s writer and readers."""

    def __init__(self, dialect: SaDialect, backend: Backend) -> None:
        self._backend = backend
        self._sql = _Statements(dialect, backend.dialect)

    async def _write(self, name: str, work: Callable[[_Tx, int], T], *, notify: bool = True) -> T:
        sql, dialect = self._sql, self._backend.dialect

        def unit(cursor: Any) -> T:
            result = work(_Tx(sql, cursor, lock=True), now_ms())
            if notify:
                dialect.notify_stream(cursor, name)
            return result

        return await self._backend.writer.run(unit, _KEY + name)

    async def _read(self, work: Callable[[_Tx, int], T], *, data: bool = False) -> T:
        sql = self._sql

        def reading(cursor: Any) -> T:
            return work(_Tx(sql, cursor, lock=False), now_ms())

        if data:
            # A read of chunks may take a budget's worth (a megabyte or more): never on the event loop.
            return await self._backend.readers.in_thread(reading)
        # The store's own read path, as a page's: PostgreSQL's kept async readers (which readiness
        # checks), SQLite's reader on the loop unless a writer holds the lock.
        return await self._backend.read(reading)

    async def create(self, request: CreateRequest) -> tuple[StreamMeta, bool]:
        try:
            return await self._write(request.name, lambda tx, now: rules.create(tx, request, now))
        except StoreError as exc:
            # Another process inserted the name between this unit's read and its insert (no row to
            # lock then): once more, the unit reads that row and answers as for any existing stream.
            if not isinstance(exc.__cause__, self._backend.integrity_error):
                raise
        return await self._write(request.name, lambda tx, now: rules.create(tx, request, now))

    async def append(self, request: AppendRequest) -> AppendOutcome:
        return await self._write(request.name, lambda tx, now: rules.append(tx, request, now))

    async def delete(self, name: str, owner: str) -> None:
        await self._write(name, lambda tx, now: rules.delete(tx, name, owner, now))

    async def head(self, name: str, owner: str) -> StreamMeta:
        return await self._read(lambda tx, now: rules.live(tx, name, owner, now))

    async def read(self, name: str, owner: str, after: int | None, budget: int, life: int | None = None) -> ReadResult:
        return ReadResult(
            *await self._read(
                lambda tx, now: rules.read(tx, name, owner, after, budget, now, life), data=after is not None
            )
        )

    async def touch(self, name: str) -> None:
        await self._write(name, lambda tx, now: rules.touch(tx, name, now), notify=False)

    async def expired(self, now: int, limit: int) -> list[str]:
        def names(tx: _Tx, _: int) -> list[str]:
            return [row[0] for row in self._sql.expired.run(tx._cursor, now=now, limit=limit).fetchall()]

        return await self._read(names)

    async def sweep(self, name: str) -> bool:
        return await self._write(name, lambda tx, now: rules.sweep(tx, name, now))

    async def _subscribed(self, owner: str, id: str, work: Callable[[_Subscribed], T]) -> T:
        sql = self._sql
        return await self._backend.writer.run(
            lambda cursor: work(_Subscribed(sql, cursor, lock=True)), f"{_SUBSCRIPTION_KEY}{owner}\x00{id}"
        )

    async def subscription(self, owner: str, id: str) -> SubscriptionRecord | None:
        sql = self._sql

        def reading(cursor: Any) -> SubscriptionRecord | None:
            return _Subscribed(sql, cursor, lock=False).subscription(owner, id)

        return await self._backend.read(reading)

    async def subscriptions(self) -> list[SubscriptionRecord]:
        sql = self._sql

        def reading(cursor: Any) -> list[SubscriptionRecord]:
            return [_record(row) for row in sql.subscriptions.run(cursor).fetchall()]

        return await self._backend.read(reading)

    async def create_subscription(
        self, record: SubscriptionRecord, per_owner: int, total: int
    ) -> tuple[SubscriptionRecord, bool] | None:
        def creating(tx: _Subscribed) -> tuple[SubscriptionRecord, bool] | None:
            return subscribed.create(tx, record, per_owner, total)

        try:
            return await self._subscribed(record.owner, record.id, creating)
        except StoreError as exc:
            # Another process inserted it between this unit's read and its insert: read it now.
            if not isinstance(exc.__cause__, self._backend.integrity_error):
                raise
        return await self._subscribed(record.owner, record.id, creating)

    async def change_subscription(self, record: SubscriptionRecord) -> SubscriptionRecord | None:
        return await self._subscribed(record.owner, record.id, lambda tx: subscribed.change(tx, record))

    async def remove_subscription(self, owner: str, id: str) -> bool:
        return await self._subscribed(owner, id, lambda tx: subscribed.remove(tx, owner, id))

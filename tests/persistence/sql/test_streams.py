"""Durable Streams on the SQL store (persistence/sql/streams.py): the schema upgrade, durability, two processes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
import sqlalchemy as sa

from codec import SessionHeader
from persistence.errors import StreamClosedError, StreamGoneError
from persistence.sql import SqlStore
from persistence.streams import (
    AppendOutcome,
    AppendRequest,
    CreateRequest,
    ProducerClaim,
    StreamStore,
    SubscriptionRecord,
)
from testing.events import plain
from testing.postgres import PG_URL, PG_URL_ENV, empty_postgres
from tests.persistence.test_sql import schema_of, to_version_5, to_version_6

pytestmark = pytest.mark.anyio

OWNER = "alice"
DS_TABLES = {"ds_streams", "ds_chunks", "ds_producers"}


def tables_of(url: str) -> set[str]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        names = set(sa.inspect(conn).get_table_names())
    engine.dispose()
    return names


def streams_of(store: SqlStore) -> StreamStore:
    assert store.streams is not None
    return store.streams


async def contents(streams: StreamStore, name: str) -> bytes:
    result = await streams.read(name, OWNER, 0, 1 << 30)
    assert result.complete
    return b"".join(chunk.data for chunk in result.chunks)


def appending(name: str, body: bytes, producer: tuple[str, int, int] | None = None, **fields: object) -> AppendRequest:
    claim = None if producer is None else ProducerClaim(*producer)
    return AppendRequest(name=name, owner=OWNER, content_type=None, body=body, producer=claim, **fields)  # type: ignore[arg-type]


async def test_a_version_5_database_is_upgraded_and_then_keeps_streams(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    await store.create_session(SessionHeader(id="s", createdAt=1))
    await store.append("s", [plain(0)])
    await store.close()
    to_version_5(sql_url)
    assert schema_of(sql_url)[0] == "5" and not tables_of(sql_url) & DS_TABLES

    store = await SqlStore.open(sql_url)
    try:
        assert schema_of(sql_url)[0] == "10" and DS_TABLES <= tables_of(sql_url)
        assert await store.read_events("s", 0, 1) == [plain(0)]
        streams = streams_of(store)
        meta, created = await streams.create(
            CreateRequest(name="ds", owner=OWNER, content_type="text/plain", body=b"a")
        )
        assert created and meta.tail == 1
        assert (await streams.append(appending("ds", b"b"))).tail == 2
        assert await contents(streams, "ds") == b"ab"
    finally:
        await store.close()


async def test_a_version_6_database_is_upgraded_and_then_keeps_subscriptions(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    await streams_of(store).create(CreateRequest(name="ds", owner=OWNER, content_type="text/plain", body=b"a"))
    await store.close()
    to_version_6(sql_url)
    assert schema_of(sql_url)[0] == "6" and "ds_subscriptions" not in tables_of(sql_url)

    store = await SqlStore.open(sql_url)
    try:
        assert schema_of(sql_url)[0] == "10" and "ds_subscriptions" in tables_of(sql_url)
        assert await contents(streams_of(store), "ds") == b"a"
        record = SubscriptionRecord(owner=OWNER, id="s1", config=b"c", state=b"s")
        assert await streams_of(store).create_subscription(record, 64, 4096) is not None
    finally:
        await store.close()
    store = await SqlStore.open(sql_url)
    try:
        assert [(r.id, r.version) for r in await streams_of(store).subscriptions()] == [("s1", 1)]
    finally:
        await store.close()


async def test_streams_survive_reopening_the_store(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    streams = streams_of(store)
    await streams.create(CreateRequest(name="src", owner=OWNER, content_type="application/json", body=b"[1]"))
    await streams.append(appending("src", b'{"a": 2}', producer=("p", 0, 0), stream_seq="a"))
    await streams.create(CreateRequest(name="fork", owner=OWNER, content_type=None, forked_from="src", fork_at=2))
    await streams.append(appending("fork", b"3", close=True))
    await streams.delete("src", OWNER)
    await store.close()

    store = await SqlStore.open(sql_url)
    try:
        streams = streams_of(store)
        assert await contents(streams, "fork") == b"1,3,"
        fork = await streams.head("fork", OWNER)
        assert (fork.closed, fork.tail, fork.forked_from, fork.content_type) == (True, 4, "src", "application/json")
        with pytest.raises(StreamClosedError):
            await streams.append(appending("fork", b"4"))
        assert [chunk.data for chunk in (await streams.read("fork", OWNER, 0, 1)).chunks] == [b"1,"]
        with pytest.raises(StreamGoneError):
            await streams.head("src", OWNER)
        await streams.delete("fork", OWNER)
        await streams.create(CreateRequest(name="src", owner=OWNER, content_type="application/json"))
        assert await contents(streams, "src") == b""
    finally:
        await store.close()


async def test_a_producer_and_its_stream_seq_survive_reopening(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    streams = streams_of(store)
    await streams.create(CreateRequest(name="s", owner=OWNER, content_type=None))
    await streams.append(appending("s", b"a", producer=("p", 2, 0), stream_seq="5"))
    await store.close()

    store = await SqlStore.open(sql_url)
    try:
        streams = streams_of(store)
        retried = await streams.append(appending("s", b"a", producer=("p", 2, 0), stream_seq="5"))
        assert (retried.status, retried.producer_seq, retried.tail) == ("duplicate", 0, 1)
        assert (await streams.head("s", OWNER)).stream_seq == "5"
        assert (await streams.append(appending("s", b"b", producer=("p", 2, 1), stream_seq="6"))).tail == 2
        assert await contents(streams, "s") == b"ab"
    finally:
        await store.close()


# Two processes on one PostgreSQL database: each is a store of its own, with its own writer connection.


@pytest.fixture
async def two_stores() -> AsyncIterator[tuple[SqlStore, SqlStore]]:
    if not PG_URL:
        pytest.skip(f"{PG_URL_ENV} is not set")
    await empty_postgres(PG_URL)
    one = await SqlStore.open(PG_URL)
    try:
        two = await SqlStore.open(PG_URL)
        try:
            yield one, two
        finally:
            await two.close()
    finally:
        await one.close()


PRODUCERS = 3
SEQS = 15


async def test_two_stores_appending_at_once_never_duplicate_or_lose_an_append(
    two_stores: tuple[SqlStore, SqlStore],
) -> None:
    one, two = (streams_of(store) for store in two_stores)
    await one.create(CreateRequest(name="s", owner=OWNER, content_type=None))
    accepted: list[tuple[AppendOutcome, bytes]] = []
    duplicates: list[AppendOutcome] = []

    async def produce(streams: StreamStore, producer: str) -> None:
        for seq in range(SEQS):
            body = f"<{producer}:{seq}>".encode()
            outcome = await streams.append(appending("s", body, producer=(producer, 0, seq)))
            assert (outcome.status, outcome.producer_seq) == ("appended", seq)
            accepted.append((outcome, body))

    async def race(streams: StreamStore, body: bytes, seq: int) -> None:
        outcome = await streams.append(appending("s", body, producer=("shared", 0, seq)))
        if outcome.status == "appended":
            accepted.append((outcome, body))
        else:
            assert outcome.producer_seq == seq
            duplicates.append(outcome)

    async def shared() -> None:
        # Both stores send each seq of one producer at once, as a retry racing its original would.
        for seq in range(SEQS):
            async with anyio.create_task_group() as both:
                for streams in (one, two):
                    both.start_soon(race, streams, f"<shared:{seq}>".encode(), seq)

    async with anyio.create_task_group() as group:
        for index in range(PRODUCERS):
            group.start_soon(produce, one, f"one-{index}")
            group.start_soon(produce, two, f"two-{index}")
        group.start_soon(shared)

    assert len(duplicates) == SEQS
    assert len(accepted) == (2 * PRODUCERS + 1) * SEQS
    for streams in (one, two):
        result = await streams.read("s", OWNER, 0, 1 << 30)
        assert result.complete
        ends = [chunk.end for chunk in result.chunks]
        assert all(a < b for a, b in zip(ends, ends[1:], strict=False))
        in_order = sorted(accepted, key=lambda pair: pair[0].tail)
        assert [(chunk.end, chunk.data) for chunk in result.chunks] == [(o.tail, body) for o, body in in_order]
        assert result.meta.tail == sum(len(body) for _, body in accepted)
        written = [chunk.data for chunk in result.chunks]
        for producer in [f"{side}-{index}" for side in ("one", "two") for index in range(PRODUCERS)] + ["shared"]:
            mine = [data for data in written if data.startswith(f"<{producer}:".encode())]
            assert mine == [f"<{producer}:{seq}>".encode() for seq in range(SEQS)]


async def test_two_stores_creating_one_stream_at_once_both_get_it(two_stores: tuple[SqlStore, SqlStore]) -> None:
    one, two = (streams_of(store) for store in two_stores)
    outcomes: dict[tuple[int, str], bool] = {}

    async def create(side: int, streams: StreamStore, name: str) -> None:
        _, created = await streams.create(CreateRequest(name=name, owner=OWNER, content_type="text/plain"))
        outcomes[side, name] = created

    names = [f"s{n}" for n in range(20)]
    async with anyio.create_task_group() as group:
        for name in names:
            group.start_soon(create, 1, one, name)
            group.start_soon(create, 2, two, name)
    assert all(outcomes[1, name] != outcomes[2, name] for name in names)

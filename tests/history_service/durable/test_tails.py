from __future__ import annotations

import pytest

from history_service.durable.subscription import BEFORE_FIRST, Link, Subscription, new_record
from history_service.durable.subscription_bodies import Config
from history_service.durable.tails import Tails
from persistence.streams import CreateRequest, StreamStore
from persistence.streams.memory import MemoryStreams

pytestmark = pytest.mark.anyio

OWNER = "alice"


async def made(streams: StreamStore, name: str, body: bytes) -> int:
    meta, _ = await streams.create(
        CreateRequest(name=name, owner=OWNER, content_type="application/octet-stream", body=body)
    )
    return meta.life


async def test_a_stream_made_again_by_another_process_is_read_in_its_new_life_once_heard() -> None:
    streams = MemoryStreams()
    tails = Tails(streams)
    first = await made(streams, "s", b"abc")
    assert await tails.lives(["s"], OWNER) == {"s": first} and await tails.tail("s", OWNER) == 3
    # Another process deletes the stream and makes it again: what this one kept is of the old life.
    await streams.delete("s", OWNER)
    second = await made(streams, "s", b"x")
    assert second != first and tails.life("s", OWNER) == first
    tails.forget_all("s")
    assert await tails.lives(["s"], OWNER) == {"s": second}
    tails.forget_all(None)
    assert tails.life("s", OWNER) == 0 and await tails.lives(["s"], OWNER) == {"s": second}


async def test_a_deleted_stream_has_no_tail_and_no_life() -> None:
    streams = MemoryStreams()
    tails = Tails(streams)
    await made(streams, "s", b"abc")
    assert await tails.head("s", OWNER) == 3 and tails.life("s", OWNER) != 0
    await streams.delete("s", OWNER)
    assert await tails.head("s", OWNER) is None and tails.life("s", OWNER) == 0
    assert await tails.head("s", "bob") is None and await tails.tail("s", "bob") == 0


def subscription(links: dict[str, Link]) -> Subscription:
    config = Config(
        type="pull-wake",
        pattern=None,
        streams=tuple(links),
        webhook=None,
        wake_stream="wakes",
        lease_ttl_ms=1000,
        description=None,
    )
    return Subscription(new_record(OWNER, "sub", config, "http://x", links))


async def test_a_link_acked_in_an_earlier_life_of_its_stream_has_nothing_acked_in_the_next() -> None:
    streams = MemoryStreams()
    tails = Tails(streams)
    await made(streams, "s", b"abcdef")
    sub = subscription({"s": await tails.link("s", OWNER, explicit=True)})
    assert await tails.of(sub) == {"s": 6} and sub.first_pending({"s": 6}) is None
    # Made again, in another process: its old ack is no position of the new stream.
    await streams.delete("s", OWNER)
    second = await made(streams, "s", b"xy")
    tails.forget_all("s")
    assert await tails.of(sub) == {"s": 2}
    assert sub.links["s"] == Link(acked=BEFORE_FIRST, explicit=True, life=second)
    assert sub.first_pending({"s": 2}) == "s" and sub.links["s"].acked_in(second) == BEFORE_FIRST

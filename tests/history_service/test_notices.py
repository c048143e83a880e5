"""The one fan-out of changes: a session follow and a Durable Streams reader hear local and remote changes alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

import anyio
import pytest

from codec import Event, SessionHeader
from history_service.durable.app import Durable
from history_service.durable.sessions import SESSION_KEY
from history_service.notices import Notices, Subscriber
from history_service.pages import PageQuery
from history_service.service import HistoryService
from history_service.settings import Settings
from persistence import HeadListener, HistoryStore, MemoryStore, Notice, SessionNotFoundError, SqlStore
from persistence.notify import STREAM_NOTICE
from persistence.streams.model import CreateRequest
from testing.events import plain
from testing.postgres import PG_URL, fresh_postgres_store
from testing.wire import id_seq

pytestmark = pytest.mark.anyio


class Recorder(Subscriber):
    """Writes down every change it hears, under its name."""

    def __init__(self, name: str, heard: list[tuple[object, ...]]) -> None:
        self.name = name
        self.heard = heard

    def publish(self, session_id: str, events: Sequence[Event], incarnation: str | None = None) -> None:
        self.heard.append((self.name, "publish", session_id, len(events), incarnation))

    def advanced(self, session_id: str, head: int, closed: bool = False) -> None:
        self.heard.append((self.name, "advanced", session_id, head, closed))

    def deleted(self, session_ids: Sequence[str]) -> None:
        self.heard.append((self.name, "deleted", *session_ids))

    def gone(self, session_id: str, incarnation: str | None) -> None:
        self.heard.append((self.name, "gone", session_id, incarnation))

    def stream_written(self, name: str) -> None:
        self.heard.append((self.name, "stream_written", name))

    def stream_changed(self, name: str | None) -> None:
        self.heard.append((self.name, "stream_changed", name))

    async def resync(self) -> None:
        self.heard.append((self.name, "resync"))


def test_every_subscriber_hears_every_change_in_the_order_they_subscribed() -> None:
    notices, heard = Notices(None), list[tuple[object, ...]]()
    notices.subscribe(Recorder("follow", heard))
    notices.subscribe(Recorder("ds", heard))
    notices.publish("s", [plain(0)], "i")
    notices.advanced("s", 3, closed=True)
    notices.deleted(["s", "s.kid"])
    notices.stream_written("a")
    notices.stream_changed(None)
    assert heard == [
        (name, *change)
        for change in [
            ("publish", "s", 1, "i"),
            ("advanced", "s", 3, True),
            ("deleted", "s", "s.kid"),
            ("stream_written", "a"),
            ("stream_changed", None),
        ]
        for name in ("follow", "ds")
    ]
    assert notices.state == "in-process"


async def test_a_notice_heard_is_told_as_the_change_it_names_and_a_reconnect_resyncs_everyone() -> None:
    notices, heard = Notices(None), list[tuple[object, ...]]()
    notices.subscribe(Recorder("follow", heard))
    notices.subscribe(Recorder("ds", heard))
    notices.heard(Notice("s", 4, "other"))
    notices.heard(Notice("s", 5, "other", closed=True))
    notices.heard(Notice("s", -1, "other", deleted=True, incarnation="i"))
    notices.heard(Notice(STREAM_NOTICE + "a", 0, "other"))
    await notices.resync()
    assert heard == [
        (name, *change)
        for change in [
            ("advanced", "s", 4, False),
            ("advanced", "s", 5, True),
            ("gone", "s", "i"),
            ("stream_changed", "a"),
            ("resync",),
        ]
        for name in ("follow", "ds")
    ]


class Relay(HeadListener):
    """The listener of a store another process writes too: the test tells it what that process sent."""

    def __init__(self) -> None:
        self.on_head: Callable[[Notice], None] | None = None
        self.on_connect: Callable[[], Awaitable[None]] | None = None
        self.connected = anyio.Event()

    async def run(self, on_head: Callable[[Notice], None], on_connect: Callable[[], Awaitable[None]]) -> None:
        self.on_head, self.on_connect = on_head, on_connect
        self.state = "listening"
        self.connected.set()
        await anyio.sleep_forever()


class Log(Relay):
    """A listener that reads a log, as a SQLite file's: what was committed is heard when it next reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.committed: list[Notice] = []
        self.caught_up = 0

    def catch_up(self) -> None:
        self.caught_up += 1
        if self.on_head is not None:
            unread, self.committed = self.committed, []
            for notice in unread:
                self.on_head(notice)


class SharedMemoryStore(MemoryStore):
    """A memory store whose notices come from a `Relay` (a `Log` with ``log``)."""

    def __init__(self, *, log: bool = False) -> None:
        super().__init__()
        self.relay = Log() if log else Relay()

    def listener(self) -> HeadListener | None:
        return self.relay


@asynccontextmanager
async def running(store: HistoryStore) -> AsyncIterator[tuple[HistoryService, Durable]]:
    """The service and its Durable Streams, their background work running, as the app's lifespan runs them."""
    settings = Settings()
    service = HistoryService(settings, store)
    durable = Durable(settings, service)
    async with anyio.create_task_group() as tasks:
        await tasks.start(service.hub.run)
        await tasks.start(service.notices.run, service.closing)
        try:
            yield service, durable
        finally:
            service.hub.close()
            durable.close()


@asynccontextmanager
async def following(service: HistoryService, session_id: str, after: int) -> AsyncIterator[list[int]]:
    """A ``/v1`` follower of ``session_id`` from after ``after``: the seqs it receives, as they come."""
    seqs: list[int] = []

    async def snapshot(info: object) -> bytes:
        raise AssertionError("a resumed follower gets no snapshot")

    async def follow(ready: anyio.Event) -> None:
        async with service.hub.subscribe(session_id, after=after, snapshot=snapshot, retry_ms=1000) as subscription:
            ready.set()
            async for chunk in subscription:
                seqs.extend(id_seq(line[4:]) for line in bytes(chunk).decode().split("\n") if line.startswith("id: "))

    async with anyio.create_task_group() as tasks:
        ready = anyio.Event()
        tasks.start_soon(follow, ready)
        await ready.wait()
        yield seqs
        tasks.cancel_scope.cancel()


async def woken(ticket: asyncio.Event, seqs: list[int], wanted: list[int]) -> None:
    with anyio.fail_after(10):
        while not (ticket.is_set() and seqs == wanted):
            await anyio.sleep(0.01)


def test_settle_reads_what_the_listener_has_not_heard_yet_and_is_nothing_without_one() -> None:
    log, heard = Log(), list[tuple[object, ...]]()
    notices = Notices(log)
    notices.subscribe(Recorder("follow", heard))
    log.on_head = notices.heard  # as `Notices.run` starts it
    log.committed.append(Notice("s", 4, "other"))
    notices.settle()
    assert (log.caught_up, heard) == (1, [("follow", "advanced", "s", 4, False)])
    Notices(None).settle()  # a memory store: only this process writes, there is nothing to hear


async def test_a_kept_owner_and_page_are_never_served_after_a_delete_committed_elsewhere() -> None:
    """The delete is heard when a cache is consulted, not when the listener next polls: no kept page outlives it."""
    store = SharedMemoryStore(log=True)
    await store.create_session(SessionHeader(id="s", createdAt=0), owner="alice")
    await store.append("s", [plain(seq) for seq in range(6)])
    incarnation = (await store.get_session("s")).incarnation
    query = PageQuery(through=5, before=None, max_messages=5, max_bytes=1 << 20, incarnation=incarnation)
    log = store.relay
    assert isinstance(log, Log)
    async with running(store) as (service, _):
        await log.connected.wait()
        kept = await service.page("alice", "s", None, query)
        assert (await service.page("alice", "s", None, query)).body.join() == kept.body.join()
        assert len(service.cache) == 1 and service.access.sessions_known == 1
        await store.delete_session("s")  # as another process would, whose notice is now in the log
        log.committed.append(Notice("s", -1, "other", deleted=True, incarnation=incarnation))
        with pytest.raises(SessionNotFoundError):
            await service.page("alice", "s", None, query)
        assert len(service.cache) == 0 and service.access.deleted("s", incarnation)


async def test_a_remote_notice_wakes_a_v1_follower_and_a_ds_reader_through_the_one_fan_out() -> None:
    store = SharedMemoryStore()
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", [plain(0)])
    async with running(store) as (service, durable), following(service, "s", 0) as seqs:
        await store.relay.connected.wait()
        assert store.relay.on_head is not None
        session_reader, stream_reader = durable.waker.watch(SESSION_KEY + "s"), durable.waker.watch("a")
        await store.append("s", [plain(1), plain(2)])  # as another process would, which then notifies
        store.relay.on_head(Notice("s", 2, "other"))
        await woken(session_reader, seqs, [1, 2])
        assert not stream_reader.is_set()
        store.relay.on_head(Notice(STREAM_NOTICE + "a", 0, "other"))
        assert stream_reader.is_set()


async def test_a_local_append_and_a_local_ds_write_wake_their_readers_through_the_one_fan_out() -> None:
    store = MemoryStore()
    await store.create_session(SessionHeader(id="s", createdAt=0), owner="alice")
    await store.append("s", [plain(0)])
    async with running(store) as (service, durable), following(service, "s", 0) as seqs:
        session_reader, stream_reader = durable.waker.watch(SESSION_KEY + "s"), durable.waker.watch("a")
        await service.append("alice", "s", [plain(1)])
        await woken(session_reader, seqs, [1])
        assert not stream_reader.is_set()
        durable.changed("a")  # what the /ds endpoints call once a write to "a" committed
        assert stream_reader.is_set()


async def test_a_reconnect_wakes_every_ds_reader() -> None:
    store = SharedMemoryStore()
    async with running(store) as (_, durable):
        await store.relay.connected.wait()
        assert store.relay.on_connect is not None
        readers = [durable.waker.watch(name) for name in ("a", SESSION_KEY + "s")]
        await store.relay.on_connect()
        assert all(reader.is_set() for reader in readers)


@pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set; run under scripts/with-postgres")
async def test_on_postgresql_another_processs_appends_wake_a_v1_follower_and_a_ds_reader() -> None:
    assert PG_URL
    writer = await fresh_postgres_store(PG_URL)  # the other process
    reader = await SqlStore.open(PG_URL)
    try:
        await writer.create_session(SessionHeader(id="s", createdAt=0))
        await writer.append("s", [plain(0)])
        async with running(reader) as (service, durable), following(service, "s", 0) as seqs:
            with anyio.fail_after(30):
                while service.notices.state != "listening":
                    await anyio.sleep(0.01)
            session_reader, stream_reader = durable.waker.watch(SESSION_KEY + "s"), durable.waker.watch("a")
            await writer.append("s", [plain(1), plain(2)])
            await woken(session_reader, seqs, [1, 2])
            assert writer.streams is not None
            await writer.streams.create(CreateRequest(name="a", owner="alice", content_type=None, body=b"x"))
            with anyio.fail_after(30):
                await stream_reader.wait()
    finally:
        await reader.close()
        await writer.close()

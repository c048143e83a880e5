"""Follow stream behaviour in process: resume rules, pings, headers, and the hub's store reads."""

from __future__ import annotations

import re

import anyio
import httpx
import pytest

from codec import SessionHeader, StoredRecord
from history_service.app import create_app
from history_service.follow import Hub
from history_service.settings import Settings
from history_service.shutdown import Shutdown
from persistence import MemoryStore, SessionInfo
from testing.asgi import serving
from testing.events import plain
from testing.seeding import seed
from testing.wire import id_seq

pytestmark = pytest.mark.anyio


async def test_a_cursor_ahead_of_the_head_gets_one_error_frame(client: httpx.AsyncClient) -> None:
    (session,) = await seed(client, scenario="multi-turn", seed=1, turns=1)
    response = await client.get("/v1/sessions/multi-turn-1/follow", params={"after": session["headSeq"] + 1})
    assert response.status_code == 200
    assert (
        response.text
        == f'retry: 1000\n\nevent: error\ndata: {{"code":"cursor_ahead","headSeq":{session["headSeq"]}}}\n\n'
    )


def _pings(metrics: str) -> float:
    found = re.search(r'^history_follow_frames_total\{frame="ping"\} (\S+)$', metrics, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_idle_streams_ping_in_the_coding_the_client_accepts_and_end_whole() -> None:
    settings = Settings(ping_interval=0.05, enable_test_seed=True)
    shutdown = Shutdown()
    async with serving(create_app(settings, store=MemoryStore(), shutdown=shutdown)) as client:
        await seed(client, scenario="multi-turn", seed=1, turns=1)
        result: dict[str, httpx.Response] = {}

        async def read() -> None:
            headers = {"Accept-Encoding": "gzip, zstd"}
            result["response"] = await client.get("/v1/sessions/multi-turn-1/follow", headers=headers)

        async with anyio.create_task_group() as group:
            group.start_soon(read)
            # Shut down once three pings went out: the count, not a fixed wait, so a loaded machine passes too.
            with anyio.fail_after(60):
                while _pings((await client.get("/metrics")).text) < 3:
                    await anyio.sleep(0.05)
            shutdown.trigger()
        response = result["response"]
        assert response.headers["content-type"].startswith("text/event-stream")
        # gzip first among equals; its trailer is sent at shutdown, so the decoder sees it whole.
        assert response.headers["content-encoding"] == "gzip" and response.headers["vary"] == "Accept-Encoding"
        assert response.headers["cache-control"] == "no-cache" and response.headers["x-accel-buffering"] == "no"
        assert response.text.count(": ping\n\n") >= 3
        assert response.text.startswith("retry: 1000\n\nid: ")


class CountingStore(MemoryStore):
    """A memory store that counts reads of stored records, as a channel or a follower makes them."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        self.reads += 1
        return await super().read_stored(session_id, from_seq, to_seq)


async def test_a_head_notice_is_read_from_the_store_once_for_every_follower() -> None:
    """What another process appended reaches all of this process's followers from one store read."""
    store = CountingStore()
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", [plain(0)])
    hub = Hub(store, 64, ping_interval=30)

    async def snapshot(info: SessionInfo) -> bytes:
        raise AssertionError("resumed followers get no snapshot")

    received: list[list[int]] = [[] for _ in range(20)]

    async def follow(n: int, ready: anyio.Event) -> None:
        async with hub.subscribe("s", after=0, snapshot=snapshot, retry_ms=1000) as subscription:
            ready.set()
            async for chunk in subscription:
                received[n] += [id_seq(line[4:]) for line in chunk.decode().split("\n") if line.startswith("id: ")]
                if received[n][-1:] == [5]:
                    return

    async with anyio.create_task_group() as tasks:
        await tasks.start(hub.run)
        for n in range(20):
            ready = anyio.Event()
            tasks.start_soon(follow, n, ready)
            await ready.wait()
        await store.append("s", [plain(seq) for seq in range(1, 6)])  # as another process would
        hub.advanced("s", 5)
        with anyio.fail_after(30):
            while any(len(r) < 5 for r in received):
                await anyio.sleep(0.01)
        hub.close()
    assert received == [[1, 2, 3, 4, 5]] * 20
    assert store.reads == 1


async def test_an_idle_sessions_channel_is_released() -> None:
    store = MemoryStore()
    await store.create_session(SessionHeader(id="s", createdAt=0))
    hub = Hub(store, 64, ping_interval=30)

    async def snapshot(info: SessionInfo) -> bytes:
        return b"{}"

    async with hub.subscribe("s", after=None, snapshot=snapshot, retry_ms=1000) as subscription:
        assert re.match(rb"retry: 1000\n\nid: [0-9a-f]{12}:-1\nevent: snapshot", subscription.opening)
        hub.advanced("s", -1)
        assert hub.followed == 1
    hub.publish("s", [plain(0)])
    assert hub.followed == 0


async def test_a_follower_pausing_to_coalesce_skips_nothing_when_the_buffer_moves_meanwhile() -> None:
    """While a busy channel makes a follower wait to coalesce writes, another process's events land in the store
    and this process publishes later ones: the buffer jumps, and the follower must fetch what it jumped over."""
    store = MemoryStore()
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", [plain(0)])
    hub = Hub(store, 64, ping_interval=30, coalesce=0.5)

    async def snapshot(info: SessionInfo) -> bytes:
        raise AssertionError("resumed")

    seqs: list[int] = []

    async def follow(ready: anyio.Event) -> None:
        async with hub.subscribe("s", after=0, snapshot=snapshot, retry_ms=1000) as subscription:
            ready.set()
            async for chunk in subscription:
                seqs.extend(id_seq(line[4:]) for line in chunk.decode().split("\n") if line.startswith("id: "))
                if seqs[-1:] == [30]:
                    return

    async with anyio.create_task_group() as tasks:
        await tasks.start(hub.run)
        ready = anyio.Event()
        tasks.start_soon(follow, ready)
        await ready.wait()
        for seq in range(1, 11):  # a busy session: publishes far closer together than the coalesce interval
            event = plain(seq)
            await store.append("s", [event])
            hub.publish("s", [event])
            await anyio.sleep(0.001)
        with anyio.fail_after(30):
            while not seqs:
                await anyio.sleep(0.001)
        # One more publish makes the follower pause to coalesce. Meanwhile seqs 12-20 land from elsewhere,
        # unannounced, and this process publishes 21-30: the buffer starts over at 21.
        await store.append("s", [plain(11)])
        hub.publish("s", [plain(11)])
        await anyio.sleep(0.05)
        await store.append("s", [plain(seq) for seq in range(12, 21)])
        later = [plain(seq) for seq in range(21, 31)]
        await store.append("s", later)
        hub.publish("s", later)
        with anyio.fail_after(30):
            while seqs[-1:] != [30]:
                await anyio.sleep(0.01)
        hub.close()
    assert seqs == list(range(1, 31))


async def test_a_close_heard_while_a_follower_reads_the_open_session_still_ends_it() -> None:
    class Slow(MemoryStore):
        reading = anyio.Event()
        go_on = anyio.Event()

        async def get_session(self, session_id: str) -> SessionInfo:
            info = await super().get_session(session_id)
            self.reading.set()
            await self.go_on.wait()
            return info

    store = Slow()
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", [plain(0)])
    hub = Hub(store, 64, ping_interval=30)

    async def snapshot(info: SessionInfo) -> bytes:
        return b"{}"

    frames: list[bytes] = []

    async def follow() -> None:
        async with hub.subscribe("s", after=None, snapshot=snapshot, retry_ms=1000) as subscription:
            async for chunk in subscription:
                frames.append(chunk)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            await tasks.start(hub.run)
            tasks.start_soon(follow)
            await store.reading.wait()  # the follower saw the session open, and is not anchored yet
            await store.close_session("s", closed_at=1)
            hub.ended("s", 0)
            store.go_on.set()
            while not frames or b"event: end" not in frames[-1]:
                await anyio.sleep(0.01)
            hub.close()
    assert frames[-1] == b'event: end\ndata: {"code":"session_closed","headSeq":0}\n\n'

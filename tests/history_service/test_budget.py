"""`history_service.budget`: bytes in flight are bounded per process, and a read past the budget is refused."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from history_service.budget import ByteBudget
from history_service.errors import Overloaded
from history_service.service import HistoryService
from history_service.settings import Settings
from persistence import MemoryStore
from testing.hostile import make_wide_session, open_stalled_follow, rss
from testing.servers import ServerProcess
from testing.stores import backend_url

pytestmark = pytest.mark.anyio

JSON = {"Content-Type": "application/json"}


async def test_holds_that_fit_are_taken_at_once() -> None:
    budget = ByteBudget(100, wait=0.01, small=0)
    first, second = await budget.hold(60), await budget.hold(40)
    assert budget.held == 100
    first.resize(10)
    assert budget.held == 50
    first.release()
    first.release()
    second.release()
    assert budget.held == 0 and budget.drained == 100


async def test_a_hold_that_does_not_fit_waits_then_is_refused() -> None:
    budget = ByteBudget(100, wait=0.05, small=0)
    held = await budget.hold(80)
    with pytest.raises(Overloaded):
        await budget.hold(30)
    assert budget.held == 80
    held.release()
    assert budget.held == 0


async def test_waiting_holds_are_admitted_in_arrival_order_as_room_comes_back() -> None:
    budget = ByteBudget(100, wait=30, small=0)
    first = await budget.hold(90)
    admitted: list[str] = []

    async def take(name: str, size: int) -> None:
        hold = await budget.hold(size)
        admitted.append(name)
        await anyio.sleep(0)
        hold.release()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(take, "large", 80)
        await anyio.wait_all_tasks_blocked()
        tasks.start_soon(take, "small", 5)
        await anyio.wait_all_tasks_blocked()
        # The small one would fit now, but it does not overtake the large one that came first.
        assert admitted == []
        first.release()
    assert admitted == ["large", "small"] and budget.held == 0


async def test_an_idle_budget_admits_one_hold_larger_than_itself() -> None:
    budget = ByteBudget(100, wait=0.01, small=0)
    hold = await budget.hold(10_000)
    assert budget.held == 100
    hold.resize(5_000)
    assert budget.held == 5_000
    with pytest.raises(Overloaded):
        await budget.hold(1)
    hold.release()
    assert budget.held == 0


async def test_a_small_hold_is_taken_at_once_however_full_the_budget() -> None:
    budget = ByteBudget(100_000, wait=0.01, small=1000)
    large = await budget.hold(100_000)
    large.resize(150_000)
    assert (await budget.hold(0)).size == 0
    small = await budget.hold(1000)
    assert budget.held == 151_000
    with pytest.raises(Overloaded):
        await budget.hold(1001)
    small.release()
    large.release()
    assert budget.held == 0


async def test_followers_waiting_for_the_budget_cannot_pass_the_cap() -> None:
    settings = Settings(limit_concurrency=10, max_followers=2, inflight_bytes=1_000_000, inflight_wait=30)
    service = HistoryService(settings, MemoryStore())
    page = await service.reading.hold(1_000_000)
    admitted: list[object] = []
    refused: list[str] = []

    async def follow() -> None:
        try:
            admitted.append(await service.admit_follower("s", snapshot=True, max_messages=50))
        except Overloaded as exc:
            refused.append(str(exc))

    async with anyio.create_task_group() as tasks:
        for _ in range(5):
            tasks.start_soon(follow)
        await anyio.wait_all_tasks_blocked()
        # Two wait for room; the other three are refused at once, though nothing is open yet.
        assert (len(admitted), len(refused), service.followers) == (0, 3, 2)
        page.release()
    assert (len(admitted), service.followers) == (2, 2)


async def test_a_cancelled_waiter_leaves_nothing_held() -> None:
    budget = ByteBudget(100, wait=30, small=0)
    first = await budget.hold(100)
    with anyio.move_on_after(0.05):
        await budget.hold(50)
    first.release()
    assert budget.held == 0 and (await budget.hold(100)).size == 100


# Against a real server.


@pytest.fixture
def big_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the server's resident memory")
    server = ServerProcess(backend_url(request.param, tmp_path))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("big_server", ["sqlite", "jsonl"], indirect=True)
def test_hostile_pages_cost_memory_in_proportion_to_the_page(big_server: ServerProcess) -> None:
    """16 readers loop the widest page with ``maxBytes=1`` on a 20 MB session: memory stays flat, health answers.

    Before the byte target bounded the store read, each read held the whole session.
    """
    assert big_server.process is not None
    pid = big_server.process.pid
    with httpx.Client(base_url=big_server.url, timeout=60) as client:
        make_wide_session(client, "big", messages=200, texts=100, size=1000)
    before = rss(pid)
    peak, health, stop = [before], [], threading.Event()
    failures: list[str] = []

    def reader() -> None:
        with httpx.Client(base_url=big_server.url, timeout=60) as client:
            while not stop.is_set():
                page = client.get("/v1/sessions/big/page", params={"maxMessages": 1000, "maxBytes": 1})
                if page.status_code != 200 or page.json()["fromSeq"] != 199 * 101:
                    failures.append(f"{page.status_code} {page.text[:200]}")

    def watch() -> None:
        with httpx.Client(base_url=big_server.url, timeout=30) as client:
            while not stop.is_set():
                peak.append(rss(pid))
                health.append(client.get("/healthz").status_code)
                time.sleep(0.05)

    threads = [threading.Thread(target=reader) for _ in range(16)] + [threading.Thread(target=watch)]
    for thread in threads:
        thread.start()
    # A count of pages, not a time: the load runs until every reader has made a few.
    with httpx.Client(base_url=big_server.url, timeout=60) as client:
        for _ in range(40):
            assert client.get("/v1/sessions/big/page", params={"maxMessages": 1000, "maxBytes": 1}).status_code == 200
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not failures, failures[:3]
    assert health and set(health) == {200}
    # The session is 20 MB; 16 reads of all of it at once would pass 300 MB.
    assert max(peak) - before <= 60 * 1024 * 1024, (before, max(peak))


def test_stalled_followers_hold_no_more_than_the_budget(tmp_path: Path) -> None:
    """30 followers of a 20 MB session that never read: memory stays near the budget, and health answers."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read the server's resident memory")
    # Stalled followers never give their bytes back, so a refused one would wait out any wait: keep it short.
    server = ServerProcess(f"sqlite:///{tmp_path / 'h.db'}", env={"HISTORY_INFLIGHT_WAIT": "0.1"})
    server.start()
    try:
        assert server.process is not None
        with httpx.Client(base_url=server.url, timeout=60) as client:
            make_wide_session(client, "big", messages=200, texts=100, size=1000)
            assert client.post("/v1/sessions", json={"id": "small", "createdAt": 1}).status_code == 201
            small_before = open_stalled_follow(server.port, "/v1/sessions/small/follow")
            # Pages of the big session before its followers: their size must not stand for a snapshot's.
            assert client.get("/v1/sessions/big/page", params={"maxMessages": 1000, "maxBytes": 1}).status_code == 200
            before = rss(server.process.pid)
            opened = [open_stalled_follow(server.port, "/v1/sessions/big/follow?maxMessages=1000") for _ in range(30)]
            statuses = [status for _, status, _ in opened]
            refused = [json.loads(body)["error"]["code"] for _, status, body in opened if status == 503]
            grown = rss(server.process.pid) - before
            assert client.get("/healthz").status_code == 200
            assert client.get("/metrics").status_code == 200
            # Readers of other sessions are not locked out: pages are read apart from bodies waiting to be sent,
            # and a small body always finds room. A follow whose last snapshot was small holds what it held.
            assert client.get("/v1/sessions/small/page").status_code == 200
            assert small_before[1] == 200
            small_before[0].close()
            small = open_stalled_follow(server.port, "/v1/sessions/small/follow")
            assert small[1] == 200
            for sock, _, _ in [*opened, small]:
                sock.close()
            # Once the stalled readers are gone, their bytes come back: a new follow of the big session opens.
            for _ in range(200):
                sock, status, _ = open_stalled_follow(server.port, "/v1/sessions/big/follow")
                sock.close()
                if status == 200:
                    break
                time.sleep(0.05)
        # Each stalled snapshot is the 16 MiB byte target; 30 of them would hold 480 MiB.
        assert statuses.count(200) >= 1 and refused and set(refused) == {"overloaded"}, statuses
        assert grown <= 100 * 1024 * 1024, grown
        assert status == 200
    finally:
        server.stop()

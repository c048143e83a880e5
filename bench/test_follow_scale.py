"""Follow across two service processes on one PostgreSQL: a load cell, the same cell in one process, and capacity.

* Load: 100 followers split across processes A and B while a producer appends through A
  in pipelined batches of 10, at 500 and 2,000 events/s. The followers on B hear of every
  append only through PostgreSQL's head notices. The same cell with every follower on A
  runs beside it, for comparison.
* Capacity: 10,000 idle followers over 100 sessions, split across A and B. It reports each
  process's memory per follower, the p99 of page requests meanwhile, and the delivery
  p99 of a 500 events/s producer on 10 of those sessions.

Prints ``HISTORY_FOLLOW_SCALE_RESULT {json}``. It needs PostgreSQL (``scripts/with-postgres
make bench``). ``HISTORY_BENCH_SMOKE=1`` runs it small. Asserts structure (nothing lost or
duplicated, every idle stream still open), never time.
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bench.follow_load import IdleFollowers, run_load
from bench.machine import emit, machine
from codec import SessionHeader
from history_service.scenarios import multi_turn
from persistence import open_store
from testing.postgres import PG_URL, empty_postgres
from testing.servers import ServerProcess

pytestmark = pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set; run under scripts/with-postgres")

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
FOLLOWERS = 10 if SMOKE else 100
RATES = [500] if SMOKE else [500, 2000]
SECONDS = 1.0 if SMOKE else float(os.environ.get("HISTORY_BENCH_FOLLOW_SECONDS", "5"))
IDLE = 200 if SMOKE else 10_000
IDLE_SESSIONS = 10 if SMOKE else 100
ACTIVE_SESSIONS = 2 if SMOKE else 10
PAGE_REQUESTS = 50 if SMOKE else 300


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def limits() -> dict[str, int]:
    """Raise this process's open-file limit to its hard limit; the service processes inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return {"nofileBefore": soft, "nofileAfter": hard}


@pytest.fixture(scope="module")
def processes(limits: dict[str, int]) -> Iterator[list[ServerProcess]]:
    assert PG_URL

    async def prepare() -> None:
        await empty_postgres(PG_URL)
        store = await open_store(PG_URL)
        for name in [f"load-{n}" for n in range(1)] + [f"cap-{n}" for n in range(IDLE_SESSIONS)] + ["page"]:
            await store.create_session(SessionHeader(id=name, createdAt=0))
        await store.append("page", multi_turn(seed=3, turns=3))
        await store.close()

    anyio.run(prepare)
    env = {"HISTORY_LIMIT_CONCURRENCY": str(4 * IDLE), "HISTORY_PING_INTERVAL": "15"}
    started = [ServerProcess(PG_URL, env=env), ServerProcess(PG_URL, env=env)]
    for server in started:
        server.start()
    yield started
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def collected(limits: dict[str, int]) -> Iterator[dict[str, Any]]:
    result: dict[str, Any] = {"cells": []}
    yield result
    emit("FOLLOW_SCALE", {"machine": machine(smoke=SMOKE, seconds=SECONDS, **limits), **result})


NEXT_SEQ: dict[str, int] = {}


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("placement", ["two-processes", "in-process"])
def test_follow_load_across_processes(
    processes: list[ServerProcess], collected: dict[str, Any], placement: str, rate: int
) -> None:
    a, b = processes
    urls = [a.url, b.url] if placement == "two-processes" else [a.url]
    sessions = {"load-0": NEXT_SEQ.get("load-0", 0)}
    print(f"[follow-scale] {placement}, {FOLLOWERS} followers, {rate} ev/s", file=sys.stderr, flush=True)
    gc.disable()  # as below: the load generator must not be the bound
    try:
        outcome = asyncio.run(
            run_load(a.url, followers=FOLLOWERS, rate=rate, seconds=SECONDS, sessions=sessions, follower_urls=urls)
        )
    finally:
        gc.enable()
    NEXT_SEQ.update(sessions)
    assert outcome["lost"] == 0 and outcome["duplicated"] == 0 and outcome["undeliveredAtTimeout"] == 0
    assert outcome["deliveries"] == outcome["expectedDeliveries"]
    collected["cells"].append({"placement": placement, **outcome})


async def page_latencies(url: str, count: int) -> list[float]:
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for _ in range(count):
            started = time.perf_counter()
            response = await client.get("/v1/sessions/page/page", params={"maxMessages": 5})
            out.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
    return sorted(out)


def test_capacity_of_idle_followers(processes: list[ServerProcess], collected: dict[str, Any]) -> None:
    a, b = processes
    urls = [a.url, b.url]
    sessions = {f"cap-{n}": 0 for n in range(IDLE_SESSIONS)}
    print(f"[follow-scale] capacity: {IDLE} idle followers", file=sys.stderr, flush=True)

    async def run() -> dict[str, Any]:
        assert a.process is not None and b.process is not None
        before = [rss(a.process.pid), rss(b.process.pid)]
        idle = IdleFollowers(urls, sessions, IDLE)
        await idle.open()
        await asyncio.sleep(1)
        after = [rss(a.process.pid), rss(b.process.pid)]
        pages = await page_latencies(a.url, PAGE_REQUESTS // 2) + await page_latencies(b.url, PAGE_REQUESTS // 2)
        pages.sort()
        active = {f"cap-{n}": 0 for n in range(ACTIVE_SESSIONS)}
        load = await run_load(
            a.url, followers=2 * ACTIVE_SESSIONS * 5, rate=500, seconds=SECONDS, sessions=active, follower_urls=urls
        )
        still_open = await idle.close()
        per_process = IDLE // 2
        return {
            "idleFollowers": IDLE,
            "sessions": IDLE_SESSIONS,
            "rssBeforeMb": [round(value / 2**20, 1) for value in before],
            "rssAfterMb": [round(value / 2**20, 1) for value in after],
            "bytesPerFollower": [round((x - y) / per_process) for x, y in zip(after, before, strict=True)],
            "pageP50Ms": round(statistics.median(pages), 2),
            "pageP99Ms": round(pages[int(len(pages) * 0.99)], 2),
            "stillOpen": still_open,
            "activeLoad": load,
        }

    # The load generator must not be the bound: 10,000 streams' objects make its own collector pause.
    gc.disable()
    try:
        outcome = asyncio.run(run())
    finally:
        gc.enable()
    assert outcome["stillOpen"] == IDLE
    load = outcome["activeLoad"]
    assert load["lost"] == 0 and load["duplicated"] == 0 and load["deliveries"] == load["expectedDeliveries"]
    collected["capacity"] = outcome

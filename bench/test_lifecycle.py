"""Lifecycle benchmarks (docs/protocol.md §6.4): space after deletes, and a large delete beside live appends.

Prints ``HISTORY_LIFECYCLE_RESULT {json}``:

* ``space``: a SQLite file of 10,000 small sessions, its size once 90% of them are deleted,
  and after ``vacuum``;
* ``big_delete``: per store, ``HISTORY_BENCH_LIFECYCLE_REPEATS`` (default 3) runs, each the
  time to delete one session of about 100 MB of event lines (random text, so compression
  does not shrink it away), and the latency of 1-event appends to 50 other sessions, one
  writer each, while it runs and for 2 s without it; and the median of the runs' p99 ratios;
* ``sweep``: per store, the service's sweep (§6.5) of 100,000 expired small sessions (JSONL 2,000), its rate,
  and the same appends' latency from the sweep's start to its end, and for 10 s without it.

``HISTORY_BENCH_SMOKE=1`` runs it small. Asserts structure only, never time.
"""

from __future__ import annotations

import os
import random
import statistics
import string
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest

from bench.machine import emit, machine
from bench.stores import BACKENDS, reset, url_for
from codec import Event, SessionHeader
from history_service.service import HistoryService
from history_service.settings import Settings
from persistence import HistoryStore, SessionNotFoundError, open_store

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
SESSIONS = 200 if SMOKE else 10_000
EXPIRED = 2_000 if SMOKE else 100_000
BIG_BYTES = (2 if SMOKE else 100) << 20
REPEATS = 1 if SMOKE else int(os.environ.get("HISTORY_BENCH_LIFECYCLE_REPEATS", "3"))
WRITERS = 50


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, Any]]:
    collected: dict[str, Any] = {}
    yield collected
    collected["machine"] = machine(smoke=SMOKE)
    emit("LIFECYCLE", collected)


def small(seq_count: int, rand: random.Random) -> list[Event]:
    return [
        Event("note", seq, seq, {"text": "".join(rand.choices(string.ascii_letters, k=60))}) for seq in range(seq_count)
    ]


async def space(path: Path) -> dict[str, Any]:
    url = f"sqlite:///{path}"
    store = await open_store(url, create=True)
    rand = random.Random(1)
    for k in range(SESSIONS):
        await store.create_session(SessionHeader(id=f"s{k}", createdAt=k))
        await store.append(f"s{k}", small(20, rand))
    before = await store.size()
    for k in range(SESSIONS):
        if k % 10:
            await store.delete_session(f"s{k}")
    deleted = await store.size()
    await store.vacuum()
    after = await store.size()
    kept = [await store.head_seq(f"s{k}") for k in range(0, SESSIONS, 10)]
    await store.close()
    assert before and after and all(head == 19 for head in kept)
    return {
        "sessions": SESSIONS,
        "before": before,
        "after_delete": deleted,
        "after_vacuum": after,
        "ratio": after / before,
    }


def test_sqlite_space_after_deleting_90_percent_then_vacuum(tmp_path: Path, results: dict[str, Any]) -> None:
    results["space"] = anyio.run(space, tmp_path / "space.db")


def big_events(rand: random.Random) -> list[list[Event]]:
    """About ``BIG_BYTES`` of event lines in batches of 100, each event about 8 KiB of random text."""
    line = 8 << 10
    count = BIG_BYTES // line
    # Hex of random bytes: no line repeats another, so no store's compression takes it below its size by much.
    events = [Event("note", seq, seq, {"t": rand.randbytes(line // 2).hex()}) for seq in range(count)]
    return [events[i : i + 100] for i in range(0, count, 100)]


async def appends_for(
    store: HistoryStore, seconds: float, heads: dict[str, int], until: anyio.Event | None = None
) -> list[tuple[float, float]]:
    """1-event appends to each of the writers' sessions, back to back, for ``seconds`` and until ``until`` is set.

    Each is (start, latency in ms).
    """
    latencies: list[tuple[float, float]] = []
    deadline = time.perf_counter() + seconds

    async def writer(session_id: str) -> None:
        while time.perf_counter() < deadline or (until is not None and not until.is_set()):
            heads[session_id] += 1
            started = time.perf_counter()
            await store.append(session_id, [Event("note", heads[session_id], 0, {"w": session_id})])
            latencies.append((started, (time.perf_counter() - started) * 1000))

    async with anyio.create_task_group() as tasks:
        for session_id in heads:
            tasks.start_soon(writer, session_id)
    return latencies


async def beside(
    store: HistoryStore, heads: dict[str, int], window: float, work: Callable[[], Awaitable[object]]
) -> tuple[list[float], list[float], float]:
    """Appends alone for ``window`` seconds, then again with ``work`` running from their start until it ends.

    The latencies alone, those of the appends that ran while ``work`` did (appends after it
    would dilute them), and how long ``work`` took. The appends beside it last at least
    ``window``, so a short piece of work is seen whole, and a long one (a sweep) from end to end.
    """
    took: dict[str, float] = {}
    done = anyio.Event()

    async def timed() -> None:
        took["start"] = time.perf_counter()
        try:
            await work()
        finally:
            took["end"] = time.perf_counter()
            done.set()

    assert await appends_for(store, 0.5, heads)  # warm
    alone = await appends_for(store, window, heads)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(timed)
        during = await appends_for(store, window, heads, until=done)
    overlapping = [ms for started, ms in during if started < took["end"] and started + ms / 1000 > took["start"]]
    return [ms for _, ms in alone], overlapping, took["end"] - took["start"]


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 100 else max(values)


async def big_delete(url: str) -> dict[str, Any]:
    """`REPEATS` deletes of a ~100 MB session beside the same 50 writers, each measured on its own."""
    await reset(url)
    store = await open_store(url, create=True)
    try:
        heads = {f"w{k}": -1 for k in range(WRITERS)}
        for session_id in heads:
            await store.create_session(SessionHeader(id=session_id, createdAt=1))
        runs = [await one_big_delete(store, heads, random.Random(2 + run)) for run in range(REPEATS)]
    finally:
        await store.close()
    ratios = [run["p99_ratio"] for run in runs if run["p99_ratio"] is not None]
    return {"runs": runs, "p99_ratio_median": statistics.median(ratios) if ratios else None}


async def one_big_delete(store: HistoryStore, heads: dict[str, int], rand: random.Random) -> dict[str, Any]:
    await store.create_session(SessionHeader(id="big", createdAt=0))
    for batch in big_events(rand):
        await store.append("big", batch)
    size = await store.size()
    apart, overlapping, seconds = await beside(store, heads, 2.0, lambda: store.delete_session("big"))
    try:
        await store.get_session("big")
        raise AssertionError("the big session is still there")
    except SessionNotFoundError:
        pass
    assert apart
    during_p99 = p99(overlapping) if overlapping else None  # None: over before any append began beside it
    return {
        "store_bytes_before": size,
        "delete_seconds": seconds,
        "appends_alone": len(apart),
        "appends_during_delete": len(overlapping),
        "p99_ms_alone": p99(apart),
        "p99_ms_during": during_p99,
        "p99_ratio": None if during_p99 is None else during_p99 / p99(apart),
        "median_ms_alone": statistics.median(apart),
        "median_ms_during": statistics.median(overlapping) if overlapping else None,
    }


@pytest.mark.parametrize("backend", ["memory", *BACKENDS])
def test_deleting_a_100_mb_session_beside_live_appends(tmp_path: Path, backend: str, results: dict[str, Any]) -> None:
    url = "memory://" if backend == "memory" else url_for(backend, tmp_path)
    results.setdefault("big_delete", {})[backend] = anyio.run(big_delete, url)


async def sweep(url: str, count: int) -> dict[str, Any]:
    await reset(url)
    store = await open_store(url, create=True)
    try:
        rand = random.Random(3)

        async def create(first: int) -> None:
            for k in range(first, min(first + 1000, count)):
                await store.create_session(SessionHeader(id=f"x{k}", createdAt=k, expiresAt=1))
                await store.append(f"x{k}", small(3, rand))

        # Created in parallel, so that group commit shares their fsyncs.
        async with anyio.create_task_group() as tasks:
            for first in range(0, count, 1000):
                tasks.start_soon(create, first)
        heads = {f"w{k}": -1 for k in range(WRITERS)}
        for session_id in heads:
            await store.create_session(SessionHeader(id=session_id, createdAt=1))
        service = HistoryService(Settings(sweep_interval=0), store)
        swept: list[int] = []

        async def sweeping() -> None:
            done = await service.sweep()
            swept.append(0 if done is None else len(done.deleted))

        apart, overlapping, seconds = await beside(store, heads, 1.0 if SMOKE else 10.0, sweeping)
        assert apart and overlapping and swept == [count]
        assert await store.expired(now=2, retention_ms=None, limit=None) == []
        return {
            "sessions": count,
            "sweep_seconds": seconds,
            "sessions_per_second": count / seconds,
            "appends_alone": len(apart),
            "appends_during_sweep": len(overlapping),
            "p99_ms_alone": p99(apart),
            "p99_ms_during": p99(overlapping),
            "p99_ratio": p99(overlapping) / p99(apart),
            "median_ms_alone": statistics.median(apart),
            "median_ms_during": statistics.median(overlapping),
        }
    finally:
        await store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_sweeping_expired_sessions_beside_live_appends(tmp_path: Path, backend: str, results: dict[str, Any]) -> None:
    # JSONL finds each tree by a scan of its root (§6.5): its sweep costs the square of its sessions.
    count = EXPIRED // 50 if backend.startswith("jsonl") else EXPIRED
    results.setdefault("sweep", {})[backend] = anyio.run(sweep, url_for(backend, tmp_path), count)

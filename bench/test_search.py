"""Search across sessions (docs/protocol.md §14): what the index costs an append, how big it is, how fast it answers.

On SQLite, and on PostgreSQL when ``HISTORY_TEST_PG_URL`` is set (``scripts/with-postgres``;
without it the line says why), with the sessions of `bench.search`:

* Appends: a store with the index and one opened without it (``SqlStore.open(url,
  indexed=False)``), each with its own sessions streaming the same talk, one event per
  durable append (a user message, text and reasoning deltas of 1 to 7 characters, tool
  calls and results). Windows of ``HISTORY_BENCH_SEARCH_SECONDS`` (default 3) alternate
  between the two, in an order that swaps every round (indexed, plain, plain, indexed, ...),
  ``HISTORY_BENCH_SEARCH_ROUNDS`` rounds (default 6), with 1 and with 50 streams at once
  (``HISTORY_BENCH_SEARCH_STREAMS``), after a warm-up window each. The appends go to the
  store itself, not through HTTP, so that the index's share is not diluted by the service's
  own cost per request. Reported: each window's appends a second, their medians, and the
  median of the rounds' indexed / unindexed ratios (goal ≥ 0.90).
* Size: ``HISTORY_BENCH_SEARCH_SESSIONS`` sessions (default 1,000; about 2,400 events each),
  written in batches of 512, then the bytes of the index (``search_passages`` with its
  indexes, and on SQLite the ``search_fts`` shadow tables, by ``dbstat``; on PostgreSQL
  after ``VACUUM ANALYZE``, the GIN index included) over those of ``history_records`` with
  its indexes.
* Queries: on that store, a mix of common words, rare words (a ticket one session names),
  phrases, prefixes, two words, Chinese and Japanese words and words found nowhere, each
  ``HISTORY_BENCH_SEARCH_QUERY_ROUNDS`` times (default 20) after an untimed round, through
  `HistoryStore.search` and through ``GET /v1/search`` on the service in a thread: p50, p99
  and max, over all and by kind (goal on SQLite: p50 ≤ 20 ms, p99 ≤ 100 ms).

Prints ``HISTORY_SEARCH_RESULT {json}``; ``HISTORY_BENCH_SMOKE=1`` runs it tiny. Asserts
structure (every append landed where it should, each kind of query found what it must and
no more, the store and the service gave the same hits), never time or size.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from bench.machine import emit, machine
from bench.search import (
    LIMIT,
    Hits,
    Streams,
    Talk,
    codename,
    file_sizes,
    latency,
    load,
    passages,
    postgres_sizes,
    queries,
    rare_sessions,
    refuses_search,
    session_id,
    sqlite_sizes,
    timed_http_queries,
    timed_queries,
)
from bench.throughput import run
from history_service.settings import Settings
from persistence import MemoryStore, SqlStore
from persistence.search import KINDS, of_events
from testing.postgres import PG_URL, drop_database, new_database
from testing.servers import serve_in_thread

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"


def size(name: str, full: str, smoke: str) -> str:
    """``HISTORY_BENCH_SEARCH_<name>``, else ``full``; ``smoke`` in smoke mode, whatever is set."""
    return smoke if SMOKE else os.environ.get(f"HISTORY_BENCH_SEARCH_{name}", full)


SESSIONS = int(size("SESSIONS", "1000", "12"))
ROUNDS = int(size("ROUNDS", "6", "2"))
SECONDS = float(size("SECONDS", "3", "0.2"))
WARMUP = 0.1 if SMOKE else 1.0
STREAMS = [int(n) for n in size("STREAMS", "1,50", "1,4").split(",")]
QUERY_ROUNDS = int(size("QUERY_ROUNDS", "20", "1"))
QUERIES = queries(SESSIONS)
GOALS: Final = {"appendIndexedOverPlain": 0.9, "queryP50Ms": 20.0, "queryP99Ms": 100.0}
PG_MISSING = None if PG_URL else "HISTORY_TEST_PG_URL is not set; run under scripts/with-postgres"


def progress(stage: str) -> None:
    print(f"[search] {time.strftime('%H:%M:%S')} {stage}", file=sys.stderr, flush=True)


def problems(mix: Sequence[tuple[str, str]], found: Sequence[Hits], sessions: int) -> list[str]:
    """What the hits of a query mix over ``sessions`` got wrong: no hit where one must be, any where none may, a
    rare word found outside the session that says it."""
    rare = {codename(n): session_id(n) for n in rare_sessions(sessions)}
    wrong = []
    for (kind, q), hits in zip(mix, found, strict=True):
        if kind == "none" and hits:
            wrong.append(f"{q!r} found {hits[:3]}")
        elif kind != "none" and not hits:
            wrong.append(f"{q!r} found nothing")
        elif kind == "rare" and {session for session, _ in hits} != {rare[q]}:
            wrong.append(f"{q!r} found {hits[:3]}, not only {rare[q]}")
    return wrong


async def appends(indexed_url: str, plain_url: str) -> dict[str, Any]:
    """Windows of 1-event appends, alternating between a store with the index and one without."""
    stores = {"indexed": await SqlStore.open(indexed_url), "plain": await SqlStore.open(plain_url, indexed=False)}
    cells: dict[str, Any] = {}
    try:
        for count in STREAMS:
            streams = {side: Streams(store, f"s{count}", count) for side, store in stores.items()}
            for stream in streams.values():
                await stream.create()
                await stream.window(WARMUP)
            rates: dict[str, list[int]] = {"indexed": [], "plain": []}
            for round_ in range(ROUNDS):
                for side in ("indexed", "plain") if round_ % 2 == 0 else ("plain", "indexed"):
                    rates[side].append(round(await streams[side].window(SECONDS)))
                progress(f"  {count} streams, round {round_ + 1}: {rates['indexed'][-1]} vs {rates['plain'][-1]}/s")
            indexed, plain = rates["indexed"], rates["plain"]
            cells[str(count)] = {
                "streams": count,
                "indexedPerSec": indexed,
                "plainPerSec": plain,
                "indexedMedian": statistics.median(indexed),
                "plainMedian": statistics.median(plain),
                "indexedOverPlain": round(statistics.median(i / p for i, p in zip(indexed, plain, strict=True)), 3),
                "ratioOfMedians": round(statistics.median(indexed) / statistics.median(plain), 3),
                "appended": {side: sum(h + 1 for h in s.heads) for side, s in streams.items()},
                "wrong": {side: s.wrong for side, s in streams.items()},
                "headsStored": all([await s.stored_heads() == s.heads for s in streams.values()]),
            }
        # The first stream's ticket, said in its first message: found in the indexed store, in that stream alone.
        found = await timed_queries(stores["indexed"], [("rare", codename(1_000_000))], 1)
        sessions = {session for session, _ in found[1][0]}
        return {
            "cells": cells,
            "streamedFound": sessions == {f"s{count}-0" for count in STREAMS},
            "plainRefused": await refuses_search(stores["plain"]),
        }
    finally:
        for store in stores.values():
            await store.close()


async def corpus(url: str, *, indexed: bool = True) -> dict[str, Any]:
    store = await SqlStore.open(url, indexed=indexed)
    try:
        return await load(store, SESSIONS)
    finally:
        await store.close()


async def store_queries(url: str) -> tuple[Any, list[Hits]]:
    store = await SqlStore.open(url)
    try:
        return await timed_queries(store, QUERIES, QUERY_ROUNDS)
    finally:
        await store.close()


def measure(backend: str, urls: dict[str, str], files: dict[str, Path] | None = None) -> dict[str, Any]:
    """Every figure of one backend, on the databases of ``urls`` (``indexed``, ``plain``, ``corpus``,
    ``corpusPlain``); ``files``, SQLite's, by the same names."""
    progress(f"{backend}: appends, {STREAMS} streams, {ROUNDS} rounds of {SECONDS} s per side")
    appended = run(appends(urls["indexed"], urls["plain"]))
    progress(f"{backend}: loading {SESSIONS} sessions")
    loaded = asyncio.run(corpus(urls["corpus"]))
    progress(f"{backend}: {loaded['events']} events in {loaded['seconds']} s; sizes")
    if files is None:
        sizes = postgres_sizes(urls["corpus"])
    else:
        found = sqlite_sizes(files["corpus"])
        if found is None:
            progress(f"{backend}: no dbstat; the same sessions again, without the index")
            asyncio.run(corpus(urls["corpusPlain"], indexed=False))
            found = file_sizes(files["corpus"], files["corpusPlain"])
        sizes = found
    sizes["indexOverHistory"] = round(sizes["indexBytes"] / sizes["historyBytes"], 3)
    sizes["indexBytesPerHistoryMb"] = round(sizes["indexBytes"] / (sizes["historyBytes"] / 1e6))
    progress(f"{backend}: {len(QUERIES)} queries x {QUERY_ROUNDS} through the store")
    through_store, store_hits = run(store_queries(urls["corpus"]))
    progress(f"{backend}: the same through GET /v1/search")
    with serve_in_thread(Settings(store_url=urls["corpus"], auth="none")) as server:
        port = urlsplit(server.url).port
        assert port is not None
        through_http, http_hits = run(timed_http_queries(port, QUERIES, QUERY_ROUNDS))
    return {
        "appends": appended,
        "corpus": {**loaded, **passages(urls["corpus"])},
        "size": sizes,
        "queries": {"store": through_store, "http": through_http},
        "wrongHits": problems(QUERIES, store_hits, SESSIONS),
        "hitsAgree": store_hits == http_hits,
    }


def test_talks_say_the_same_every_time_and_hold_every_kind_of_passage() -> None:
    talk = Talk(3).session()
    assert talk == Talk(3).session() and talk != Talk(4).session()
    assert [event.seq for event in talk] == list(range(len(talk)))
    found = of_events([talk])
    assert {p.kind for p in found} >= set(KINDS) - {"title"}
    text = " ".join(p.text for p in found)
    assert codename(3) in text
    assert any(word in text for word in ("会话历史", "数据库", "エージェント"))  # session 3 talks Chinese and Japanese
    streamed = list(itertools.islice(Talk(3).events(), 3 * len(talk)))  # past the turns of the session
    assert [event.seq for event in streamed] == list(range(len(streamed)))


def test_the_query_mix_finds_what_it_must_in_a_memory_store() -> None:
    # The memory store scans every passage per query: a few sessions, and one query of each kind.
    mix = list({kind: (kind, q) for kind, q in queries(5)}.values())

    async def main() -> tuple[Any, list[Hits]]:
        store = MemoryStore()
        await load(store, 5)
        return await timed_queries(store, mix, 1)

    summary, hits = asyncio.run(main())
    assert problems(mix, hits, 5) == []
    assert set(summary["byKind"]) == {kind for kind, _ in mix} and summary["samples"] == len(mix)
    assert all(len(h) <= LIMIT for h in hits)


def test_sizes_by_dbstat_and_by_file_size(tmp_path: Path) -> None:
    async def main() -> None:
        for name, indexed in (("indexed", True), ("plain", False)):
            store = await SqlStore.open(f"sqlite:///{tmp_path / name}.db", indexed=indexed)
            await load(store, 3)
            await store.close()

    asyncio.run(main())
    sizes = sqlite_sizes(tmp_path / "indexed.db")
    assert sizes is not None and sizes["indexBytes"] > 0 and sizes["historyBytes"] > 0
    assert {"search_passages", "search_fts_data", "history_records"} <= set(sizes["objects"])
    plain = sqlite_sizes(tmp_path / "plain.db")
    assert plain is not None and plain["indexBytes"] < sizes["indexBytes"]
    by_file = file_sizes(tmp_path / "indexed.db", tmp_path / "plain.db")
    assert by_file["indexBytes"] > 0 and by_file["historyBytes"] > 0


def test_latency_is_nearest_rank() -> None:
    assert latency([float(n) for n in range(1, 101)]) == {"samples": 100, "p50Ms": 50.5, "p99Ms": 99.0, "maxMs": 100.0}
    assert latency([3.0]) == {"samples": 1, "p50Ms": 3.0, "p99Ms": 3.0, "maxMs": 3.0}


def test_search_costs(tmp_path: Path) -> None:
    started, load_average = time.monotonic(), os.getloadavg()[0]
    files = {name: tmp_path / f"{name}.db" for name in ("indexed", "plain", "corpus", "corpusPlain")}
    stores: dict[str, Any] = {"sqlite": measure("sqlite", {n: f"sqlite:///{f}" for n, f in files.items()}, files)}
    stores["postgresql"] = None
    if PG_URL:
        # No unindexed copy of the corpus: PostgreSQL measures its relations itself.
        urls = {name: new_database(f"search_{name}") for name in ("indexed", "plain", "corpus")}
        try:
            stores["postgresql"] = measure("postgresql", urls)
        finally:
            for url in urls.values():
                drop_database(url)
    result = {
        "machine": machine(
            smoke=SMOKE,
            sessions=SESSIONS,
            rounds=ROUNDS,
            seconds=SECONDS,
            warmupSeconds=WARMUP,
            streams=STREAMS,
            queryRounds=QUERY_ROUNDS,
            limit=LIMIT,
            elapsedSeconds=round(time.monotonic() - started),
            # The machine's load average over the minute before the run and before its end: other work shows here.
            loadAverage=[round(load_average, 2), round(os.getloadavg()[0], 2)],
        ),
        "goals": GOALS,
        "queries": QUERIES,
        "stores": stores,
        "postgresqlMissing": PG_MISSING,
    }
    emit("SEARCH", result)
    for backend, cells in stores.items():
        if cells is None:
            continue
        appended = cells["appends"]
        assert appended["streamedFound"] and appended["plainRefused"], (backend, appended)
        for count, cell in appended["cells"].items():
            assert cell["wrong"] == {"indexed": 0, "plain": 0} and cell["headsStored"], (backend, count, cell)
            assert min(cell["appended"].values()) > 0, (backend, count, cell)
        assert cells["corpus"]["sessions"] == SESSIONS and cells["corpus"]["passages"] > 0, (backend, cells["corpus"])
        assert cells["size"]["indexBytes"] > 0 and cells["size"]["historyBytes"] > 0, (backend, cells["size"])
        assert cells["wrongHits"] == [] and cells["hitsAgree"], (backend, cells["wrongHits"])
        for path in ("store", "http"):
            assert cells["queries"][path]["samples"] == len(QUERIES) * QUERY_ROUNDS, (backend, path)

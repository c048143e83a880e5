"""The page path (docs/protocol.md §4, §7.4): cold tail pages, the service, the raw path and appends.

Prints ``HISTORY_PAGE_PATH_PERF_RESULT {json}`` for the ``realistic`` fixture:

* ``appends``: per backend, the whole fixture in 512-event batches (sealing included), then
  its first events again in 1-event batches into another session, as a token-by-token
  producer writes; beside them the median ``write`` + ``fsync`` of 100 bytes on the same
  disk, the floor of one durable commit.
* ``cold``: the tail page (50 messages) from a new store instance in fresh host processes
  (`bench.cold_page` ``packed``, the service's own `PageReader`), per backend, and the
  raw-events SQLite host beside it; ``heap`` is the traced peak of that read over the page.
* ``service``: the same page through a real server process on the SQLite store:
  ``Server-Timing`` for identity, end to end for zstd (the body as sent, not decoded), and
  ``?expand=raw`` against `bench.cold_page` ``raw`` on the same store, sampled alternately.

``HISTORY_BENCH_SMOKE=1`` scales the fixture down 100× and takes one sample of each.
Asserts structure only: every body is the one we expect, never a time.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bench.cold_page import fill_raw_events, in_host
from bench.fixtures import realistic, tail_cut
from bench.machine import emit, machine
from bench.stores import BACKENDS, reset, url_for
from codec import Event, Page, PageRecord, SessionHeader, encode, pack_page
from history_service.encoding import decompress
from persistence import open_store
from testing.servers import ServerProcess

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
SCALE = 100 if SMOKE else 1
ROUNDS = 1 if SMOKE else 7
SERVICE_ROUNDS = 1 if SMOKE else 9
SINGLES = 100 if SMOKE else 2000
BATCH = 512
MAX_MESSAGES = 50
EVERYTHING = 1 << 50


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, Any]]:
    collected: dict[str, Any] = {}
    yield collected
    collected["machine"] = machine(smoke=SMOKE)
    emit("PAGE_PATH_PERF", collected)


def progress(stage: str) -> None:
    print(f"[page path] {stage}", file=sys.stderr, flush=True)


def median(samples: list[float]) -> float:
    return round(statistics.median(samples), 2)


async def fill(url: str, events: list[Event]) -> dict[str, Any]:
    """Append the fixture in 512-event batches, then its first events one by one into another session."""
    await reset(url)
    store = await open_store(url, create=True)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.create_session(SessionHeader(id="singles", createdAt=0))
    start = time.perf_counter()
    for i in range(0, len(events), BATCH):
        await store.append("s", events[i : i + BATCH])
    batched = time.perf_counter() - start
    start = time.perf_counter()
    for event in events[:SINGLES]:
        await store.append("singles", [event])
    singles = time.perf_counter() - start
    await store.close()
    return {
        "batchEventsPerSec": round(len(events) / batched),
        "singleEventsPerSec": round(SINGLES / singles),
        "singleAppendMs": round(1000 * singles / SINGLES, 3),
    }


def fsync_ms(root: Path) -> float:
    """The median time of a 100-byte write plus fsync: what one durable commit costs at least."""
    samples = []
    with open(root / "fsync-probe", "ab") as out:
        for _ in range(20 if SMOKE else 200):
            start = time.perf_counter()
            out.write(b"x" * 100)
            out.flush()
            os.fsync(out.fileno())
            samples.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(samples), 3)


def served(client: httpx.Client, path: str, coding: str, expected: bytes) -> tuple[float, float, int]:
    """One GET: end-to-end ms, the server's ``Server-Timing`` ms, and the bytes sent."""
    start = time.perf_counter()
    with client.stream("GET", path, headers={"Accept-Encoding": coding}) as response:
        body = b"".join(response.iter_raw())
    elapsed = (time.perf_counter() - start) * 1000
    assert response.status_code == 200, body[:200]
    assert response.headers.get("content-encoding", "identity") == coding
    assert (body if coding == "identity" else decompress(body, coding)) == expected
    return elapsed, float(response.headers["server-timing"].split("dur=")[1]), len(body)


def test_page_path(results: dict[str, Any], tmp_path: Path) -> None:
    events = realistic(scale=SCALE)
    cut = tail_cut(events, MAX_MESSAGES)
    tail = events[cut:]
    packed = encode(Page(pack_page(tail), cut > 0, cut, len(events)))
    raw = encode(Page([PageRecord(event=event) for event in tail], cut > 0, cut, len(events)))
    results["page"] = {
        "events": len(tail),
        "packedBytes": len(packed),
        "rawBytes": len(raw),
        "records": packed.count(b'{"chunks":') + packed.count(b'{"event":'),
    }

    appends: dict[str, Any] = {}
    cold: dict[str, Any] = {}
    urls: dict[str, str] = {}
    for backend in BACKENDS:
        root = tmp_path / backend
        root.mkdir()
        urls[backend] = url = url_for(backend, root)
        progress(f"{backend}: appends")
        appends[backend] = anyio.run(fill, url, events)
        appends[backend]["fsyncMs"] = fsync_ms(root)
        progress(f"{backend}: cold tail pages and heap")
        samples = in_host(url, "packed", str(MAX_MESSAGES), packed, ROUNDS)
        heap = in_host(url, "heap", str(MAX_MESSAGES), packed, rounds=1 if SMOKE else 3)
        cold[backend] = {
            "packedColdMs": median(samples),
            "samplesMs": samples,
            "heapPeakBytes": int(statistics.median(heap)),
            "heapOverPage": round(statistics.median(heap) / len(packed), 2),
        }
    progress("sqlite-raw-events")
    raw_db = tmp_path / "raw-events.db"
    fill_raw_events(raw_db, events)
    samples = in_host(str(raw_db), "raw-events", f"{cut}:{len(events)}", raw, ROUNDS)
    cold["sqlite-raw-events"] = {"rawColdMs": median(samples), "samplesMs": samples}
    cold["sqliteVsRawEvents"] = round(cold["sqlite-raw-events"]["rawColdMs"] / cold["sqlite"]["packedColdMs"], 2)
    results["appends"], results["cold"] = appends, cold

    progress("service on sqlite")
    results["service"] = service_section(urls["sqlite"], packed, raw)


def service_section(url: str, packed: bytes, raw: bytes) -> dict[str, Any]:
    server = ServerProcess(url)
    server.start()
    page = f"/v1/sessions/s/page?maxMessages={MAX_MESSAGES}&maxBytes={EVERYTHING}"
    out: dict[str, list[float]] = {key: [] for key in ("identityServerMs", "identityMs", "zstdServerMs", "zstdMs")}
    out |= {"rawServerMs": [], "rawMs": [], "coldPageRawMs": []}
    zstd_bytes = 0
    try:
        with httpx.Client(base_url=server.url, timeout=300) as client:
            served(client, page, "identity", packed)
            for _ in range(SERVICE_ROUNDS):
                elapsed, server_ms, _ = served(client, page, "identity", packed)
                out["identityMs"].append(elapsed)
                out["identityServerMs"].append(server_ms)
                elapsed, server_ms, zstd_bytes = served(client, page, "zstd", packed)
                out["zstdMs"].append(elapsed)
                out["zstdServerMs"].append(server_ms)
            for _ in range(1 if SMOKE else 3):
                elapsed, server_ms, _ = served(client, page + "&expand=raw", "identity", raw)
                out["rawMs"].append(elapsed)
                out["rawServerMs"].append(server_ms)
                out["coldPageRawMs"].extend(in_host(url, "raw", str(MAX_MESSAGES), raw, rounds=1))
    finally:
        server.stop()
    section: dict[str, Any] = {key: median(samples) for key, samples in out.items()}
    section["samplesMs"] = {key: [round(s, 2) for s in samples] for key, samples in out.items()}
    section["zstdBytes"] = zstd_bytes
    section["rawServerOverColdPageRaw"] = round(section["rawServerMs"] / section["coldPageRawMs"], 2)
    return section

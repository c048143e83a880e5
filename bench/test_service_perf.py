"""Service benchmarks through a real uvicorn server (uvloop, httptools) in its own process.

Prints ``HISTORY_SERVICE_PERF_RESULT {json}``:

* the tail page of dsh-synthetic, packed and raw (``?expand=raw``), for identity, zstd,
  br and gzip: server time (``Server-Timing``), body bytes, and end-to-end latency, median of 5;
* follow delivery: 100 followers on one session while a producer appends in batches of 10
  at 500 and at 2,000 events/s: p50/p99 delivery latency, lost and duplicated counts.

Asserts structure only (bodies decode to the same events; counts), never time.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from bench.fixtures import DSH_LOGICAL_EVENTS, dsh_synthetic
from bench.follow_load import run_load
from bench.machine import emit, machine
from codec import SessionHeader, check_page, decode_page
from history_service.encoding import decompress
from persistence import open_store

CODINGS = ["identity", "zstd", "br", "gzip"]
FOLLOWERS = int(os.environ.get("HISTORY_BENCH_FOLLOWERS", "100"))
DURATION = float(os.environ.get("HISTORY_BENCH_FOLLOW_SECONDS", "10"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("service")
    url = f"sqlite:///{root / 'h.db'}"

    async def prepare() -> None:
        store = await open_store(url, create=True)
        await store.create_session(SessionHeader(id="dsh", createdAt=0))
        events = dsh_synthetic()
        for start in range(0, len(events), 512):
            await store.append("dsh", events[start : start + 512])
        await store.create_session(SessionHeader(id="live", createdAt=0))
        await store.close()

    anyio.run(prepare)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "history_service.cli", "serve", "--store", url, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(base + "/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "server did not start"
        time.sleep(0.1)
    yield base
    process.terminate()
    process.wait(30)


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, Any]]:
    collected: dict[str, Any] = {}
    yield collected
    collected["machine"] = machine()
    emit("SERVICE_PERF", collected)


def fetch(client: httpx.Client, path: str, coding: str) -> tuple[float, float, bytes, httpx.Response]:
    headers = {"Accept-Encoding": coding}
    start = time.perf_counter()
    with client.stream("GET", path, headers=headers) as response:
        body = b"".join(response.iter_raw())
    elapsed = (time.perf_counter() - start) * 1000
    server_ms = float(response.headers["server-timing"].split("dur=")[1])
    return elapsed, server_ms, body, response


@pytest.mark.skipif(os.environ.get("HISTORY_BENCH_ONLY") == "follow", reason="HISTORY_BENCH_ONLY=follow")
def test_tail_page_packed_and_raw(server: str, results: dict[str, Any]) -> None:
    page: dict[str, Any] = {}
    with httpx.Client(base_url=server, timeout=120) as client:
        # An explicit byte target above both bodies, so packed and raw cover the same interval.
        everything = "maxBytes=1000000000"
        paths = (
            ("packed", f"/v1/sessions/dsh/page?{everything}"),
            ("raw", f"/v1/sessions/dsh/page?expand=raw&{everything}"),
        )
        for representation, path in paths:
            for coding in CODINGS:
                fetch(client, path, coding)
                samples = [fetch(client, path, coding) for _ in range(5)]
                body, response = samples[-1][2], samples[-1][3]
                identity = body if coding == "identity" else decompress(body, coding, max_size=1 << 30)
                decoded = check_page(decode_page(identity))
                assert decoded.fromSeq == 0 and decoded.toSeq == DSH_LOGICAL_EVENTS
                assert response.headers.get("content-encoding", "identity") == coding
                page[f"{representation}.{coding}"] = {
                    "bytes": len(body),
                    "records": len(decoded.records),
                    "latencyMs": round(statistics.median(s[0] for s in samples), 2),
                    "serverMs": round(statistics.median(s[1] for s in samples), 2),
                    "latencySamplesMs": [round(s[0], 2) for s in samples],
                }
    assert page["packed.identity"]["records"] == 696 and page["raw.identity"]["records"] == DSH_LOGICAL_EVENTS
    results["page"] = page
    results["pageRatios"] = {
        "identityLatencyRawOverPacked": round(
            page["raw.identity"]["latencyMs"] / page["packed.identity"]["latencyMs"], 1
        ),
        "zstdPackedOverRawBytesPct": round(100 * page["packed.zstd"]["bytes"] / page["raw.zstd"]["bytes"], 2),
        "brPackedOverRawBytesPct": round(100 * page["packed.br"]["bytes"] / page["raw.br"]["bytes"], 2),
    }


def test_follow_delivery_under_load(server: str, results: dict[str, Any]) -> None:
    loads = []
    sessions = {"live": 0}
    for rate in (500, 2000):
        outcome = asyncio.run(run_load(server, followers=FOLLOWERS, rate=rate, seconds=DURATION, sessions=sessions))
        assert (
            outcome["deliveries"] + outcome["lost"] + outcome["undeliveredAtTimeout"] == outcome["events"] * FOLLOWERS
        )
        loads.append(outcome)
    results["follow"] = loads

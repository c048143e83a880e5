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
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from bench.fixtures import DSH_LOGICAL_EVENTS, dsh_synthetic
from codec import SessionHeader, check_page, decode_page, decompress
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
        store = await open_store(url)
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
    collected["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "msgspec": msgspec.__version__}
    print("\nHISTORY_SERVICE_PERF_RESULT " + json.dumps(collected, sort_keys=True))


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


class _Chunked:
    """Undo HTTP/1.1 chunked framing incrementally."""

    def __init__(self) -> None:
        self.raw = b""

    def feed(self, data: bytes) -> bytes:
        self.raw += data
        out = []
        while True:
            end = self.raw.find(b"\r\n")
            if end < 0:
                break
            size = int(self.raw[:end], 16)
            if len(self.raw) < end + 2 + size + 2:
                break
            out.append(self.raw[end + 2 : end + 2 + size])
            self.raw = self.raw[end + 2 + size + 2 :]
        return b"".join(out)


PRODUCER = """
import json, socket, sys, threading, time
from codec import Event, encode

# Appends are pipelined on one HTTP/1.1 connection: sent at the target rate whatever the
# response time, still applied in order (the server handles a connection's requests in turn).
base, rate, first, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
host, port = base.removeprefix("http://").split(":")
sock = socket.create_connection((host, int(port)))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
statuses = []

def read_responses():
    stream = sock.makefile("rb")
    for _ in range(batches):
        status = stream.readline()
        length = 0
        while (line := stream.readline()) not in (b"\\r\\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        stream.read(length)
        statuses.append(int(status.split()[1]))

reader = threading.Thread(target=read_responses)
reader.start()
sent = []
start = time.perf_counter()
for batch in range(batches):
    delay = start + batch * 10 / rate - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    seq0 = first + batch * 10
    body = encode({"events": [Event("load", seq0 + k, 0, {"k": k}) for k in range(10)]})
    head = b"POST /v1/sessions/live/events HTTP/1.1\\r\\nHost: bench\\r\\nContent-Type: application/json\\r\\n"
    sent.append(time.time_ns())
    sock.sendall(head + b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
elapsed = time.perf_counter() - start
reader.join()
assert statuses == [201] * batches, set(statuses)
print(json.dumps({"sent": sent, "elapsed": elapsed}))
"""


async def _follower(port: int, ready: asyncio.Event, state: dict[str, Any], first: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /v1/sessions/live/follow?after=%d HTTP/1.1\r\nHost: bench\r\n\r\n" % (first - 1))
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    ready.set()
    chunked = _Chunked()
    buffer = b""
    expected = first
    arrivals = state["arrivals"]
    while expected < state["total"]:
        data = await reader.read(1 << 16)
        if not data:
            break
        now = time.time_ns()
        buffer += chunked.feed(data)
        cut = buffer.rfind(b"\n\n") + 2
        complete, buffer = buffer[:cut], buffer[cut:]
        # The client must stay cheap, or it competes with the server for the cores: a run of
        # contiguous frames is checked with counts and the first and last id, not frame by frame.
        start = complete.find(b"id: ")
        if start < 0:
            continue
        low = int(complete[start + 4 : complete.index(b"\n", start)])
        tail = complete.rfind(b"id: ")
        high = int(complete[tail + 4 : complete.index(b"\n", tail)])
        count = complete.count(b"\nid: ") + (1 if complete.startswith(b"id: ") else 0)
        if low == expected and count == high - low + 1:
            arrivals.append((low, high, now))
            expected = high + 1
            continue
        for frame in complete.split(b"\n\n"):
            if not frame.startswith(b"id: "):
                continue
            seq = int(frame[4 : frame.index(b"\n")])
            if seq < expected:
                state["duplicated"] += 1
                continue
            if seq > expected:
                state["lost"] += seq - expected
            expected = seq + 1
            arrivals.append((seq, seq, now))
    state["lost"] += max(0, state["total"] - expected)
    writer.close()


async def _follow_load(base: str, rate: int, first_seq: int) -> dict[str, Any]:
    port = int(base.rsplit(":", 1)[1])
    batches = int(rate * DURATION) // 10
    total = first_seq + batches * 10
    state: dict[str, Any] = {"total": total, "lost": 0, "duplicated": 0, "arrivals": []}
    readies = [asyncio.Event() for _ in range(FOLLOWERS)]
    followers = [asyncio.create_task(_follower(port, ready, state, first_seq)) for ready in readies]
    for ready in readies:
        await ready.wait()
    await asyncio.sleep(0.5)
    # The producer runs in its own process, so follower parsing here cannot slow it.
    producer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PRODUCER, base, str(rate), str(first_seq), str(batches), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await producer.communicate()
    assert producer.returncode == 0
    report = json.loads(out)
    await asyncio.wait_for(asyncio.gather(*followers), timeout=120)
    sent = report["sent"]
    latencies = sorted(
        (arrived - sent[(seq - first_seq) // 10]) / 1e6
        for low, high, arrived in state["arrivals"]
        for seq in range(low, high + 1)
    )
    return {
        "followers": FOLLOWERS,
        "targetEventsPerSec": rate,
        "achievedEventsPerSec": round(batches * 10 / report["elapsed"]),
        "events": batches * 10,
        "deliveries": len(latencies),
        "p50Ms": round(latencies[len(latencies) // 2], 2),
        "p99Ms": round(latencies[int(len(latencies) * 0.99)], 2),
        "maxMs": round(latencies[-1], 2),
        "lost": state["lost"],
        "duplicated": state["duplicated"],
    }


def test_follow_delivery_under_load(server: str, results: dict[str, Any]) -> None:
    loads = []
    first = 0
    for rate in (500, 2000):
        outcome = asyncio.run(_follow_load(server, rate, first))
        assert outcome["deliveries"] + outcome["lost"] >= outcome["events"] * FOLLOWERS
        first += outcome["events"]
        loads.append(outcome)
    results["follow"] = loads

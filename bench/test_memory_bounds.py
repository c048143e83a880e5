"""Memory and latency under hostile readers (issue 22): what a reader can make one process hold, and for how long.

For SQLite and JSONL, one service process and a session built to be expensive: 1,000
messages, each a user message and a 100-member text row of 1 KB texts (about 100 MB).

* **Pages.** 16 clients loop ``page?maxMessages=1000&maxBytes=1`` for 5 s, while a probe
  reads a small page of another session and ``/healthz``. Reported: RSS before, its peak
  during the load and 10 s after it, the small page's ``Server-Timing`` median idle and
  under load, and every status seen.
* **Stalled followers.** 30 clients open ``follow?maxMessages=1000`` and read nothing past
  the response head. Reported: RSS growth, and how many were admitted or refused.
* **Head-of-line (JSONL).** 6 clients loop ``page?maxMessages=1000`` on the big session;
  one append goes to it while another client appends to an unrelated session in a loop.
  Reported: the big append's latency, the slowest unrelated one, and which finished first.

Prints ``HISTORY_MEMORY_BOUNDS_RESULT {json}``. Asserts structure only;
``HISTORY_BENCH_SMOKE=1`` runs it tiny.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.machine import emit, machine
from codec import encode
from testing.hostile import JSON, make_wide_session, open_stalled_follow, rss
from testing.servers import ServerProcess
from testing.stores import backend_url

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
MESSAGES = 20 if SMOKE else 1000
TEXT = 100 if SMOKE else 1000
READERS = 4 if SMOKE else 16
SECONDS = 0.5 if SMOKE else 5.0
SETTLE = 0.5 if SMOKE else 10.0
FOLLOWERS = 5 if SMOKE else 30
HOL_READERS = 2 if SMOKE else 6
WIDE = {"maxMessages": 1000, "maxBytes": 1}
MIB = 1024 * 1024


def _timing(response: httpx.Response) -> float:
    return float(response.headers["server-timing"].split("dur=")[1])


def _small_session(client: httpx.Client) -> None:
    assert client.post("/v1/sessions", json={"id": "small", "createdAt": 1}).status_code == 201
    events = [
        {"seq": k, "time": k, "type": "user/message", "data": {"text": f"m{k}"}, "surfaceOp": "append"}
        for k in range(20)
    ]
    assert client.post("/v1/sessions/small/events", content=encode({"events": events}), headers=JSON).status_code == 201


def pages_under_load(server: ServerProcess) -> dict[str, Any]:
    assert server.process is not None
    pid = server.process.pid
    with httpx.Client(base_url=server.url, timeout=60) as client:
        idle = [_timing(client.get("/v1/sessions/small/page", params={"maxMessages": 5})) for _ in range(50)]
    before = rss(pid)
    stop = threading.Event()
    statuses: dict[str, int] = {}
    peak = [before]
    loaded: list[float] = []
    health: list[int] = []
    pages = [0]

    def reader() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while not stop.is_set():
                status = str(client.get("/v1/sessions/big/page", params=WIDE).status_code)
                statuses[status] = statuses.get(status, 0) + 1
                pages[0] += 1

    def probe() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while not stop.is_set():
                peak.append(rss(pid))
                health.append(client.get("/healthz").status_code)
                loaded.append(_timing(client.get("/v1/sessions/small/page", params={"maxMessages": 5})))
                time.sleep(0.02)

    threads = [threading.Thread(target=reader) for _ in range(READERS)] + [threading.Thread(target=probe)]
    for thread in threads:
        thread.start()
    time.sleep(SECONDS)
    stop.set()
    for thread in threads:
        thread.join(120)
    time.sleep(SETTLE)
    after = rss(pid)
    idle_ms, loaded_ms = statistics.median(idle), statistics.median(loaded)
    return {
        "readers": READERS,
        "seconds": SECONDS,
        "pages": pages[0],
        "pageStatuses": statuses,
        "healthStatuses": sorted(set(health)),
        "rssBeforeMiB": round(before / MIB, 1),
        "rssPeakGrowthMiB": round((max(peak) - before) / MIB, 1),
        "rssAfterSettleMiB": round(after / MIB, 1),
        "settleSeconds": SETTLE,
        "afterOverBefore": round(after / before, 3),
        "smallPageIdleMs": round(idle_ms, 3),
        "smallPageLoadedMs": round(loaded_ms, 3),
        "smallPageLoadedOverIdle": round(loaded_ms / idle_ms, 2),
    }


def stalled_followers(server: ServerProcess) -> dict[str, Any]:
    assert server.process is not None
    before = rss(server.process.pid)
    opened = [open_stalled_follow(server.port, "/v1/sessions/big/follow?maxMessages=1000") for _ in range(FOLLOWERS)]
    grown = rss(server.process.pid) - before
    with httpx.Client(base_url=server.url, timeout=30) as client:
        healthy = client.get("/healthz").status_code
    for sock, _, _ in opened:
        sock.close()
    statuses = [status for _, status, _ in opened]
    return {
        "followers": FOLLOWERS,
        "admitted": statuses.count(200),
        "refused": statuses.count(503),
        "rssGrowthMiB": round(grown / MIB, 1),
        "healthz": healthy,
    }


def head_of_line(server: ServerProcess) -> dict[str, Any]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert client.post("/v1/sessions", json={"id": "other", "createdAt": 1}).status_code == 201
        head = client.get("/v1/sessions/big").json()["headSeq"]
    stop = threading.Event()
    finished: list[str] = []
    unrelated: list[float] = []
    big_ms = [0.0]

    def reader() -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            while not stop.is_set():
                client.get("/v1/sessions/big/page", params={"maxMessages": 1000})

    def append_big() -> None:
        event = {"seq": head + 1, "time": 1, "type": "note", "data": {}}
        with httpx.Client(base_url=server.url, timeout=120) as client:
            started = time.perf_counter()
            response = client.post("/v1/sessions/big/events", content=encode({"events": [event]}), headers=JSON)
            big_ms[0] = (time.perf_counter() - started) * 1000
            assert response.status_code == 201, response.text
        finished.append("big")

    def append_other() -> None:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            seq = 0
            while not stop.is_set():
                event = {"seq": seq, "time": 1, "type": "note", "data": {}}
                started = time.perf_counter()
                response = client.post("/v1/sessions/other/events", content=encode({"events": [event]}), headers=JSON)
                unrelated.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 201, response.text
                if seq == 0:
                    finished.append("other")
                seq += 1

    readers = [threading.Thread(target=reader) for _ in range(HOL_READERS)]
    for thread in readers:
        thread.start()
    time.sleep(0.5)
    big, other = threading.Thread(target=append_big), threading.Thread(target=append_other)
    big.start()
    other.start()
    big.join(120)
    time.sleep(0.5)
    stop.set()
    for thread in [*readers, other]:
        thread.join(120)
    return {
        "readers": HOL_READERS,
        "bigAppendMs": round(big_ms[0], 2),
        "unrelatedAppends": len(unrelated),
        "unrelatedMaxMs": round(max(unrelated), 2),
        "unrelatedMedianMs": round(statistics.median(unrelated), 2),
        "firstFinished": finished[0],
    }


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to read resident memory")
def test_memory_bounds(tmp_path: Path) -> None:
    result: dict[str, Any] = {"messages": MESSAGES, "textBytes": TEXT, "stores": {}}
    for name in ("sqlite", "jsonl"):
        root = tmp_path / name
        root.mkdir()
        server = ServerProcess(backend_url(name, root))
        server.start()
        try:
            with httpx.Client(base_url=server.url, timeout=300) as client:
                make_wide_session(client, "big", messages=MESSAGES, texts=100, size=TEXT)
                _small_session(client)
            cells = {"pages": pages_under_load(server), "stalledFollowers": stalled_followers(server)}
            if name == "jsonl":
                cells["headOfLine"] = head_of_line(server)
        finally:
            server.stop()
        assert cells["pages"]["pages"] > 0 and cells["pages"]["healthStatuses"] == [200]
        assert cells["stalledFollowers"]["admitted"] + cells["stalledFollowers"]["refused"] == FOLLOWERS
        result["stores"][name] = cells
    emit("MEMORY_BOUNDS", {**result, "machine": machine()})

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

For SQLite and (with ``HISTORY_TEST_PG_URL``) PostgreSQL, a Durable Stream of two 62 MB
appends (issue 41, F2 and F3):

* **``/ds`` catch-up readers.** 16 clients each read the stream from an offset of their
  own to its tail, following ``Stream-Next-Offset``, while a probe samples RSS and times
  ``/healthz``. The offsets are those a read from ``-1`` gives, spread over the stream; a
  server that gives fewer than 16 (one that answers whole appends) gets positions inside
  the first append instead, which it accepts. Reported: RSS before, its peak growth, RSS
  10 s after the last reader is done, every status the readers saw, whether each got to the
  tail, and ``/healthz``'s statuses and slowest answer.
* **Stalled SSE readers.** 4 clients with 4 KiB receive buffers open ``live=sse`` from
  the start and read nothing past the response head for 5 s. Reported: RSS before, its
  peak growth while they stay, and RSS 10 s after they close.

Prints ``HISTORY_MEMORY_BOUNDS_RESULT {json}`` and ``HISTORY_MEMORY_BOUNDS_DS_RESULT {json}``.
Asserts structure only; ``HISTORY_BENCH_SMOKE=1`` runs it tiny. The ``/ds`` rows use only
what e3149c5 had too, so this file can be copied onto that checkout for figures from before.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bench.machine import emit, machine
from codec import encode
from testing.hostile import JSON, make_wide_session, open_stalled_follow, read_head, rss
from testing.postgres import PG_URL
from testing.servers import ServerProcess
from testing.stores import backend_url, emptied_backend_url

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
# The /ds rows: a stream of two appends of APPEND bytes, read by DS_READERS at distinct offsets, then
# held open by SSE_READERS that read nothing for SSE_SECONDS.
APPEND = 3 * MIB if SMOKE else 62_000_000
DS_READERS = 4 if SMOKE else 16
SSE_READERS = 2 if SMOKE else 4
SSE_SECONDS = 0.5 if SMOKE else 5.0
# A reader refused (503) more often than this in a row gives up: the row reports it did not get its data.
DS_RETRIES = 3
BYTES = {"content-type": "application/octet-stream"}
STREAM = "/ds/v1/stream/big"


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


def _make_stream(client: httpx.Client) -> None:
    assert client.put(STREAM, headers=BYTES).status_code in (200, 201)
    for fill in (b"\x01", b"\x02"):
        assert client.post(STREAM, content=fill * APPEND, headers=BYTES).status_code in (200, 204)


def _ds_offsets(client: httpx.Client) -> list[str]:
    """``DS_READERS`` distinct offsets spread over the stream: those its reads give, else inside its first append."""
    given, offset = [], "-1"
    while True:
        answer = client.get(STREAM, params={"offset": offset})
        if answer.status_code != 200:  # a server that cannot read an append whole in time (503)
            break
        given.append(offset)
        offset = answer.headers["stream-next-offset"]
        if answer.headers.get("stream-up-to-date") == "true":
            break
    if len(given) >= DS_READERS:
        return [given[k * len(given) // DS_READERS] for k in range(DS_READERS)]
    epoch = client.head(STREAM).headers["stream-next-offset"].split("_")[0]
    return [f"{epoch}_{k * APPEND // DS_READERS:016d}" for k in range(DS_READERS)]


def _catch_up(url: str, offset: str) -> dict[str, Any]:
    """One reader's pass from ``offset`` to the tail; a 503 is retried after its Retry-After, a few times."""
    statuses: dict[str, int] = {}
    got, refused, done = 0, 0, False
    with httpx.Client(base_url=url, timeout=120) as client:
        while refused <= DS_RETRIES:
            answer = client.get(STREAM, params={"offset": offset})
            statuses[str(answer.status_code)] = statuses.get(str(answer.status_code), 0) + 1
            if answer.status_code != 200:
                refused += 1
                time.sleep(float(answer.headers.get("retry-after", "1")))
                continue
            refused = 0
            got += len(answer.content)
            offset = answer.headers["stream-next-offset"]
            if answer.headers.get("stream-up-to-date") == "true":
                done = True
                break
    return {"statuses": statuses, "bytes": got, "done": done}


def ds_catch_up(server: ServerProcess, offsets: list[str]) -> dict[str, Any]:
    assert server.process is not None
    pid = server.process.pid
    before = rss(pid)
    peak = [before]
    health: list[int] = []
    health_ms: list[float] = []
    readers: list[dict[str, Any]] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while not stop.is_set():
                peak.append(rss(pid))
                started = time.perf_counter()
                health.append(client.get("/healthz").status_code)
                health_ms.append((time.perf_counter() - started) * 1000)
                time.sleep(0.02)

    def reader(offset: str) -> None:
        readers.append(_catch_up(server.url, offset))

    threads = [threading.Thread(target=reader, args=(offset,)) for offset in offsets]
    watcher = threading.Thread(target=probe)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    stop.set()
    watcher.join(60)
    time.sleep(SETTLE)
    after = rss(pid)
    statuses: dict[str, int] = {}
    for one in readers:
        for status, times in one["statuses"].items():
            statuses[status] = statuses.get(status, 0) + times
    return {
        "readers": len(offsets),
        "readersDone": sum(one["done"] for one in readers),
        "readStatuses": statuses,
        "bytesRead": sum(one["bytes"] for one in readers),
        "healthStatuses": sorted(set(health)),
        "healthChecks": len(health),
        "healthMaxMs": round(max(health_ms), 1),
        "healthMedianMs": round(statistics.median(health_ms), 1),
        "rssBeforeMiB": round(before / MIB, 1),
        "rssPeakGrowthMiB": round((max(peak) - before) / MIB, 1),
        "rssAfterSettleMiB": round(after / MIB, 1),
        "settleSeconds": SETTLE,
        "afterOverBefore": round(after / before, 3),
    }


def _stalled_sse(port: int) -> tuple[socket.socket, int]:
    """An SSE read from the start on a socket with a 4 KiB receive buffer, read no further than its head."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {STREAM}?offset=-1&live=sse HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = read_head(sock)
    return sock, int(head.split(b" ", 2)[1])


def stalled_sse(server: ServerProcess) -> dict[str, Any]:
    assert server.process is not None
    pid = server.process.pid
    before = rss(pid)
    opened = [_stalled_sse(server.port) for _ in range(SSE_READERS)]
    peak = [before]
    ends = time.monotonic() + SSE_SECONDS
    while time.monotonic() < ends:
        peak.append(rss(pid))
        time.sleep(0.02)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        healthy = client.get("/healthz").status_code
    for sock, _ in opened:
        sock.close()
    time.sleep(SETTLE)
    after = rss(pid)
    statuses = [status for _, status in opened]
    return {
        "readers": SSE_READERS,
        "admitted": statuses.count(200),
        "refused": statuses.count(503),
        "healthz": healthy,
        "rssBeforeMiB": round(before / MIB, 1),
        "rssPeakGrowthMiB": round((max(peak) - before) / MIB, 1),
        "rssAfterSettleMiB": round(after / MIB, 1),
        "settleSeconds": SETTLE,
        "afterOverBefore": round(after / before, 3),
    }


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to read resident memory")
def test_ds_memory_bounds(tmp_path: Path) -> None:
    result: dict[str, Any] = {"appendBytes": APPEND, "appends": 2, "stores": {}}
    for name in ("sqlite", "postgresql") if PG_URL else ("sqlite",):
        root = tmp_path / name
        root.mkdir()
        server = ServerProcess(anyio.run(emptied_backend_url, name, root))
        server.start()
        try:
            with httpx.Client(base_url=server.url, timeout=300) as client:
                _make_stream(client)
                offsets = _ds_offsets(client)
            time.sleep(SETTLE)
            cells = {"catchUp": ds_catch_up(server, offsets), "stalledSse": stalled_sse(server)}
        finally:
            server.stop()
        assert cells["catchUp"]["readers"] == len(set(offsets)) == DS_READERS
        assert cells["catchUp"]["healthChecks"] > 0 and cells["catchUp"]["readStatuses"]
        assert cells["stalledSse"]["admitted"] + cells["stalledSse"]["refused"] == SSE_READERS
        result["stores"][name] = cells
    emit("MEMORY_BOUNDS_DS", {**result, "machine": machine()})

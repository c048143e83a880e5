"""Follow load against running services: a pipelined producer process and cheap raw-socket followers.

`run_load` appends ``rate`` events/s in batches of 10, round-robin over ``sessions``
sessions, from its own process (so follower parsing here cannot slow it), while
``followers`` followers, spread evenly over the sessions (and over ``follower_urls``, when
the followers sit on other service processes than the producer's), each read one follow
stream resumed at the load's first seq. It reports delivery latency (append sent to frame
received) p50/p99/max, overall and per follower URL, throughput, and lost and duplicated
counts. ``idle`` more followers can hold streams open on other sessions meanwhile
(`IdleFollowers`), for a capacity cell.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Final

__all__ = ["BATCH", "IdleFollowers", "run_load"]

BATCH: Final = 10

_PRODUCER = """
import json, socket, sys, threading, time
from codec import Event, encode

# Appends are pipelined on one HTTP/1.1 connection: sent at the target rate whatever the
# response time, still applied in order (the server handles a connection's requests in turn).
base, rate, batches, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sessions = json.loads(sys.argv[5])  # [[session id, first seq], ...]
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
next_seq = [first for _, first in sessions]
start = time.perf_counter()
for n in range(batches):
    delay = start + n * batch / rate - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    s = n % len(sessions)
    seq0 = next_seq[s]
    next_seq[s] += batch
    body = encode({"events": [Event("load", seq0 + k, 0, {"k": k}) for k in range(batch)]})
    head = b"POST /v1/sessions/%b/events HTTP/1.1\\r\\nHost: bench\\r\\nContent-Type: application/json\\r\\n" % (
        sessions[s][0].encode()
    )
    sent.append(time.time_ns())
    sock.sendall(head + b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
elapsed = time.perf_counter() - start
reader.join()
assert statuses == [201] * batches, set(statuses)
print(json.dumps({"sent": sent, "elapsed": elapsed}))
"""


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


class _Follower:
    def __init__(self, session: str, first: int, total: int, port: int = 0) -> None:
        self.port = port
        self.session = session
        self.first = first
        self.total = total  # one past the last seq the load appends to this session
        self.expected = first
        self.lost = 0
        self.duplicated = 0
        self.arrivals: list[tuple[int, int, int]] = []

    async def run(self, ready: asyncio.Event, hold: asyncio.Event | None = None) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        path = b"/v1/sessions/%b/follow?after=%d" % (self.session.encode(), self.first - 1)
        writer.write(b"GET %b HTTP/1.1\r\nHost: bench\r\n\r\n" % path)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower(), head[:300]
        ready.set()
        chunked, buffer = _Chunked(), b""
        try:
            while self.expected < self.total or (hold is not None and not hold.is_set()):
                data = await reader.read(1 << 16)
                if not data:
                    break
                now = time.time_ns()
                buffer += chunked.feed(data)
                cut = buffer.rfind(b"\n\n") + 2
                complete, buffer = buffer[:cut], buffer[cut:]
                self._frames(complete, now)
        finally:
            writer.close()

    def _frames(self, complete: bytes, now: int) -> None:
        # The client must stay cheap, or it competes with the server for the cores: a run of
        # contiguous frames is checked with counts and the first and last id, not frame by frame.
        start = complete.find(b"id: ")
        if start < 0:
            return
        low = _seq(complete[start + 4 : complete.index(b"\n", start)])
        tail = complete.rfind(b"id: ")
        high = _seq(complete[tail + 4 : complete.index(b"\n", tail)])
        count = complete.count(b"\nid: ") + (1 if complete.startswith(b"id: ") else 0)
        if low == self.expected and count == high - low + 1:
            self.arrivals.append((low, high, now))
            self.expected = high + 1
            return
        for frame in complete.split(b"\n\n"):
            if not frame.startswith(b"id: "):
                continue
            seq = _seq(frame[4 : frame.index(b"\n")])
            if seq < self.expected:
                self.duplicated += 1
                continue
            if seq > self.expected:
                self.lost += seq - self.expected
            self.expected = seq + 1
            self.arrivals.append((seq, seq, now))


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


class IdleFollowers:
    """``count`` followers on ``sessions`` (each resumed after its head), spread over ``urls``, open until `close`."""

    def __init__(self, urls: list[str], sessions: dict[str, int], count: int) -> None:
        names = list(sessions)
        self._hold = asyncio.Event()
        self._readers = [
            _Follower(names[i % len(names)], sessions[names[i % len(names)]], 0, _port(urls[i % len(urls)]))
            for i in range(count)
        ]
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self) -> None:
        readies = [asyncio.Event() for _ in self._readers]
        self._tasks = [
            asyncio.create_task(reader.run(ready, self._hold))
            for reader, ready in zip(self._readers, readies, strict=True)
        ]
        for ready, task in zip(readies, self._tasks, strict=True):
            # A follower that failed to open (refused, reset) never becomes ready: its error ends the wait.
            waiting = asyncio.ensure_future(ready.wait())
            await asyncio.wait([waiting, task], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if not ready.is_set():
                opened, why = sum(event.is_set() for event in readies), task.exception()
                await self.close()
                raise AssertionError(f"a follower failed to open after {opened} of {len(readies)}") from why

    async def close(self) -> int:
        """Release the streams; returns how many were still open (the others ended early)."""
        still = sum(not task.done() for task in self._tasks)
        self._hold.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return still


def _percentiles(latencies: list[float]) -> dict[str, float | None]:
    latencies = sorted(latencies)
    if not latencies:
        return {"p50Ms": None, "p99Ms": None, "maxMs": None}
    return {
        "p50Ms": round(latencies[len(latencies) // 2], 2),
        "p99Ms": round(latencies[int(len(latencies) * 0.99)], 2),
        "maxMs": round(latencies[-1], 2),
    }


async def run_load(
    base: str,
    *,
    followers: int,
    rate: int,
    seconds: float,
    sessions: dict[str, int],
    follower_urls: list[str] | None = None,
    drain_timeout: float = 120,
) -> dict[str, Any]:
    """Run one load cell. ``sessions`` maps each session id to its next seq; it is advanced in place.

    The producer appends through ``base``; followers read from ``follower_urls`` in turn (``base`` by default).
    """
    urls = follower_urls or [base]
    names = list(sessions)
    batches = max(len(names), int(rate * seconds) // BATCH)
    per_session = {name: (batches // len(names) + (i < batches % len(names))) * BATCH for i, name in enumerate(names)}
    starts = dict(sessions)
    readers = [
        _Follower(name, starts[name], starts[name] + per_session[name], _port(urls[i % len(urls)]))
        for i, name in enumerate(names[i % len(names)] for i in range(followers))
    ]
    readies = [asyncio.Event() for _ in readers]
    tasks = [asyncio.create_task(reader.run(ready)) for reader, ready in zip(readers, readies, strict=True)]
    for ready in readies:
        await ready.wait()
    await asyncio.sleep(0.3)
    producer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PRODUCER,
        base,
        str(rate),
        str(batches),
        str(BATCH),
        json.dumps([[name, starts[name]] for name in names]),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await producer.communicate()
    assert producer.returncode == 0
    report = json.loads(out)
    _, pending = await asyncio.wait(tasks, timeout=drain_timeout)
    for task in pending:
        task.cancel()
    for name in names:
        sessions[name] = starts[name] + per_session[name]
    # Batch n went to session n % S with first seq starts + (n // S) * BATCH.
    sent = report["sent"]
    index = {name: i for i, name in enumerate(names)}
    latencies: list[float] = []
    by_url: dict[int, list[float]] = {}
    for reader in readers:
        s = index[reader.session]
        own = [
            (arrived - sent[((seq - reader.first) // BATCH) * len(names) + s]) / 1e6
            for low, high, arrived in reader.arrivals
            for seq in range(low, high + 1)
        ]
        latencies.extend(own)
        by_url.setdefault(reader.port, []).extend(own)
    last_arrival = max((arrived for reader in readers for _, _, arrived in reader.arrivals), default=sent[0])
    events = batches * BATCH
    undelivered = sum(max(0, reader.total - reader.expected) for reader in readers)
    return {
        "followers": followers,
        "sessions": len(names),
        "targetEventsPerSec": rate,
        "achievedEventsPerSec": round(events / report["elapsed"]),
        "events": events,
        "deliveries": len(latencies),
        # Over the time deliveries took (first append sent to last frame read), not the append window.
        "deliveriesPerSec": round(len(latencies) / max((last_arrival - sent[0]) / 1e9, 1e-9)) if latencies else 0,
        **_percentiles(latencies),
        "byFollowerUrl": {
            url: _percentiles(by_url.get(_port(url), [])) | {"followers": sum(r.port == _port(url) for r in readers)}
            for url in urls
        },
        "lost": sum(reader.lost for reader in readers),
        "duplicated": sum(reader.duplicated for reader in readers),
        "undeliveredAtTimeout": undelivered,
        "expectedDeliveries": sum(reader.total - reader.first for reader in readers),
    }


def _seq(event_id: bytes) -> int:
    """The seq of an SSE id, ``<incarnation>:<seq>`` (docs/protocol.md §5.1)."""
    return int(event_id.rpartition(b":")[2])

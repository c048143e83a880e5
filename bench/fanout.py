"""SSE fan-out for a Durable Streams server: one writer at a fixed rate, many SSE readers, delivery latency.

One asyncio process (uvloop) opens ``readers`` SSE reads of one ``text/plain`` stream at its
tail, then appends ``rate`` messages a second for ``seconds``, each message its send time in
ns on this process's monotonic clock. Each reader takes every ``data`` event's time from its
own clock at arrival: the difference is the delivery latency, from the append's send to the
event's arrival, the server's write path included. The readers parse only what they must
(the ``data:`` lines), so the generator's own cost stays small beside the server's.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

import uvloop

from bench.throughput import Connection, _send

__all__ = ["fan_out"]


async def _read(port: int, path: bytes, latencies: list[int], expected: int, opened: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET %b HTTP/1.1\r\nHost: bench\r\n\r\n" % path)
        head = await reader.readuntil(b"\r\n\r\n")
        assert head[9:12] == b"200", head
        opened.append(1)
        seen = 0
        clock = time.monotonic_ns
        while seen < expected:
            line = await reader.readline()
            if not line:
                return
            at = line.find(b"data:")
            value = line[at + 5 :].strip() if at >= 0 else b""
            if value[:1].isdigit():
                latencies.append(clock() - int(value))
                seen += 1
    finally:
        writer.close()


async def _fan_out(url: str, name: str, readers: int, rate: int, seconds: float) -> dict[str, Any]:
    parts = urlsplit(url)
    port, root = parts.port, parts.path.rstrip("/").encode()
    assert port is not None
    path = root + b"/v1/stream/" + name.encode()
    conn = Connection(port)
    assert (await conn.request(_send("PUT", path.decode(), b"", "text/plain"))).status == 201
    count = int(rate * seconds)
    latencies: list[int] = []
    opened: list[int] = []
    sse = path + b"?offset=now&live=sse"
    tasks = [asyncio.create_task(_read(port, sse, latencies, count, opened)) for _ in range(readers)]
    while len(opened) < readers:
        await asyncio.sleep(0.01)
    # Each reader's read has registered once its first control event is out; a short settle lets them all.
    await asyncio.sleep(0.5)
    interval = 1 / rate
    start = time.monotonic()
    for n in range(count):
        delay = start + n * interval - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        reply = await conn.request(_send("POST", path.decode(), str(time.monotonic_ns()).encode(), "text/plain"))
        assert reply.status == 204, reply
    sent = time.monotonic() - start
    await asyncio.wait(tasks, timeout=30)
    for task in tasks:
        task.cancel()
    conn.close()
    ordered = sorted(latencies)

    def ms(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1e6, 3) if ordered else None

    return {
        "readers": readers,
        "messages": count,
        "sendSeconds": round(sent, 3),
        "delivered": len(latencies),
        "expected": count * readers,
        "p50Ms": ms(0.5),
        "p99Ms": ms(0.99),
        "maxMs": ms(1.0),
    }


def fan_out(url: str, name: str, *, readers: int, rate: int, seconds: float) -> dict[str, Any]:
    """Delivery latencies of ``rate`` appends a second to ``readers`` SSE readers of the stream ``name``."""
    return uvloop.run(_fan_out(url, name, readers, rate, seconds))

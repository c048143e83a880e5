"""Many small requests against a running service: raw keep-alive HTTP/1.1 from one asyncio process.

Each of ``connections`` connections owns one session. It creates it (and, for pages,
seeds it and reads the reference page), then, once every connection is ready, sends one
request at a time until the window closes: a closed loop. Requests are hand-written
bytes and answers are read by their ``Content-Length``, so the load generator costs
little beside the server; `run_cell` reports both processes' CPU share, to show which
one was the bound.

* ``append``: durable one-event appends, seq after seq.
* ``page``: ``maxMessages=5`` pages of the connection's own small session, each checked
  byte for byte against the first, with the server's own time from ``Server-Timing``.
* ``healthz``: ``GET /healthz``, which does nothing: what the framework and the edge cost.
* ``stream-append``: a Durable Streams server's appends of one small ``text/plain``
  message to the connection's own stream, for the peer protocol's figure beside ours.

`touch_sessions` creates, appends to and pages many sessions once each, reading the
server's resident memory after the first few and at the end.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, TypeVar
from urllib.parse import urlsplit

import msgspec
import uvloop

__all__ = [
    "PAGE_MESSAGES",
    "TIME_ZERO",
    "Connection",
    "Reply",
    "Workload",
    "append_body",
    "cpu_seconds",
    "process_tree",
    "rss_bytes",
    "run",
    "run_cell",
    "touch_sessions",
    "tree_cpu_seconds",
]

T = TypeVar("T")

PAGE_MESSAGES: Final = 5
TIME_ZERO: Final = 1_700_000_000_000
_DELTA: Final = (
    b'{"type":"assistant/chunk","seq":%d,"time":%d,'
    b'"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":" tok"}}}'
)
_TOUCH: Final = (
    b'{"events":[{"type":"user/message","seq":0,"time":%d,"data":{"text":"hello"},"surfaceOp":"append"}]}' % TIME_ZERO
)


def append_body(seq: int, count: int = 1) -> bytes:
    """``count`` ``assistant/chunk`` text deltas from ``seq`` on, as an append body in canonical form."""
    if count == 1:
        return b'{"events":[%b]}' % (_DELTA % (seq, TIME_ZERO + seq))
    return b'{"events":[%b]}' % b",".join(_DELTA % (n, TIME_ZERO + n) for n in range(seq, seq + count))


def _get(path: str) -> bytes:
    return b"GET %b HTTP/1.1\r\nHost: bench\r\n\r\n" % path.encode()


def _post(path: str, body: bytes) -> bytes:
    return _send("POST", path, body, "application/json")


def _send(method: str, path: str, body: bytes, content_type: str) -> bytes:
    head = b"%b %b HTTP/1.1\r\nHost: bench\r\nContent-Type: %b\r\nContent-Length: %d\r\n\r\n"
    return head % (method.encode(), path.encode(), content_type.encode(), len(body)) + body


class Reply(NamedTuple):
    status: int
    body: bytes
    server_ms: float | None


class Connection:
    """One keep-alive HTTP/1.1 connection, one request in flight at a time."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.opened = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.opened += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._reader = self._writer = None

    async def request(self, data: bytes) -> Reply:
        """Send a whole request; read the answer's status, ``Server-Timing`` and ``Content-Length`` body."""
        if self._writer is None:
            await self.open()
        assert self._reader is not None and self._writer is not None
        self._writer.write(data)
        head = (await self._reader.readuntil(b"\r\n\r\n")).lower()
        start = head.find(b"\r\ncontent-length:")
        status = int(head[9:12])
        if start >= 0:
            length = int(head[start + 17 : head.index(b"\r\n", start + 2)])
            body = await self._reader.readexactly(length) if length else b""
        elif b"\r\ntransfer-encoding: chunked" in head:
            # The service always sends a length; a peer's server may not.
            body = await self._chunked()
        else:
            assert status in (204, 304), head
            body = b""
        server_ms = None
        timing = head.find(b"\r\nserver-timing:")
        if timing >= 0:
            dur = head.index(b"dur=", timing) + 4
            server_ms = float(head[dur : head.index(b"\r\n", dur)].split(b",")[0].split(b";")[0])
        if b"\r\nconnection: close" in head:
            self.close()
        return Reply(status, body, server_ms)

    async def _chunked(self) -> bytes:
        assert self._reader is not None
        body = b""
        while size := int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += (await self._reader.readexactly(size + 2))[:-2]
        await self._reader.readuntil(b"\r\n")
        return body


class _Owner(ABC):
    """What one connection does to its own session."""

    def __init__(self, session: str) -> None:
        self.session = session

    async def create(self, conn: Connection) -> None:
        body = msgspec.json.encode({"id": self.session, "createdAt": TIME_ZERO})
        reply = await conn.request(_post("/v1/sessions", body))
        assert reply.status == 201, reply

    @abstractmethod
    async def prepare(self, conn: Connection) -> None: ...

    @abstractmethod
    def next(self) -> bytes: ...

    @abstractmethod
    def right(self, reply: Reply) -> bool:
        """Whether a 2xx answer is the one expected."""

    @abstractmethod
    async def verify(self, conn: Connection) -> None:
        """Check the session after the window."""


class _Appender(_Owner):
    def __init__(self, session: str) -> None:
        super().__init__(session)
        self.seq = 0
        self.path = f"/v1/sessions/{session}/events"

    async def prepare(self, conn: Connection) -> None:
        await self.create(conn)

    def next(self) -> bytes:
        self.seq += 1
        return _post(self.path, append_body(self.seq - 1))

    def right(self, reply: Reply) -> bool:
        return reply.status == 201

    async def verify(self, conn: Connection) -> None:
        reply = await conn.request(_get(f"/v1/sessions/{self.session}"))
        assert reply.status == 200, reply
        assert msgspec.json.decode(reply.body)["headSeq"] == self.seq - 1, (self.session, self.seq)


class _Pager(_Owner):
    def __init__(self, session: str, seed: bytes) -> None:
        super().__init__(session)
        self.seed = seed
        self.request = _get(f"/v1/sessions/{session}/page?maxMessages={PAGE_MESSAGES}")
        self.expected = b""

    async def prepare(self, conn: Connection) -> None:
        await self.create(conn)
        reply = await conn.request(_post(f"/v1/sessions/{self.session}/events", self.seed))
        assert reply.status == 201, reply
        reply = await conn.request(self.request)
        assert reply.status == 200 and reply.body.startswith(b'{"records":['), reply
        self.expected = reply.body

    def next(self) -> bytes:
        return self.request

    def right(self, reply: Reply) -> bool:
        return reply.body == self.expected

    async def verify(self, conn: Connection) -> None:
        assert self.right(await conn.request(self.request)), self.session


class _Health(_Owner):
    """``GET /healthz``, the request that does nothing: what the edge and the framework cost."""

    async def prepare(self, conn: Connection) -> None:
        return None

    def next(self) -> bytes:
        return _get("/healthz")

    def right(self, reply: Reply) -> bool:
        return reply.status == 200 and reply.body.startswith(b"{")

    async def verify(self, conn: Connection) -> None:
        assert self.right(await conn.request(self.next())), self.session


class _StreamAppender(_Owner):
    """A Durable Streams stream of ``text/plain``: created with PUT, then one small message per POST."""

    TOKEN: Final = b" tok"

    def __init__(self, session: str, root: str = "") -> None:
        super().__init__(session)
        self.path = f"{root}/v1/stream/{session}"
        self.appended = 0

    async def prepare(self, conn: Connection) -> None:
        reply = await conn.request(_send("PUT", self.path, b"", "text/plain"))
        assert reply.status == 201, reply

    def next(self) -> bytes:
        self.appended += 1
        return _send("POST", self.path, self.TOKEN, "text/plain")

    def right(self, reply: Reply) -> bool:
        return reply.status == 204

    async def verify(self, conn: Connection) -> None:
        reply = await conn.request(_get(f"{self.path}?offset=-1"))
        assert reply.status == 200 and reply.body == self.TOKEN * self.appended, (self.session, len(reply.body))


Workload = Literal["append", "page", "healthz", "stream-append"]


def _owner(workload: Workload, session: str, seed: bytes, root: str = "") -> _Owner:
    if workload == "append":
        return _Appender(session)
    if workload == "page":
        return _Pager(session, seed)
    if workload == "healthz":
        return _Health(session)
    return _StreamAppender(session, root)


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


def _ms(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000, 3)


def rss_bytes(pid: int) -> int:
    """A process's resident memory, from ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of a process and all its threads, from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """``pid`` and every live descendant (``serve --workers``: the supervisor and its workers), from ``/proc``."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo.extend(int(child) for child in (task / "children").read_text().split())
            except OSError:
                continue
    return out


def tree_cpu_seconds(pids: list[int]) -> float:
    """`cpu_seconds` summed over ``pids``, a process that has gone counting nothing."""
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue
    return total


class _Tally:
    def __init__(self) -> None:
        self.requests = 0
        self.non2xx = 0
        self.wrong = 0
        self.latencies: list[float] = []
        self.server_ms: list[float] = []

    def count(self, reply: Reply, owner: _Owner | None, elapsed: float) -> None:
        self.requests += 1
        self.latencies.append(elapsed)
        if not 200 <= reply.status < 300:
            self.non2xx += 1
        elif owner is not None and not owner.right(reply):
            self.wrong += 1
        if reply.server_ms is not None:
            self.server_ms.append(reply.server_ms)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": self.requests,
            "non2xx": self.non2xx,
            "wrong": self.wrong,
            "p50Ms": _ms(self.latencies, 0.5),
            "p99Ms": _ms(self.latencies, 0.99),
        }
        if self.server_ms:
            out["serverP50Ms"] = round(statistics.median(self.server_ms), 3)
            out["serverP99Ms"] = round(sorted(self.server_ms)[int(len(self.server_ms) * 0.99)], 3)
        return out


async def _drive(conn: Connection, owner: _Owner, deadline: float, tally: _Tally) -> None:
    clock = time.perf_counter
    while (started := clock()) < deadline:
        reply = await conn.request(owner.next())
        tally.count(reply, owner, clock() - started)


async def run_cell(
    url: str,
    workload: Workload,
    *,
    connections: int,
    seconds: float,
    prefix: str,
    seed: bytes = b"",
    pid: int | None = None,
    tree: bool = False,
) -> dict[str, Any]:
    """One closed-loop cell; sessions are named ``{prefix}-{n}`` and must not exist yet.

    ``seed`` is the append body each page session starts from; ``pid`` is the server's,
    for its CPU share over the window, with its descendants' when ``tree`` (``--workers``).
    """
    conns = [Connection(_port(url)) for _ in range(connections)]
    # A Durable Streams server's root may be below the host's (ours: /ds).
    root = urlsplit(url).path.rstrip("/")
    owners = [_owner(workload, f"{prefix}-{n}", seed, root) for n in range(connections)]
    try:
        await asyncio.gather(*(conn.open() for conn in conns))
        await asyncio.gather(*(owner.prepare(conn) for owner, conn in zip(owners, conns, strict=True)))
        tally = _Tally()
        pids = [] if pid is None else process_tree(pid) if tree else [pid]
        server_cpu = tree_cpu_seconds(pids)
        client_cpu = time.process_time()
        start = time.perf_counter()
        await asyncio.gather(*(_drive(c, o, start + seconds, tally) for o, c in zip(owners, conns, strict=True)))
        elapsed = time.perf_counter() - start
        client_cpu = time.process_time() - client_cpu
        server_cpu = tree_cpu_seconds(pids) - server_cpu
        await asyncio.gather(*(owner.verify(conn) for owner, conn in zip(owners, conns, strict=True)))
    finally:
        for conn in conns:
            conn.close()
    out = {
        "connections": connections,
        "seconds": round(elapsed, 3),
        "perSec": round(tally.requests / elapsed),
        **tally.summary(),
        "reconnects": sum(conn.opened - 1 for conn in conns),
        "clientCpu": round(client_cpu / elapsed, 2),
    }
    if pid is not None:
        out["serverCpu"] = round(server_cpu / elapsed, 2)
    return out


async def touch_sessions(url: str, count: int, *, connections: int, pid: int, first: int) -> dict[str, Any]:
    """Create, append one event to and page each of ``count`` new sessions (``touch-{n}``) once.

    The server's RSS is read when ``first`` sessions are done and again at the end.
    """
    numbers: Iterator[int] = iter(range(count))
    tally = _Tally()
    done = 0
    rss_first = 0
    expected: list[bytes] = []

    async def worker(conn: Connection) -> None:
        nonlocal done, rss_first
        clock = time.perf_counter
        for n in numbers:
            session = f"touch-{n}"
            header = msgspec.json.encode({"id": session, "createdAt": TIME_ZERO})
            for data in (
                _post("/v1/sessions", header),
                _post(f"/v1/sessions/{session}/events", _TOUCH),
                _get(f"/v1/sessions/{session}/page?maxMessages={PAGE_MESSAGES}"),
            ):
                started = clock()
                reply = await conn.request(data)
                tally.count(reply, None, clock() - started)
            # Every page is of one identical event, so every page body is the same bytes.
            if not expected:
                expected.append(reply.body)
            if reply.body != expected[0] or b'"toSeq":1}' not in reply.body:
                tally.wrong += 1
            done += 1
            if done == first:
                rss_first = rss_bytes(pid)

    conns = [Connection(_port(url)) for _ in range(connections)]
    start = time.perf_counter()
    try:
        await asyncio.gather(*(worker(conn) for conn in conns))
    finally:
        for conn in conns:
            conn.close()
    elapsed = time.perf_counter() - start
    rss_end = rss_bytes(pid)
    return {
        "sessions": done,
        "connections": connections,
        "firstSessions": first,
        "seconds": round(elapsed, 1),
        "sessionsPerSec": round(done / elapsed),
        **tally.summary(),
        "rssFirstMb": round(rss_first / 2**20, 1),
        "rssEndMb": round(rss_end / 2**20, 1),
        "growthMb": round((rss_end - rss_first) / 2**20, 1),
    }


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a load on uvloop with the collector off: the load generator must not be the bound."""
    gc.disable()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    finally:
        gc.enable()

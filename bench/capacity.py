"""Live sessions against a running server: an open-loop load generator of producers and SSE followers.

One live session is a producer appending a batch of 5 token deltas every 100 ms (50
tokens/s) and one SSE follower reading it (issue 43). `step` runs ``sessions`` of them at
once, through ``/v1`` (append + follow) or through a Durable Streams root (POST of a JSON
array of 5 ints + ``live=sse``), and reports the delay from a batch's send to the arrival
of its last event: p50, p99 and max, with what was lost, undelivered, duplicated or refused.
A step that is already failing (more than 1% of its batches late, or a refusal) stops
sending early, so a ramp spends little time above its capacity.

The load is open: each session's batch leaves on its schedule whether or not the previous
answer has come (HTTP/1.1 pipelining on the producer's keep-alive connection), so a slow
server shows as delay, not as fewer batches (no coordinated omission). One scheduler tick
every 10 ms sends every batch that is due, session ``s`` having phase ``s / sessions`` of
the period, so the load is smooth. Connections are raw `asyncio.Protocol`s that parse only
status lines, lengths and SSE ids, so the generator stays cheap: the step reports its CPU
(``clientCpu``, in cores) beside the server's (``serverCpu``, summed over the server's
process tree).
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, cast
from urllib.parse import urlsplit

import msgspec

from bench.throughput import TIME_ZERO, Connection, _post, _send, append_body, tree_cpu_seconds

__all__ = [
    "BATCH",
    "GOAL_P99_MS",
    "PERIOD_S",
    "Target",
    "ds_body",
    "serving_counts",
    "machine_busy",
    "step",
    "wait_idle",
]

BATCH: Final = 5
PERIOD_S: Final = 0.1
GOAL_P99_MS: Final = 250.0
TICK_S: Final = 0.01
LATE_NS: Final = int(GOAL_P99_MS * 1e6)
# A step stops early once more than this share of its batches came late: its p99 is over the goal already.
LATE_SHARE: Final = 0.01
CHECK_S: Final = 0.1
DRAIN_S: Final = 3.0
SETTLE_S: Final = 0.3
SETUP_CONNECTIONS: Final = 20


class Target(NamedTuple):
    """A server under load: ``url`` is the ``/v1`` host, or a Durable Streams root (``…/ds`` for ours)."""

    kind: Literal["v1", "ds"]
    url: str
    pids: list[int]


def ds_body(seq: int, count: int = BATCH) -> bytes:
    """A batch through ``/ds``: the JSON array of the ints from ``seq`` on, one message each in JSON mode."""
    return b"[%b]" % b",".join(b"%d" % n for n in range(seq, seq + count))


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        try:
            link = str(fd.readlink())
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def serving_counts(pids: Sequence[int], port: int) -> dict[int, int]:
    """Per process of ``pids`` that listens on ``port`` and has no child, its established connections on that port.

    The workers of ``serve --workers N`` share the listening socket; which worker takes a
    connection is the kernel's choice, so a bench shows the spread by counting it here.
    """
    established: set[str] = set()
    listening: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) != port:
                continue
            if fields[3] == "01":
                established.add(fields[9])
            elif fields[3] == "0A":
                listening.add(fields[9])
    out = {}
    for pid in pids:
        inodes = _socket_inodes(pid)
        if inodes & listening and not _has_child(pid):
            out[pid] = len(inodes & established)
    return out


def _has_child(pid: int) -> bool:
    try:
        return any((task / "children").read_text().strip() for task in Path(f"/proc/{pid}/task").glob("*"))
    except OSError:
        return False


def machine_busy() -> tuple[int, int]:
    """The whole machine's busy and total CPU ticks so far, from ``/proc/stat``: every process, not only ours."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


async def wait_idle(pids: list[int], *, below: float = 0.1, timeout: float = 60) -> bool:
    """Wait until ``pids`` together use under ``below`` cores over half a second; False if they never do."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = tree_cpu_seconds(pids)
        await asyncio.sleep(0.5)
        if tree_cpu_seconds(pids) - before < below * 0.5:
            return True
    return False


class _Tally:
    """What a step's connections report: each timed batch's delay (ns), how many were late, and refusals."""

    def __init__(self) -> None:
        self.delays: list[int] = []
        self.late = 0
        self.refused = 0


class _Producer(asyncio.Protocol):
    """One session's producer: pipelined POSTs on one connection; answers counted by status line."""

    def __init__(self, tally: _Tally) -> None:
        self.tally = tally
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.pending = 0
        self.lost_connection = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def send(self, data: bytes) -> None:
        if self.lost_connection or self.transport is None:
            self.tally.refused += 1
            return
        self.pending += 1
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data
        while (end := buffer.find(b"\r\n\r\n")) >= 0:
            head = buffer[: end + 2].lower()
            at = head.find(b"\r\ncontent-length:")
            length = int(head[at + 17 : head.index(b"\r\n", at + 2)]) if at >= 0 else 0
            if len(buffer) < end + 4 + length:
                break
            if not 200 <= int(head[9:12]) < 300:
                self.tally.refused += 1
            self.pending -= 1
            buffer = buffer[end + 4 + length :]
        self.buffer = buffer

    def connection_lost(self, exc: Exception | None) -> None:
        # Whatever is unanswered when the connection goes was refused (the bench closes only after counting).
        self.lost_connection = True
        self.tally.refused += self.pending
        self.pending = 0


class _Follower(asyncio.Protocol):
    """One session's SSE reader: checks the event order and times each batch's last event."""

    def __init__(self, kind: str, sent: list[int], tally: _Tally, counted: range) -> None:
        self.kind = kind
        self.sent = sent
        self.tally = tally
        self.counted = counted
        self.head: bytes | None = None
        self.status = 0
        self.chunked = False
        self.raw = b""
        self.text = b""
        self.expected = 0
        self.whole = 0
        self.lost = 0
        self.duplicated = 0
        self.ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.BaseTransport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        if self.head is None:
            self.raw += data
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head, data, self.raw = self.raw[:end].lower(), self.raw[end + 4 :], b""
            self.status = int(self.head[9:12])
            self.chunked = b"\r\ntransfer-encoding: chunked" in self.head
            if not self.ready.done():
                self.ready.set_result(self.status)
        self.text += self._dechunk(data) if self.chunked else data
        cut = self.text.rfind(b"\n\n")
        if cut < 0:
            return
        complete, self.text = self.text[: cut + 2], self.text[cut + 2 :]
        if self.kind == "v1":
            self._ids(complete, now)
        else:
            self._arrays(complete, now)

    def _dechunk(self, data: bytes) -> bytes:
        raw, out = self.raw + data, []
        while (end := raw.find(b"\r\n")) >= 0:
            size = int(raw[:end].split(b";")[0], 16)
            if len(raw) < end + 2 + size + 2:
                break
            out.append(raw[end + 2 : end + 2 + size])
            raw = raw[end + 4 + size :]
        self.raw = raw
        return b"".join(out)

    def _ids(self, complete: bytes, now: int) -> None:
        # A contiguous run is checked by its first and last id and its count, not frame by frame.
        start = complete.find(b"id: ")
        if start < 0:
            return
        low = int(complete[start + 4 : complete.index(b"\n", start)].rpartition(b":")[2])
        tail = complete.rfind(b"id: ")
        high = int(complete[tail + 4 : complete.index(b"\n", tail)].rpartition(b":")[2])
        count = complete.count(b"\nid: ") + complete.startswith(b"id: ")
        if low == self.expected and count == high - low + 1:
            self._arrived(high, now)
            return
        for frame in complete.split(b"\n\n"):
            if frame.startswith(b"id: "):
                self._one(int(frame[4 : frame.index(b"\n")].rpartition(b":")[2]), now)

    def _arrays(self, complete: bytes, now: int) -> None:
        for event in complete.split(b"\n\n"):
            if b"event: data" not in event:
                continue
            payload = b"".join(line[5:] for line in event.split(b"\n") if line.startswith(b"data:"))
            values = [int(v) for v in payload.strip().strip(b"[]").split(b",") if v.strip()]
            if values and values[0] == self.expected and values[-1] == self.expected + len(values) - 1:
                self._arrived(values[-1], now)
                continue
            for value in values:
                self._one(value, now)

    def _one(self, seq: int, now: int) -> None:
        if seq < self.expected:
            self.duplicated += 1
            return
        if seq > self.expected:
            # A batch with a lost event is never timed: timing resumes at the next whole batch.
            self.lost += seq - self.expected
            self.whole = -(-seq // BATCH)
        self._arrived(seq, now)

    def _arrived(self, high: int, now: int) -> None:
        done, self.expected = max(self.expected // BATCH, self.whole), high + 1
        for k in range(done, self.expected // BATCH):
            if k in self.counted and k < len(self.sent):
                delay = now - self.sent[k]
                self.tally.delays.append(delay)
                self.tally.late += delay > LATE_NS

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.ready.done():
            self.ready.set_result(0)


class _Session(NamedTuple):
    name: str
    append: bytes  # the request head up to the body's length
    follow: bytes


def _session(kind: str, root: str, name: str) -> _Session:
    if kind == "v1":
        return _Session(
            name,
            b"POST /v1/sessions/%b/events HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            % name.encode(),
            b"GET /v1/sessions/%b/follow?after=-1 HTTP/1.1\r\nHost: bench\r\n\r\n" % name.encode(),
        )
    path = f"{root}/v1/stream/{name}".encode()
    return _Session(
        name,
        b"POST %b HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n" % path,
        b"GET %b?offset=-1&live=sse HTTP/1.1\r\nHost: bench\r\n\r\n" % path,
    )


async def _create(port: int, kind: str, root: str, names: list[str]) -> int:
    """Create every session (or stream); returns how many were refused."""
    queue = iter(names)
    refused = 0

    async def worker() -> None:
        nonlocal refused
        conn = Connection(port)
        try:
            for name in queue:
                if kind == "v1":
                    body = msgspec.json.encode({"id": name, "createdAt": TIME_ZERO})
                    reply = await conn.request(_post("/v1/sessions", body))
                else:
                    reply = await conn.request(_send("PUT", f"{root}/v1/stream/{name}", b"", "application/json"))
                refused += reply.status != 201
        finally:
            conn.close()

    await asyncio.gather(*(worker() for _ in range(min(SETUP_CONNECTIONS, len(names)))))
    return refused


def _overdue(followers: list[_Follower], first: int) -> int:
    """Timed batches sent longer ago than the goal and not delivered yet: late, whenever they come."""
    before = time.monotonic_ns() - LATE_NS
    return sum(
        max(0, bisect.bisect_right(f.sent, before) - max(f.expected // BATCH, f.whole, first)) for f in followers
    )


def _ms(ordered: list[int], q: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1e6, 2)


async def step(
    target: Target,
    sessions: int,
    *,
    seconds: float,
    prefix: str,
    warmup: float = 1.0,
    drain: float = DRAIN_S,
    setup_timeout: float = 120,
) -> dict[str, Any]:
    """One step: ``sessions`` live sessions named ``{prefix}-{n}`` (new ones), measured over ``seconds``.

    After the window, undelivered batches are awaited for ``drain`` seconds at most.
    """
    loop = asyncio.get_running_loop()
    parts = urlsplit(target.url)
    assert parts.port is not None, target.url
    port, root = parts.port, parts.path.rstrip("/")
    names = [f"{prefix}-{n}" for n in range(sessions)]
    plan = [_session(target.kind, root, name) for name in names]
    refused = await _create(port, target.kind, root, names)
    # Batches are counted by index: batch k of a session is due at start + (k + s / sessions) × period.
    rounds = round((warmup + seconds) / PERIOD_S)
    first = round(warmup / PERIOD_S)
    counted = range(first, rounds)
    sent: list[list[int]] = [[] for _ in plan]
    tally = _Tally()
    followers: list[_Follower] = []
    producers: list[_Producer] = []
    try:
        for n, session in enumerate(plan):
            transport, follower = await loop.create_connection(
                functools.partial(_Follower, target.kind, sent[n], tally, counted), "127.0.0.1", port
            )
            transport.write(session.follow)
            followers.append(follower)
        # A follower without its answer's head by then was refused, and the step goes on to fail.
        await asyncio.wait([f.ready for f in followers], timeout=setup_timeout)
        refused += sum(not f.ready.done() or f.ready.result() != 200 for f in followers)
        for _ in plan:
            producers.append((await loop.create_connection(functools.partial(_Producer, tally), "127.0.0.1", port))[1])
        await asyncio.sleep(SETTLE_S)
        body = append_body if target.kind == "v1" else ds_body
        server_cpu, client_cpu, busy = tree_cpu_seconds(target.pids), time.process_time(), machine_busy()
        start = time.monotonic()
        total = rounds * sessions
        enough = LATE_SHARE * len(counted) * sessions
        g = 0
        window_start = window_end = 0.0
        checked = 0.0
        while g < total and not tally.refused:
            now = time.monotonic()
            if now - checked >= CHECK_S:
                checked = now
                if tally.late + _overdue(followers, first) > enough:
                    break
            if window_start == 0.0 and now >= start + warmup:
                window_start, server_cpu, client_cpu = now, tree_cpu_seconds(target.pids), time.process_time()
                busy = machine_busy()
            while g < total and start + g * PERIOD_S / sessions <= now:
                s, k = g % sessions, g // sessions
                payload = body(BATCH * k, BATCH)
                sent[s].append(time.monotonic_ns())
                producers[s].send(plan[s].append + b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
                g += 1
            await asyncio.sleep(TICK_S)
        window_end = time.monotonic()
        server_cpu = tree_cpu_seconds(target.pids) - server_cpu
        client_cpu = time.process_time() - client_cpu
        busy_after, ticks_after = machine_busy()
        machine_cpu = (busy_after - busy[0]) / max(ticks_after - busy[1], 1) * (os.cpu_count() or 1)
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline and (
            any(f.expected < BATCH * len(f.sent) and not f.closed for f in followers)
            or any(p.pending for p in producers)
        ):
            await asyncio.sleep(0.05)
        refused += tally.refused
        unanswered = sum(p.pending for p in producers)
    finally:
        for gone in [f.transport for f in followers] + [p.transport for p in producers]:
            if gone is not None:
                gone.close()
    undelivered = sum(max(0, len(f.sent) - max(f.expected // BATCH, first)) for f in followers)
    ordered = sorted(tally.delays)
    elapsed = max(window_end - window_start, 1e-9)
    lost = sum(f.lost for f in followers)
    duplicated = sum(f.duplicated for f in followers)
    p99 = _ms(ordered, 0.99)
    astray = lost or undelivered or duplicated or refused
    return {
        "sessions": sessions,
        "batches": len(counted) * sessions,
        "delivered": len(ordered),
        # Sent within the window: fewer than planned when the step stopped early, already failing.
        "sent": max(0, g - first * sessions),
        "p50Ms": _ms(ordered, 0.5),
        "p99Ms": p99,
        "maxMs": _ms(ordered, 1.0),
        # Events skipped in a stream (a later one came), and timed batches still missing after the drain.
        "lost": lost,
        "undelivered": undelivered,
        "duplicated": duplicated,
        "refused": refused,
        # Appends still unanswered after the drain: a server too slow to answer, not one that refused.
        "unanswered": unanswered,
        "serverCpu": round(server_cpu / elapsed, 2),
        "clientCpu": round(client_cpu / elapsed, 2),
        # Every process's, in cores: other work on the machine shows here and in neither figure above.
        "machineCpu": round(machine_cpu, 2),
        "stoppedEarly": g < total,
        "pass": g == total and p99 is not None and p99 <= GOAL_P99_MS and not astray,
    }

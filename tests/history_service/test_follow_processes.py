"""Follow across processes on one PostgreSQL, directly and through an nginx gateway: every event once, in order.

Each test runs real ``history-service serve`` processes; they need PostgreSQL
(``scripts/with-postgres``) and, for the gateway, nginx (``scripts/with-nginx``).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import sqlalchemy as sa

from codec import DeltaData, Event, TextDelta, encode
from history_client import Backoff, HistoryClient
from history_service.cli.program import main
from history_service.follow_coding import FOLLOW_CODINGS
from testing.postgres import PG_URL, empty_postgres
from testing.servers import ServerProcess, free_port, wait_healthy
from testing.wire import id_seq

pytestmark = pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set; run under scripts/with-postgres")

GATEWAY = os.environ.get("HISTORY_TEST_GATEWAY_URL")
UPSTREAMS = [int(port) for port in os.environ.get("HISTORY_TEST_UPSTREAM_PORTS", "").split(",") if port]
JSON = {"Content-Type": "application/json"}
TOTAL = 20_000


def make_events(total: int, rand: random.Random) -> list[Event]:
    events = []
    for seq in range(total):
        if rand.random() < 0.03:
            events.append(Event("note", seq, seq, {"seq": seq, "pad": "x" * rand.randint(0, 100)}))
        else:
            events.append(Event("assistant/chunk", seq, seq, DeltaData(1, 1, TextDelta(seq // 700, f" t{seq}"))))
    return events


@pytest.fixture
def pg() -> str:
    assert PG_URL
    anyio.run(empty_postgres, PG_URL)
    return PG_URL


@contextlib.contextmanager
def started_replicas(pg: str, ports: list[int]) -> Iterator[list[ServerProcess]]:
    started = [ServerProcess(pg, port=port) for port in ports]
    try:
        for server in started:
            server.start()
        yield started
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def replicas(pg: str) -> Iterator[list[ServerProcess]]:
    """Two service processes on free ports of their own."""
    with started_replicas(pg, [0, 0]) as started:
        yield started


@pytest.fixture
def gateway_replicas(pg: str) -> Iterator[list[ServerProcess]]:
    """Two service processes on the gateway's upstream ports: only the test that goes through nginx binds them,
    so no other test (on this or another xdist worker) can be holding them."""
    with _gateway_turn(), started_replicas(pg, UPSTREAMS) as started:
        yield started


@contextlib.contextmanager
def _gateway_turn() -> Iterator[None]:
    """The gateway's upstream ports are one pair: the tests that bind them take turns, on every xdist worker."""
    with open(Path(tempfile.gettempdir()) / f"history-gateway-{UPSTREAMS[0]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class Follower(threading.Thread):
    """The client SDK following one session until it has ``total`` events; exactness is the SDK's and ours."""

    def __init__(self, url: str, total: int, *, after: int | None = -1) -> None:
        super().__init__(daemon=True)
        self.url, self.total, self.after = url, total, after
        self.received: list[Event] = []
        self.error: BaseException | None = None
        self.reconnects = 0

    def run(self) -> None:
        try:
            backoff = Backoff(base=0.05, cap=0.5, max_retries=200)
            with HistoryClient(self.url, timeout=30, backoff=backoff) as client:
                for event in client.follow("s", after=self.after, on_connection=self._count):
                    self.received.append(event)
                    if event.seq == self.total - 1:
                        return
        except BaseException as exc:  # reported by the test thread
            self.error = exc

    def _count(self, report: Any) -> None:
        if type(report).__name__ == "Reconnected":
            self.reconnects += 1


def produce(urls: list[str], events: list[Event], rand: random.Random, progress: dict[str, int]) -> list[int]:
    """Append in random batches, each through the next URL in turn; a batch whose answer was lost is re-sent."""
    acknowledged = []
    clients = [httpx.Client(base_url=url, timeout=30) for url in urls]
    try:
        start, turn = 0, 0
        while start < len(events):
            batch = events[start : start + rand.randint(1, 300)]
            while True:
                client = clients[turn % len(clients)]
                turn += 1
                try:
                    response = client.post("/v1/sessions/s/events", content=encode({"events": batch}), headers=JSON)
                except httpx.TransportError:
                    time.sleep(0.05)
                    continue
                if response.status_code in (502, 503):
                    time.sleep(0.05)
                    continue
                assert response.status_code in (200, 201), response.text
                break
            acknowledged.append(batch[-1].seq)
            start += len(batch)
            progress["appended"] = start
    finally:
        for client in clients:
            client.close()
    return acknowledged


def finish(followers: list[Follower], events: list[Event]) -> None:
    for follower in followers:
        follower.join(120)
        assert not follower.is_alive(), f"a follower is stuck at {len(follower.received)} events"
        assert follower.error is None, repr(follower.error)
        assert [e.seq for e in follower.received] == list(range(len(events)))
        assert encode(follower.received) == encode(events)


def create(url: str) -> None:
    assert httpx.post(f"{url}/v1/sessions", json={"id": "s", "createdAt": 0}).status_code == 201


def test_followers_on_two_processes_get_every_event_appended_through_either(replicas: list[ServerProcess]) -> None:
    a, b = replicas
    rand = random.Random(31)
    events = make_events(TOTAL, rand)
    create(a.url)
    followers = [Follower(server.url, TOTAL) for server in (a, b, a, b)]
    for follower in followers:
        follower.start()
    produce([a.url, b.url], events, rand, {})
    finish(followers, events)


class RawFollower(threading.Thread):
    """One SSE stream read to its end, resumed from before seq 0: its frames as (event, id, data)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.frames: list[tuple[str, str | None, bytes]] = []
        self.opened = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("GET", f"{self.url}/v1/sessions/s/follow", params={"after": -1}, timeout=60) as response:
                self.opened.set()
                event, event_id = "message", None
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("id: "):
                        event_id = line[4:]
                    elif line.startswith("data: "):
                        self.frames.append((event, event_id, line[6:].encode()))
                        event, event_id = "message", None
        except BaseException as exc:  # reported by the test thread
            self.error = exc


def test_a_close_on_one_process_ends_the_others_followers_after_the_last_event(replicas: list[ServerProcess]) -> None:
    a, b = replicas
    rand = random.Random(33)
    events = make_events(3000, rand)
    create(a.url)
    followers = [RawFollower(server.url) for server in (a, b, a)]
    for follower in followers:
        follower.start()
        assert follower.opened.wait(30)
    produce([a.url, b.url], events, rand, {})
    closed = httpx.post(f"{b.url}/v1/sessions/s/close")
    assert closed.status_code == 200 and closed.json()["headSeq"] == len(events) - 1
    end = ("end", None, b'{"code":"session_closed","headSeq":%d}' % (len(events) - 1))
    for follower in followers:
        follower.join(120)
        assert not follower.is_alive(), f"a follower did not end: {len(follower.frames)} frames"
        assert follower.error is None, repr(follower.error)
        assert follower.frames[-1] == end and [f for f in follower.frames if f[0] == "end"] == [end]
        assert [id_seq(f[1] or "") for f in follower.frames[:-1]] == list(range(len(events)))
        assert [f[2] for f in follower.frames[:-1]] == [encode(event) for event in events]


def test_a_delete_on_one_process_ends_the_others_followers_and_the_id_starts_anew(
    replicas: list[ServerProcess],
) -> None:
    a, b = replicas
    rand = random.Random(34)
    events = make_events(1000, rand)
    create(a.url)
    produce([a.url, b.url], events, rand, {})
    old = httpx.get(f"{b.url}/v1/sessions/s").json()["header"]["incarnation"]
    followers = [RawFollower(server.url) for server in (b, b, a)]
    for follower in followers:
        follower.start()
        assert follower.opened.wait(30)
    assert httpx.delete(f"{a.url}/v1/sessions/s").status_code == 204
    deleted = ("error", None, b'{"code":"session_deleted"}')
    for follower in followers:
        follower.join(120)
        assert not follower.is_alive(), f"a follower did not end: {len(follower.frames)} frames"
        assert follower.error is None, repr(follower.error)
        assert follower.frames[-1] == deleted and follower.frames.count(deleted) == 1
        assert [id_seq(f[1] or "") for f in follower.frames[:-1]] == list(range(len(follower.frames) - 1))
    for path in ("/v1/sessions/s", "/v1/sessions/s/page", "/v1/sessions/s/follow"):
        assert httpx.get(f"{b.url}{path}").status_code == 404, path
    create(a.url)
    appended = httpx.post(f"{b.url}/v1/sessions/s/events", content=encode({"events": events[:3]}), headers=JSON)
    assert appended.status_code == 201, appended.text
    page = httpx.get(f"{b.url}/v1/sessions/s/page")
    assert page.headers["session-incarnation"] not in ("", old) and page.json()["toSeq"] == 3
    stale = httpx.get(f"{b.url}/v1/sessions/s/follow", headers={"Last-Event-ID": f"{old}:2"})
    assert stale.status_code == 404


def test_a_lost_listen_connection_is_reconnected_and_nothing_stays_stuck(replicas: list[ServerProcess]) -> None:
    """pg_terminate_backend on every LISTEN connection mid-stream: followers keep receiving, with no gap."""
    a, b = replicas
    rand = random.Random(32)
    events = make_events(TOTAL, rand)
    create(a.url)
    followers = [Follower(b.url, TOTAL), Follower(a.url, TOTAL)]
    for follower in followers:
        follower.start()
    progress = {"appended": 0}
    producer = threading.Thread(target=produce, args=([a.url], events, rand, progress))
    producer.start()
    engine = sa.create_engine(PG_URL or "")
    terminated = 0
    try:
        for fraction in (0.25, 0.5, 0.75):
            while progress["appended"] < TOTAL * fraction and producer.is_alive():
                time.sleep(0.01)
            with engine.begin() as conn:
                terminated += conn.execute(
                    sa.text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND query LIKE 'LISTEN %'"
                    )
                ).scalar_one()
    finally:
        engine.dispose()
        producer.join(120)
    assert terminated >= 3
    finish(followers, events)
    assert all(httpx.get(f"{server.url}/readyz").json()["notifier"] == "listening" for server in replicas)


def test_appenders_racing_on_two_processes_keep_the_log_dense(replicas: list[ServerProcess]) -> None:
    """Every acknowledged batch is stored exactly once, and a 409 loser leaves nothing behind."""
    a, b = replicas
    create(a.url)
    acknowledged: list[list[Event]] = []
    lock = threading.Lock()

    def race(url: str, writer: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            for n in range(150):
                head = client.get("/v1/sessions/s").json()["headSeq"]
                batch = [Event("w", head + 1 + k, writer, {"writer": writer, "n": n, "k": k}) for k in range(3)]
                response = client.post("/v1/sessions/s/events", content=encode({"events": batch}), headers=JSON)
                assert response.status_code in (201, 409), response.text
                if response.status_code == 201:
                    with lock:
                        acknowledged.append(batch)

    threads = [threading.Thread(target=race, args=(url, w)) for w, url in enumerate([a.url, b.url, a.url, b.url])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    with HistoryClient(a.url) as client:
        stored = list(client.iter_history("s"))
    assert [e.seq for e in stored] == list(range(len(stored)))
    assert len(stored) == 3 * len(acknowledged)
    by_seq = {e.seq: e for e in stored}
    for batch in acknowledged:
        assert [by_seq[e.seq] for e in batch] == batch


@pytest.mark.skipif(not GATEWAY, reason="HISTORY_TEST_GATEWAY_URL is not set; run under scripts/with-nginx")
def test_through_nginx_a_follower_survives_a_killed_replica(gateway_replicas: list[ServerProcess]) -> None:
    """The SDK follows through the gateway while a producer appends through it; one replica is SIGKILLed mid-stream
    and restarted later. The follower reconnects through nginx with Last-Event-ID and gets every event once."""
    assert GATEWAY
    rand = random.Random(33)
    events = make_events(TOTAL, rand)
    create(GATEWAY)
    # Round robin spreads these over both replicas, so the killed one is serving some of them.
    followers = [Follower(GATEWAY, TOTAL) for _ in range(3)] + [Follower(GATEWAY, TOTAL, after=None)]
    for follower in followers:
        follower.start()
    progress = {"appended": 0}
    producer = threading.Thread(target=produce, args=([GATEWAY], events, rand, progress))
    producer.start()
    victim = gateway_replicas[0]
    while progress["appended"] < TOTAL // 3:
        time.sleep(0.01)
    victim.stop(signal.SIGKILL)
    while progress["appended"] < 2 * TOTAL // 3:
        time.sleep(0.01)
    victim.start()
    producer.join(120)
    finish(followers[:3], events)
    # The fresh follower started from a snapshot: it gets exactly the events after its cursor.
    fresh = followers[3]
    fresh.join(120)
    assert fresh.error is None and fresh.received
    first = fresh.received[0].seq
    assert encode(fresh.received) == encode(events[first:])
    assert sum(follower.reconnects for follower in followers) >= 1


def test_workers_need_a_store_every_process_hears() -> None:
    """A memory store lives in one process: several workers on it are refused, before anything is served."""
    err = io.StringIO()
    argv = ["serve", "--workers", "2", "--store", "memory://", "--port", str(free_port())]
    status = main(argv, out=io.StringIO(), err=err)
    assert status == 1
    assert err.getvalue().splitlines()[-1] == (
        "history-service: error: --workers 2 needs a store several processes can share (SQLite or JSONL on one "
        "host, or PostgreSQL): memory:// lives in one process; run one worker"
    )


def test_two_workers_on_postgresql_serve_and_follow_across_each_other(pg: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    code = "import sys; from history_service.cli.program import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, "serve", "--workers", "2", "--store", pg, "--port", str(port)]
    env = {**os.environ, "HISTORY_PING_INTERVAL": "1"}
    quiet = subprocess.DEVNULL
    with subprocess.Popen(argv, env=env, stdout=quiet, stderr=quiet) as process:
        try:
            wait_healthy(base, process)
            rand = random.Random(34)
            events = make_events(3000, rand)
            create(base)
            followers = [Follower(base, len(events)) for _ in range(6)]
            for follower in followers:
                follower.start()
            # Separate connections land on either worker: appends and follows cross between them.
            produce([base] * 4, events, rand, {})
            finish(followers, events)
            states = {httpx.get(f"{base}/readyz").json()["notifier"] for _ in range(10)}
            assert states == {"listening"}
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


@pytest.mark.skipif(not GATEWAY, reason="HISTORY_TEST_GATEWAY_URL is not set; run under scripts/with-nginx")
@pytest.mark.parametrize("coding", FOLLOW_CODINGS)
def test_through_nginx_a_coded_follow_gets_each_frame_before_the_next_is_sent(
    gateway_replicas: list[ServerProcess], coding: str
) -> None:
    """nginx passes a coded stream through as it comes: each event's frame decodes before the next is appended."""
    assert GATEWAY
    create(GATEWAY)
    stream = zlib.decompressobj(31)
    with httpx.Client(base_url=GATEWAY, timeout=30) as client:
        headers = {"Accept-Encoding": coding, "Last-Event-ID": "-1"}
        with client.stream("GET", "/v1/sessions/s/follow", headers=headers) as response:
            assert response.headers["content-encoding"] == coding
            raw = response.iter_raw()
            pending = b""
            for seq in range(5):
                body = b'{"events":[%b]}' % encode(Event("note", seq, seq, {"n": seq}))
                assert client.post("/v1/sessions/s/events", content=body, headers=JSON).status_code == 201
                frame = b""
                while b"\nevent: event\n" not in frame:
                    while b"\n\n" not in pending:
                        pending += stream.decompress(next(raw))
                    frame, _, pending = pending.partition(b"\n\n")
                assert b":%d\nevent: event\n" % seq in frame, frame

"""Exactness across processes on the one-host stores, SQLite and JSONL (docs/protocol.md §7.6), on real servers.

Two ``history-service serve`` processes on two ports over one store stand for two workers: the
notices between them are the same, and a test knows which process each request reaches. One
pair per store serves every test that leaves the others' sessions alone; the SIGKILL test runs
``serve --workers 2``, whose supervisor restarts the worker it kills. The CLI's ``import`` and
``delete`` run in this process: a writer of the store outside both servers.
"""

from __future__ import annotations

import io
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from codec import Event, encode
from history_client import Backoff, HistoryClient
from history_service.cli.program import main
from testing.events import make_events
from testing.servers import ServerProcess
from testing.wire import id_seq
from testing.workers import connections_to, serving_pid, serving_workers

# One xdist worker for the module (under --dist loadgroup), so each store's pair of servers starts once.
pytestmark = pytest.mark.xdist_group("follow_workers")

STORES = ["sqlite", "jsonl"]
JSON = {"Content-Type": "application/json"}
TEXT = {"content-type": "text/plain"}
# A long-poll that waits longer than any bound here: only a wake-up answers it in time.
ENV = {"HISTORY_DS_LONG_POLL": "60"}
BOUND = 60
PER_WORKER = 2


def store_url(kind: str, root: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{root / 'h.db'}"
    return f"jsonl:///{root / 'logs'}" + ("?compression=zstd" if kind == "jsonl-zstd" else "")


@dataclass
class Pair:
    """Two serve processes on one store."""

    a: ServerProcess
    b: ServerProcess
    store_url: str


@pytest.fixture(scope="module", params=STORES)
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    url = store_url(request.param, tmp_path_factory.mktemp(request.param))
    a, b = ServerProcess(url, env=ENV), ServerProcess(url, env=ENV)
    try:
        a.start()
        b.start()
        yield Pair(a, b, url)
    finally:
        a.stop()
        b.stop()


def cli(*argv: str) -> str:
    err = io.StringIO()
    assert main(list(argv), out=io.StringIO(), err=err) == 0, err.getvalue()
    return err.getvalue()


def create(url: str, session_id: str, **header: Any) -> str:
    """Create a session through ``url``; returns its incarnation."""
    made = httpx.post(f"{url}/v1/sessions", json={"id": session_id, "createdAt": 1, **header})
    assert made.status_code == 201, made.text
    return str(made.json()["incarnation"])


def append(url: str, session_id: str, events: list[Event]) -> None:
    answer = httpx.post(f"{url}/v1/sessions/{session_id}/events", content=encode({"events": events}), headers=JSON)
    assert answer.status_code == 201, answer.text


class Follower(threading.Thread):
    """The SDK following one session through seq ``last``, resuming after any failure as the SDK does."""

    def __init__(self, url: str, session_id: str, last: int) -> None:
        super().__init__(daemon=True)
        self.url, self.session_id, self.last = url, session_id, last
        self.events: list[Event] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            backoff = Backoff(base=0.05, cap=0.5, max_retries=200)
            with HistoryClient(self.url, timeout=30, backoff=backoff) as client:
                for event in client.follow(self.session_id, after=-1):
                    self.events.append(event)
                    if event.seq == self.last:
                        return
        except BaseException as exc:  # reported by the test thread
            self.error = exc

    def check(self, events: list[Event]) -> None:
        self.join(BOUND * 2)
        assert not self.is_alive(), f"a follower of {self.session_id} is stuck at {len(self.events)} events"
        assert self.error is None, repr(self.error)
        assert [e.seq for e in self.events] == [e.seq for e in events]
        assert encode(self.events) == encode(events)


def sse_frames(lines: Iterator[str]) -> Iterator[tuple[str, str | None, bytes]]:
    """(event, id, data) of each frame of an SSE body's lines; a frame without data (a comment) is none."""
    fields: dict[str, str] = {}
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
            continue
        if "data" in fields:
            yield fields.get("event", "message"), fields.get("id"), fields["data"].encode()
        fields = {}


class RawFollower(threading.Thread):
    """One SSE stream of ``path`` read to its end: its frames as (event, id, data)."""

    def __init__(self, url: str, path: str) -> None:
        super().__init__(daemon=True)
        self.url, self.path = url, path
        self.frames: list[tuple[str, str | None, bytes]] = []
        self.opened = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("GET", f"{self.url}{self.path}", params={"after": -1}, timeout=BOUND) as response:
                assert response.status_code == 200, response.read()
                self.opened.set()
                self.frames.extend(sse_frames(response.iter_lines()))
        except BaseException as exc:  # reported by the test thread
            self.error = exc
            self.opened.set()

    def ended(self) -> list[tuple[str, str | None, bytes]]:
        """The frames once the stream has ended, the last one the end."""
        self.join(BOUND)
        assert not self.is_alive(), f"a follower of {self.path} did not end: {len(self.frames)} frames"
        assert self.error is None, repr(self.error)
        return self.frames


def opened(url: str, path: str) -> RawFollower:
    follower = RawFollower(url, path)
    follower.start()
    assert follower.opened.wait(BOUND) and follower.error is None, repr(follower.error)
    return follower


def produce(urls: list[str], session_id: str, events: list[Event], *, batch: int = 50) -> None:
    """Append in batches, request by request through the next URL in turn; a batch whose answer was lost
    (a reset, or a worker that is not there) is sent again, which the store takes as an idempotent re-send."""
    clients = [httpx.Client(base_url=url, timeout=30) for url in urls]
    try:
        for turn, start in enumerate(range(0, len(events), batch)):
            body = encode({"events": events[start : start + batch]})
            deadline = time.monotonic() + BOUND
            while True:
                try:
                    answer = clients[turn % len(clients)].post(
                        f"/v1/sessions/{session_id}/events", content=body, headers=JSON
                    )
                except httpx.TransportError:
                    answer = None
                if answer is not None and answer.status_code not in (502, 503):
                    assert answer.status_code in (200, 201), answer.text
                    break
                assert time.monotonic() < deadline, "an append was refused for too long"
                time.sleep(0.05)
    finally:
        for client in clients:
            client.close()


def test_followers_on_both_processes_get_every_event_once_in_order(pair: Pair, tmp_path: Path) -> None:
    a, b = pair.a, pair.b
    events = make_events(2000)
    create(a.url, "every")
    followers = [Follower(server.url, "every", len(events) - 1) for server in (a, b) * 4]
    # The log a CLI import completes: a session made through the API with its header and no events yet.
    incarnation = create(b.url, "imported")
    header = httpx.get(f"{a.url}/v1/sessions/imported").json()["header"]
    assert header["incarnation"] == incarnation
    imported = make_events(300)
    log = tmp_path / "imported.jsonl"
    log.write_bytes(b"\n".join([encode(header), *(encode(event) for event in imported)]) + b"\n")
    importers = [Follower(server.url, "imported", len(imported) - 1) for server in (a, b, a, b)]
    for follower in followers + importers:
        follower.start()
    produce([a.url, b.url], "every", events)
    cli("import", "--store", pair.store_url, str(log))
    for follower in followers:
        follower.check(events)
    for follower in importers:
        follower.check(imported)


def test_a_close_and_a_delete_through_one_end_the_followers_on_the_other(pair: Pair) -> None:
    a, b = pair.a, pair.b
    events = make_events(120)
    create(a.url, "closing")
    followers = [opened(b.url, "/v1/sessions/closing/follow") for _ in range(2)]
    produce([a.url, b.url], "closing", events, batch=7)
    closed = httpx.post(f"{a.url}/v1/sessions/closing/close")
    assert closed.status_code == 200 and closed.json()["headSeq"] == len(events) - 1
    end = ("end", None, b'{"code":"session_closed","headSeq":%d}' % (len(events) - 1))
    for follower in followers:
        frames = follower.ended()
        assert frames[-1] == end and [f for f in frames if f[0] == "end"] == [end]
        assert [id_seq(f[1] or "") for f in frames[:-1]] == list(range(len(events)))
        assert [f[2] for f in frames[:-1]] == [encode(event) for event in events]

    create(a.url, "tree")
    create(a.url, "tree.kid", parentSession="tree", origin="subagent")
    append(b.url, "tree", events[:5])
    append(b.url, "tree.kid", events[:3])
    watched = [
        opened(b.url, "/v1/sessions/tree/follow"),
        opened(b.url, "/v1/sessions/tree/subagents/tree.kid/follow"),
    ]
    assert httpx.delete(f"{a.url}/v1/sessions/tree").status_code == 204
    deleted = ("error", None, b'{"code":"session_deleted"}')
    for follower, count in zip(watched, (5, 3), strict=True):
        frames = follower.ended()
        assert frames[-1] == deleted and frames.count(deleted) == 1
        assert [id_seq(f[1] or "") for f in frames[:-1]] == list(range(count))
    assert httpx.get(f"{b.url}/v1/sessions/tree").status_code == 404


def cached_pages(url: str) -> float:
    """Pages ``url`` has served from its cache, from its /metrics."""
    lines = httpx.get(f"{url}/metrics").text.splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("history_pages_total{") and 'source="cache"' in line
    )


def kept_page(url: str, session_id: str, incarnation: str) -> httpx.Response:
    return httpx.get(f"{url}/v1/sessions/{session_id}/page", params={"through": 9, "incarnation": incarnation})


@pytest.mark.parametrize("deleter", ["other process", "cli delete"])
def test_a_kept_page_is_never_served_after_a_delete_elsewhere(pair: Pair, deleter: str) -> None:
    a, b = pair.a, pair.b
    session_id = f"kept-{deleter.replace(' ', '-')}"
    incarnation = create(a.url, session_id)
    append(a.url, session_id, make_events(20))
    before = cached_pages(a.url)
    assert kept_page(a.url, session_id, incarnation).status_code == 200
    again = kept_page(a.url, session_id, incarnation)
    assert again.status_code == 200 and cached_pages(a.url) > before, "the second read was not from the cache"
    if deleter == "other process":
        assert httpx.delete(f"{b.url}/v1/sessions/{session_id}").status_code == 204
    else:
        cli("delete", "--store", pair.store_url, session_id, "--yes")
    # At once: no wait between the delete's answer and this read.
    gone = kept_page(a.url, session_id, incarnation)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found"


def data_events(lines: Iterator[str]) -> Iterator[str]:
    return (data.decode() for event, _, data in sse_frames(lines) if event == "data")


def long_poll(http: httpx.Client, path: str, offset: str, answers: list[httpx.Response]) -> threading.Thread:
    poller = threading.Thread(
        target=lambda: answers.append(http.get(path, params={"offset": offset, "live": "long-poll"}))
    )
    poller.start()
    return poller


def test_ds_long_poll_and_sse_on_one_process_see_an_append_through_the_other(pair: Pair) -> None:
    a_url, b_url = pair.a.url, pair.b.url
    with httpx.Client(base_url=a_url, timeout=BOUND) as a, httpx.Client(base_url=b_url, timeout=BOUND) as b:
        create(b_url, "ds")
        path = "/ds/v1/session/ds"
        tail = a.get(path, params={"offset": "-1"}).headers["stream-next-offset"]
        polled: list[httpx.Response] = []
        poller = long_poll(a, path, tail, polled)
        first, second = make_events(2)
        append(b_url, "ds", [first])
        poller.join(BOUND)
        assert polled and polled[0].status_code == 200, polled
        assert json.loads(polled[0].text) == [json.loads(encode(first))]
        offset = polled[0].headers["stream-next-offset"]
        with a.stream("GET", path, params={"offset": offset, "live": "sse"}) as sse:
            events = data_events(sse.iter_lines())
            append(b_url, "ds", [second])
            assert json.loads(next(events)) == [json.loads(encode(second))]
        if pair.store_url.startswith("jsonl:"):
            return  # JSONL keeps no generic streams
        stream = "/ds/v1/stream/shared"
        tail = a.put(stream, headers=TEXT).headers["stream-next-offset"]
        polled.clear()
        poller = long_poll(a, stream, tail, polled)
        assert b.post(stream, content=b"one", headers=TEXT).status_code == 204
        poller.join(BOUND)
        assert polled and polled[0].status_code == 200 and polled[0].text == "one"
        with a.stream("GET", stream, params={"offset": polled[0].headers["stream-next-offset"], "live": "sse"}) as sse:
            events = data_events(sse.iter_lines())
            assert b.post(stream, content=b"two", headers=TEXT).status_code == 204
            assert next(events) == "two"


def ready(url: str) -> dict[str, Any]:
    """The /readyz body once it answers 200."""
    deadline = time.monotonic() + BOUND
    while (answer := httpx.get(f"{url}/readyz")).status_code != 200:
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.05)
    body: dict[str, Any] = answer.json()
    return body


def test_readyz_reports_the_notifier_listening_on_both(pair: Pair) -> None:
    assert [ready(server.url)["notifier"] for server in (pair.a, pair.b)] == ["listening", "listening"]


def placed(port: int, workers: list[int], count: int) -> Counter[int]:
    """Which worker serves each of the ``count`` connections to ``port``, once all of them are open."""
    deadline = time.monotonic() + BOUND
    while True:
        spread = Counter(pid for client in connections_to(port) if (pid := serving_pid(client, workers)))
        if spread.total() >= count:
            return spread
        assert time.monotonic() < deadline, f"{count} connections expected, found {spread}"
        time.sleep(0.02)


def follow_on_each(server: ServerProcess, workers: list[int], session_id: str, last: int) -> list[Follower]:
    """At least ``PER_WORKER`` followers on each worker. The kernel gives a connection to whichever worker accepts
    first, so a few are opened at a time; if one worker still has too few, the others are stopped while the last
    few connect (briefly: the supervisor restarts a worker that misses its 5 s health check)."""
    followers: list[Follower] = []
    spread: Counter[int] = Counter()

    def add(count: int) -> Counter[int]:
        batch = [Follower(server.url, session_id, last) for _ in range(count)]
        for follower in batch:
            follower.start()
        followers.extend(batch)
        return placed(server.port, workers, len(followers))

    for _ in range(4):
        if min(spread[pid] for pid in workers) >= PER_WORKER:
            return followers
        spread = add(2 * PER_WORKER)
    for worker in workers:
        if spread[worker] >= PER_WORKER:
            continue
        others = [pid for pid in workers if pid != worker]
        for pid in others:
            os.kill(pid, signal.SIGSTOP)
        try:
            spread = add(PER_WORKER - spread[worker])
        finally:
            for pid in others:
                os.kill(pid, signal.SIGCONT)
    assert min(spread[pid] for pid in workers) >= PER_WORKER, spread
    return followers


@pytest.mark.parametrize("kind", ["sqlite", "jsonl-zstd"])
def test_a_worker_killed_mid_stream_loses_and_duplicates_nothing(kind: str, tmp_path: Path) -> None:
    server = ServerProcess(store_url(kind, tmp_path))
    server.start("--workers", "2")
    try:
        assert server.process is not None
        workers = serving_workers(server.port, server.process.pid, 2)
        events = make_events(3000)
        create(server.url, "s")
        followers = follow_on_each(server, workers, "s", len(events) - 1)
        # Separate connections land on either worker: appends cross between them, before and after the kill.
        produce([server.url] * 3, "s", events[:1000])
        victim = workers[0]
        os.kill(victim, signal.SIGKILL)
        produce([server.url] * 3, "s", events[1000:2000])
        assert victim not in serving_workers(server.port, server.process.pid, 2, without=[victim])
        produce([server.url] * 3, "s", events[2000:])
        for follower in followers:
            follower.check(events)
        assert {ready(server.url)["notifier"] for _ in range(6)} == {"listening"}
    finally:
        server.stop()

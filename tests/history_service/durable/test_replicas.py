"""Durable Streams across two server processes on one PostgreSQL database (docs/protocol.md §13.4).

A long-poll and an SSE reader on A see the appends made through B, to a generic stream and to
a session read as a stream: B's write sends a notice at its commit, and A wakes its readers.
A subscription is the store's: made through A, it is woken by B's appends and served by both.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import anyio
import httpx
import pytest

from testing.postgres import PG_URL, empty_postgres
from testing.servers import ServerProcess

pytestmark = pytest.mark.skipif(PG_URL is None, reason="HISTORY_TEST_PG_URL is not set (scripts/with-postgres sets it)")

TEXT = {"content-type": "text/plain"}


@pytest.fixture
def replicas() -> Iterator[tuple[str, str]]:
    assert PG_URL is not None
    anyio.run(empty_postgres, PG_URL)
    # A long-poll that waits longer than the test's bound: only a wake-up can answer it in time.
    a = ServerProcess(PG_URL, env={"HISTORY_DS_LONG_POLL": "60"})
    b = ServerProcess(PG_URL, env={"HISTORY_DS_LONG_POLL": "60"})
    a.start()
    b.start()
    try:
        yield a.url, b.url
    finally:
        a.stop()
        b.stop()


def data_events(lines: Iterator[str]) -> Iterator[str]:
    kind = ""
    for line in lines:
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:") and kind == "data":
            yield line[5:]


def test_readers_on_one_replica_see_appends_made_through_the_other(replicas: tuple[str, str]) -> None:
    a_url, b_url = replicas
    with httpx.Client(base_url=a_url, timeout=20) as a, httpx.Client(base_url=b_url, timeout=20) as b:
        stream = "/ds/v1/stream/shared"
        tail = a.put(stream, headers=TEXT).headers["stream-next-offset"]
        polled: list[httpx.Response] = []
        poller = threading.Thread(
            target=lambda: polled.append(a.get(stream, params={"offset": tail, "live": "long-poll"}))
        )
        poller.start()
        assert b.post(stream, content=b"one", headers=TEXT).status_code == 204
        poller.join(20)
        assert polled and polled[0].status_code == 200 and polled[0].text == "one"
        with a.stream("GET", stream, params={"offset": polled[0].headers["stream-next-offset"], "live": "sse"}) as sse:
            events = data_events(sse.iter_lines())
            assert b.post(stream, content=b"two", headers=TEXT).status_code == 204
            assert next(events) == "two"

        assert b.post("/v1/sessions", json={"id": "across", "createdAt": 1}).status_code == 201
        event = {"type": "user/message", "seq": 0, "time": 2, "data": {"content": []}}
        with a.stream("GET", "/ds/v1/session/across", params={"offset": "-1", "live": "sse"}) as sse:
            events = data_events(sse.iter_lines())
            assert b.post("/v1/sessions/across/events", json={"events": [event]}).status_code == 201
            assert json.loads(next(events)) == [event]


def test_a_subscription_made_through_one_replica_is_woken_by_appends_through_the_other(
    replicas: tuple[str, str],
) -> None:
    """The subscription is the store's: B's append wakes it, B claims the wake, A takes its ack (§13.6)."""
    a_url, b_url = replicas
    with httpx.Client(base_url=a_url, timeout=20) as a, httpx.Client(base_url=b_url, timeout=20) as b:
        assert a.put("/ds/v1/stream/wakes", json=[]).status_code == 201
        body = {"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wakes", "lease_ttl_ms": 60_000}
        assert a.put("/ds/v1/stream/__ds/subscriptions/p1", json=body).status_code == 201
        assert b.put("/ds/v1/stream/jobs/x", json={"n": 1}).status_code == 201

        # Only a wake opened for B's append writes this event: a claim would open one itself.
        events = wake_events(b)
        assert [(e["subscription_id"], e["stream"]) for e in events] == [("p1", "jobs/x")]

        claimed = b.post("/ds/v1/stream/__ds/subscriptions/p1/claim", json={"worker": "w1"})
        assert claimed.status_code == 200, claimed.text
        wake = claimed.json()
        acks = [{"stream": s["path"], "offset": s["tail_offset"]} for s in wake["streams"]]
        done = {"wake_id": wake["wake_id"], "generation": wake["generation"], "acks": acks, "done": True}
        auth = {"Authorization": f"Bearer {wake['token']}"}
        acked = a.post("/ds/v1/stream/__ds/subscriptions/p1/ack", json=done, headers=auth)
        assert acked.status_code == 200 and acked.json() == {"ok": True, "next_wake": False}
        streams = b.get("/ds/v1/stream/__ds/subscriptions/p1").json()["streams"]
        assert [(s["path"], s["acked_offset"]) for s in streams] == [("jobs/x", acks[0]["offset"])]


def wake_events(client: httpx.Client) -> list[dict[str, object]]:
    """The wake stream's events once it has any; fails after a bound."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        events: list[dict[str, object]] = client.get("/ds/v1/stream/wakes", params={"offset": "-1"}).json()
        if events:
            return events
        time.sleep(0.05)
    raise AssertionError("no wake event within 20 s")

"""Durable Streams across two server processes on one PostgreSQL database (docs/protocol.md §13.4).

A long-poll and an SSE reader on A see the appends made through B, to a generic stream and to
a session read as a stream: B's write sends a notice at its commit, and A wakes its readers.
"""

from __future__ import annotations

import json
import threading
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

"""session.follow against a real uvicorn server on 127.0.0.1: exact, in order, once."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from codec import DeltaData, Event, TextDelta, check_page, decode_page, encode, iter_page_events
from history_service.settings import Settings
from testing.servers import ServerProcess, serve_in_thread
from testing.wire import id_seq

pytestmark = pytest.mark.anyio

JSON = {"Content-Type": "application/json"}

TOTAL = 20_000


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    settings = Settings(store_url=f"sqlite:///{tmp_path / 'live.db'}", ping_interval=0.5, follow_buffer=512)
    with serve_in_thread(settings) as running:
        yield running.url


def make_events(rand: random.Random, *, pad: int = 0) -> list[Event]:
    """Mostly text deltas (so snapshots carry rows), with ordinary events between runs."""
    events = []
    for seq in range(TOTAL):
        if rand.random() < 0.05:
            events.append(Event("note", seq, seq, {"seq": seq, "pad": "x" * rand.randint(0, 400)}))
        else:
            text = f"t{seq}" + "y" * pad
            events.append(Event("assistant/chunk", seq, seq, DeltaData(1, 1, TextDelta(seq // 1000, text))))
    return events


async def produce(base: str, events: list[Event], rand: random.Random, progress: dict[str, int]) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        start = 0
        while start < len(events):
            size = rand.randint(1, 300)
            response = await client.post(
                "/v1/sessions/live/events", content=encode({"events": events[start : start + size]}), headers=JSON
            )
            assert response.status_code == 201, response.text
            start = min(start + size, len(events))
            progress["appended"] = start


async def frames(response: httpx.Response) -> AsyncIterator[tuple[str, int | None, Any]]:
    event, event_id = "message", None
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("id: "):
            event_id = id_seq(line[4:])
        elif line.startswith("data: "):
            yield event, event_id, json.loads(line[6:])
            event, event_id = "message", None


def snapshot_events(data: dict[str, Any]) -> list[Event]:
    page = {key: data[key] for key in ("records", "hasMore", "fromSeq", "toSeq")}
    return list(iter_page_events(check_page(decode_page(encode(page))).records))


async def create_session(base: str) -> None:
    async with httpx.AsyncClient(base_url=base) as client:
        response = await client.post("/v1/sessions", json={"id": "live", "createdAt": 0})
        assert response.status_code == 201


async def test_a_follower_joining_mid_stream_gets_every_later_seq_once(server: str) -> None:
    rand = random.Random(11)
    events = make_events(rand)
    await create_session(server)
    progress = {"appended": 0}
    received: list[Event] = []
    async with anyio.create_task_group() as group:
        group.start_soon(produce, server, events, rand, progress)
        while progress["appended"] < 3000:
            await anyio.sleep(0.01)
        async with httpx.AsyncClient(base_url=server, timeout=60) as client:
            async with client.stream("GET", "/v1/sessions/live/follow") as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                assert response.headers["x-accel-buffering"] == "no"
                stream = frames(response)
                kind, cursor, snapshot = await anext(stream)
                assert kind == "snapshot" and cursor == snapshot["cursor"] >= 2999
                assert snapshot_events(snapshot)[-1].seq == cursor
                async for kind, seq, data in stream:
                    assert kind == "event" and seq == data["seq"]
                    received.append(Event(data["type"], data["seq"], data["time"], data["data"]))
                    if seq == TOTAL - 1:
                        break
    assert cursor is not None
    assert [e.seq for e in received] == list(range(cursor + 1, TOTAL))
    assert encode(received) == encode(events[cursor + 1 :])


async def test_a_follower_that_keeps_dropping_resumes_to_the_exact_log(server: str) -> None:
    rand = random.Random(12)
    events = make_events(rand)
    await create_session(server)
    progress = {"appended": 0}
    received: list[Event] = []
    reconnects = 0
    last: int | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(produce, server, events, rand, progress)
        async with httpx.AsyncClient(base_url=server, timeout=60) as client:
            while last != TOTAL - 1:
                headers = {} if last is None else {"Last-Event-ID": str(last)}
                budget = rand.randint(1, 2500)
                async with client.stream("GET", "/v1/sessions/live/follow", headers=headers) as response:
                    async for kind, seq, data in frames(response):
                        if kind == "snapshot":
                            assert last is None and seq == data["cursor"]
                            received.extend(snapshot_events(data))
                        else:
                            assert seq == data["seq"]
                            received.append(Event(data["type"], data["seq"], data["time"], data["data"]))
                        last = seq
                        budget -= 1
                        if budget <= 0 or last == TOTAL - 1:
                            break
                reconnects += 1
    assert reconnects > 3
    assert [e.seq for e in received] == list(range(TOTAL))
    assert encode(received) == encode(events)


async def test_a_stalled_follower_holds_up_no_one_and_still_ends_complete(server: str) -> None:
    rand = random.Random(13)
    # About 30 MB of frames: far more than loopback socket buffers hold, so the server must wait on this reader.
    events = make_events(rand, pad=1500)
    await create_session(server)
    host, port = server.removeprefix("http://").split(":")
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect((host, int(port)))
    stalled.sendall(b"GET /v1/sessions/live/follow?after=-1 HTTP/1.1\r\nHost: x\r\n\r\n")
    progress = {"appended": 0}
    live: list[int] = []
    async with anyio.create_task_group() as group:
        group.start_soon(produce, server, events, rand, progress)
        async with httpx.AsyncClient(base_url=server, timeout=60) as client:
            async with client.stream("GET", "/v1/sessions/live/follow?after=-1") as response:
                async for _, seq, _ in frames(response):
                    live.append(seq)  # type: ignore[arg-type]
                    if seq == TOTAL - 1:
                        break
    # The producer and the other follower finished while this one has read nothing.
    assert progress["appended"] == TOTAL and live == list(range(TOTAL))
    buffer = b""
    seqs: list[int] = []
    stalled.settimeout(30)
    while not seqs or seqs[-1] != TOTAL - 1:
        chunk = stalled.recv(1 << 16)
        assert chunk, "the stalled follower's stream ended early"
        buffer += chunk
        *complete, buffer = buffer.split(b"\n\n")
        seqs.extend(
            id_seq(frame.split(b"id: ", 1)[1].split(b"\n", 1)[0])
            for frame in complete
            if b"\nid: " in frame or frame.startswith(b"id: ")
        )
    stalled.close()
    assert seqs == list(range(TOTAL))


def test_follow_streams_past_their_cap_are_refused_and_health_always_answers(tmp_path: Path) -> None:
    """The server's own connection limit is 4: two streams and the probes' connection leave one to spare."""
    env = {"HISTORY_LIMIT_CONCURRENCY": "4", "HISTORY_MAX_FOLLOWERS": "2"}
    running = ServerProcess(f"sqlite:///{tmp_path / 'cap.db'}", env=env)
    running.start()
    with contextlib.ExitStack() as stack, httpx.Client(base_url=running.url, timeout=30) as client:
        stack.callback(running.stop)
        assert client.post("/v1/sessions", json={"id": "s", "createdAt": 1}).status_code == 201
        with client.stream("GET", "/v1/sessions/s/follow") as one, client.stream("GET", "/v1/sessions/s/follow") as two:
            assert one.status_code == two.status_code == 200
            # As a stream: a follow the server wrongly admits must fail here, not hang reading pings.
            with client.stream("GET", "/v1/sessions/s/follow") as refused:
                assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
                assert json.loads(refused.read())["error"]["code"] == "overloaded"
            for probe in ("/healthz", "/readyz", "/metrics"):
                assert client.get(probe).status_code == 200, probe
        # A stream that ended gives its place back.
        for _ in range(100):
            with client.stream("GET", "/v1/sessions/s/follow") as again:
                if again.status_code == 200:
                    break
            time.sleep(0.05)
        assert again.status_code == 200


async def test_a_close_ends_every_follower_after_the_last_event(server: str) -> None:
    """Followers open before the close get every event, then the end frame, and the stream ends by itself."""
    events = make_events(random.Random(5))[:500]
    await create_session(server)

    async def follow(path: str, seen: list[tuple[str, int | None, Any]], opened: anyio.Event) -> None:
        async with httpx.AsyncClient(base_url=server, timeout=60) as client:
            async with client.stream("GET", path) as response:
                async for frame in frames(response):
                    seen.append(frame)
                    opened.set()
        seen.append(("closed by the server", None, None))

    live: list[tuple[str, int | None, Any]] = []
    opened = anyio.Event()
    async with httpx.AsyncClient(base_url=server, timeout=60) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(follow, "/v1/sessions/live/follow", live, opened)
            await opened.wait()
            for start in range(0, len(events), 50):
                batch = encode({"events": events[start : start + 50]})
                assert (await client.post("/v1/sessions/live/events", content=batch, headers=JSON)).status_code == 201
            closed = await client.post("/v1/sessions/live/close")
            assert closed.status_code == 200 and closed.json()["headSeq"] == 499
            closed_at = closed.json()["closedAt"]
        again = await client.post("/v1/sessions/live/close")
        assert again.json() == {"headSeq": 499, "closedAt": closed_at}
        refused = await client.post("/v1/sessions/live/events", content=encode({"events": [events[0]]}), headers=JSON)
        assert refused.status_code == 200  # an exact re-send
        more = Event("note", 500, 500, {})
        refused = await client.post("/v1/sessions/live/events", content=encode({"events": [more]}), headers=JSON)
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "session_closed"
        assert refused.json()["error"]["headSeq"] == 499
        header = (await client.get("/v1/sessions/live")).json()["header"]
        assert header["closedAt"] == closed_at
    end = ("end", None, {"code": "session_closed", "headSeq": 499})
    assert live[0][0] == "snapshot" and live[-2:] == [end, ("closed by the server", None, None)]
    assert [seq for kind, seq, _ in live[1:-2]] == list(range(live[0][1] + 1, 500))  # type: ignore[operator]

    fresh: list[tuple[str, int | None, Any]] = []
    resumed: list[tuple[str, int | None, Any]] = []
    await follow("/v1/sessions/live/follow", fresh, anyio.Event())
    await follow("/v1/sessions/live/follow?after=489", resumed, anyio.Event())
    assert fresh[0][0] == "snapshot" and fresh[0][2]["header"]["closedAt"] == closed_at and fresh[1:] == live[-2:]
    assert [seq for _, seq, _ in resumed[:-2]] == list(range(490, 500)) and resumed[-2:] == live[-2:]


async def test_a_closed_sessions_newest_page_is_the_page_through_its_head_with_a_stable_etag(server: str) -> None:
    await create_session(server)
    events = make_events(random.Random(8))[:40]
    async with httpx.AsyncClient(base_url=server, timeout=60) as client:
        appended = await client.post("/v1/sessions/live/events", content=encode({"events": events}), headers=JSON)
        assert appended.status_code == 201
        open_page = await client.get("/v1/sessions/live/page")
        assert "etag" not in open_page.headers and open_page.headers["cache-control"] == "no-cache"
        assert (await client.post("/v1/sessions/live/close")).status_code == 200
        newest = await client.get("/v1/sessions/live/page")
        through = await client.get("/v1/sessions/live/page", params={"through": 39})
        assert newest.content == through.content == open_page.content
        assert newest.headers["etag"] == through.headers["etag"]
        assert newest.headers["cache-control"] == "private, no-cache"
        again = await client.get("/v1/sessions/live/page", headers={"If-None-Match": newest.headers["etag"]})
        assert again.status_code == 304


async def test_a_delete_ends_every_follower_and_no_resume_reaches_the_id_created_again(server: str) -> None:
    """Open followers get `session_deleted` and the stream ends; the old cursor never resumes into the new session."""
    events = make_events(random.Random(9))[:300]
    await create_session(server)

    async def follow(path: str, seen: list[tuple[str, int | None, Any]], opened: anyio.Event, **headers: str) -> None:
        async with httpx.AsyncClient(base_url=server, timeout=60) as client:
            async with client.stream("GET", path, headers=headers) as response:
                async for frame in frames(response):
                    seen.append(frame)
                    opened.set()
        seen.append(("closed by the server", None, None))

    fresh: list[tuple[str, int | None, Any]] = []
    resumed: list[tuple[str, int | None, Any]] = []
    async with httpx.AsyncClient(base_url=server, timeout=60) as client:
        batch = encode({"events": events[:200]})
        assert (await client.post("/v1/sessions/live/events", content=batch, headers=JSON)).status_code == 201
        old = (await client.get("/v1/sessions/live")).json()["header"]["incarnation"]
        async with anyio.create_task_group() as group:
            opened = [anyio.Event(), anyio.Event()]
            group.start_soon(follow, "/v1/sessions/live/follow", fresh, opened[0])
            group.start_soon(follow, "/v1/sessions/live/follow?after=49", resumed, opened[1])
            for event in opened:
                await event.wait()
            assert (await client.delete("/v1/sessions/live")).status_code == 204
        deleted = ("error", None, {"code": "session_deleted"})
        assert fresh[0][0] == "snapshot" and fresh[-2:] == [deleted, ("closed by the server", None, None)]
        assert resumed[-2:] == fresh[-2:] and all(kind == "event" for kind, _, _ in resumed[:-2])

        created = await client.post("/v1/sessions", json={"id": "live", "createdAt": 0})
        assert created.status_code == 201 and created.json()["incarnation"] != old
        batch = encode({"events": events[:250]})
        assert (await client.post("/v1/sessions/live/events", content=batch, headers=JSON)).status_code == 201
        stale = await client.get("/v1/sessions/live/follow", headers={"Last-Event-ID": f"{old}:199"})
        assert stale.status_code == 404 and stale.json()["error"]["code"] == "session_not_found"
    anew: list[tuple[str, int | None, Any]] = []
    await_new = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(follow, "/v1/sessions/live/follow", anew, await_new)
        await await_new.wait()
        async with httpx.AsyncClient(base_url=server, timeout=60) as client:
            assert (await client.post("/v1/sessions/live/close")).status_code == 200
    assert anew[0][0] == "snapshot" and anew[0][1] == 249
    assert anew[0][2]["header"]["incarnation"] == created.json()["incarnation"]

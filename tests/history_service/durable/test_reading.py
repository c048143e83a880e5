"""Durable Streams reads against a real uvicorn server on 127.0.0.1 (docs/protocol.md §13.4): long-poll and SSE."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import AsyncGenerator, Iterator
from urllib.parse import urlsplit

import httpx
import msgspec
import pytest

from codec import PIECE_BYTES
from history_service.budget import ByteBudget
from history_service.durable.reading import _held
from history_service.settings import Settings
from persistence import MemoryStore
from testing.servers import serve_in_thread

FAST = Settings(ds_long_poll=0.3, max_followers=3, limit_concurrency=8)


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event, data) pairs from an SSE body's lines, data lines joined by newlines."""
    kind, data = "", []
    for line in lines:
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[6:] if line.startswith("data: ") else line[5:])
        elif line == "" and kind:
            yield kind, "\n".join(data)
            kind, data = "", []


def test_sse_pairs_each_data_event_with_a_control_and_keeps_an_idle_stream_alive() -> None:
    with serve_in_thread(FAST, store=MemoryStore()) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        url = "/ds/v1/stream/paired"
        assert http.put(url, content=b"[1,2]", headers={"content-type": "application/json"}).status_code == 201
        assert http.post(url, content=b"3", headers={"content-type": "application/json"}).status_code == 204
        seen: list[tuple[str, str]] = []
        with http.stream("GET", url, params={"offset": "-1", "live": "sse"}) as response:
            assert response.headers["content-type"] == "text/event-stream"
            for event in sse_events(response.iter_lines()):
                seen.append(event)
                if len(seen) == 6:
                    break
        kinds = [kind for kind, _ in seen]
        assert kinds == ["data", "control", "data", "control", "control", "control"]
        assert [json.loads(seen[0][1]), json.loads(seen[2][1])] == [[1, 2], [3]]
        first, last = json.loads(seen[1][1]), json.loads(seen[3][1])
        assert first["streamNextOffset"] < last["streamNextOffset"] and "upToDate" not in first
        assert last["upToDate"] is True
        # Idle: keep-alive controls at the same offset, still up to date.
        assert all(json.loads(data) | {"streamCursor": ""} == last | {"streamCursor": ""} for _, data in seen[4:])


def test_a_long_poll_wakes_for_an_append_and_sse_ends_when_the_stream_closes() -> None:
    with serve_in_thread(Settings(ds_long_poll=30), store=MemoryStore()) as server:
        with httpx.Client(base_url=server.url, timeout=20) as http:
            url = "/ds/v1/stream/woken"
            tail = http.put(url, headers={"content-type": "text/plain"}).headers["stream-next-offset"]
            answers: list[httpx.Response] = []
            poller = threading.Thread(
                target=lambda: answers.append(http.get(url, params={"offset": tail, "live": "long-poll"}))
            )
            poller.start()
            # The append lands before or during the wait: either way the poll answers with it.
            assert http.post(url, content=b"hi", headers={"content-type": "text/plain"}).status_code == 204
            poller.join(20)
            assert answers and answers[0].status_code == 200 and answers[0].text == "hi"
            with http.stream("GET", url, params={"offset": tail, "live": "sse"}) as response:
                events = sse_events(response.iter_lines())
                assert next(events) == ("data", "hi")
                assert json.loads(next(events)[1])["upToDate"] is True
                closed = http.post(url, headers={"stream-closed": "true"})
                assert closed.status_code == 204 and closed.headers["stream-closed"] == "true"
                kind, data = next(events)
                assert kind == "control" and json.loads(data)["streamClosed"] is True
                assert list(events) == []


def test_live_reads_count_as_follow_streams_and_are_refused_past_the_cap() -> None:
    with serve_in_thread(FAST, store=MemoryStore()) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        url = "/ds/v1/stream/capped"
        http.put(url, headers={"content-type": "text/plain"})
        with (
            http.stream("GET", url, params={"offset": "-1", "live": "sse"}) as a,
            http.stream("GET", url, params={"offset": "-1", "live": "sse"}) as b,
            http.stream("GET", url, params={"offset": "-1", "live": "sse"}) as c,
        ):
            assert {a.status_code, b.status_code, c.status_code} == {200}
            refused = http.get(url, params={"offset": "-1", "live": "long-poll"})
            assert refused.status_code == 503 and refused.headers["retry-after"]
        # Once they end, their places are free again (the release runs just after each response).
        for _ in range(50):
            if http.get(url, params={"offset": "-1", "live": "long-poll"}).status_code != 503:
                break
        else:
            pytest.fail("the live reads' places were never given back")


def test_a_session_read_live_wakes_for_appends_through_the_api_and_ends_at_close() -> None:
    with serve_in_thread(FAST, store=MemoryStore()) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        assert http.post("/v1/sessions", json={"id": "live", "createdAt": 1}).status_code == 201
        event = {"type": "user/message", "seq": 0, "time": 2, "data": {"content": []}}
        with http.stream("GET", "/ds/v1/session/live", params={"offset": "-1", "live": "sse"}) as response:
            events = sse_events(response.iter_lines())
            assert json.loads(next(events)[1])["upToDate"] is True
            assert http.post("/v1/sessions/live/events", json={"events": [event]}).status_code == 201
            kind, data = next(events)
            assert kind == "data" and json.loads(data) == [event]
            control = json.loads(next(events)[1])
            assert control["streamNextOffset"].endswith("_0000000000000001")
            assert http.post("/v1/sessions/live/close").status_code == 200
            closing = [json.loads(data) for kind, data in events if kind == "control"]
            assert closing[-1]["streamClosed"] is True


def test_an_offset_must_be_ours_and_live_modes_need_one() -> None:
    with serve_in_thread(FAST, store=MemoryStore()) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        url = "/ds/v1/stream/strict"
        life = http.put(url, content=b"x", headers={"content-type": "text/plain"}).headers["stream-next-offset"][:16]
        for params in ({"offset": "1"}, {"offset": "../x"}, {"offset": ""}, {"live": "sse"}, {"live": "poll"}):
            response = http.get(url, params=params)
            assert response.status_code == 400, params
            assert response.headers["x-content-type-options"] == "nosniff"
        twice = http.get(f"{url}?offset=-1&offset=-1")
        assert twice.status_code == 400
        # Past the tail is no offset the stream gave (docs/protocol.md §13.3).
        beyond = http.get(url, params={"offset": msgspec.json.decode(f'"{life}_0000000000000099"'.encode())})
        assert beyond.status_code == 400


def test_a_catch_up_read_of_a_large_append_answers_one_piece_at_a_time() -> None:
    body = bytes(range(256)) * (3 * PIECE_BYTES // 256) + b"tail"
    with serve_in_thread(FAST, store=MemoryStore()) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        url = "/ds/v1/stream/large"
        http.put(url, headers={"content-type": "application/octet-stream"})
        assert http.post(url, content=body, headers={"content-type": "application/octet-stream"}).status_code == 204
        got, offset, answers = b"", "-1", []
        for _ in range(10):
            answer = http.get(url, params={"offset": offset})
            assert answer.status_code == 200
            answers.append(len(answer.content))
            got += answer.content
            offset = answer.headers["stream-next-offset"]
            if answer.headers.get("stream-up-to-date") == "true":
                break
        # Each answer is one piece at most (HISTORY_DS_READ_BYTES is a piece), and they join to the append.
        assert answers == [PIECE_BYTES, PIECE_BYTES, PIECE_BYTES, 4]
        assert got == body


def _stalled_sse(url: str, path: str) -> socket.socket:
    """An SSE request on a socket with a small receive buffer that is never read."""
    parts = urlsplit(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname, parts.port))
    sock.sendall(f"GET {path}?offset=-1&live=sse HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
    return sock


def test_an_sse_reader_that_does_not_read_holds_its_events_in_the_budget_until_it_goes() -> None:
    # Two events of a piece (about 1.4 MB each in base64) fit in the budget; a third megabyte does not.
    settings = Settings(ds_long_poll=5, max_followers=3, limit_concurrency=8, inflight_bytes=3 * PIECE_BYTES)
    server_in_thread = serve_in_thread(settings, store=MemoryStore())
    with server_in_thread as server, httpx.Client(base_url=server.url, timeout=30) as http:
        url = "/ds/v1/stream/stalled"
        http.put(url, headers={"content-type": "application/octet-stream"})
        http.post(url, content=b"\x01" * (8 * PIECE_BYTES), headers={"content-type": "application/octet-stream"})
        stalled = _stalled_sse(server.url, url)
        try:
            # A read of a piece must wait for room while the stalled reader holds its events, then is refused.
            for _ in range(100):
                answer = http.get(url, params={"offset": "-1"})
                if answer.status_code == 503:
                    break
                assert answer.status_code == 200
            else:
                pytest.fail("a reader that does not read held nothing in the budget of bytes in flight")
            assert answer.headers["retry-after"]
            with http.stream("GET", url, params={"offset": "-1", "live": "sse"}) as another:
                assert another.status_code == 503  # refused before its answer starts
        finally:
            stalled.close()
        for _ in range(100):
            if http.get(url, params={"offset": "-1"}).status_code == 200:
                break
        else:
            pytest.fail("the stalled reader's bytes were never given back")


@pytest.mark.anyio
async def test_an_event_that_finds_no_room_ends_the_stream_and_every_hold_is_given_back() -> None:
    budget = ByteBudget(100, wait=0.01, small=0)

    async def events() -> AsyncGenerator[bytes, None]:
        for size in (40, 40, 90):
            yield b"x" * size

    sent = []
    async for event in _held(events(), budget, await budget.hold(40)):
        sent.append(len(event))
        # The server has taken this event; the one before it has left its buffer.
        assert budget.held == sum(sent[-2:])
    # The third event (90 bytes) does not fit beside the second (40): the stream ends.
    assert sent == [40, 40] and budget.held == 0

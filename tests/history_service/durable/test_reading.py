"""Durable Streams reads against a real uvicorn server on 127.0.0.1 (docs/protocol.md §13.4): long-poll and SSE."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import msgspec
import pytest

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
        http.put(url, content=b"x", headers={"content-type": "text/plain"})
        for params in ({"offset": "1"}, {"offset": "../x"}, {"offset": ""}, {"live": "sse"}, {"live": "poll"}):
            response = http.get(url, params=params)
            assert response.status_code == 400, params
            assert response.headers["x-content-type-options"] == "nosniff"
        twice = http.get(f"{url}?offset=-1&offset=-1")
        assert twice.status_code == 400
        beyond = http.get(url, params={"offset": msgspec.json.decode(b'"0000000000000000_0000000000000099"')})
        assert beyond.status_code == 200 and beyond.content == b""

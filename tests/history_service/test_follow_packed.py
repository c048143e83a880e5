"""Packed follow streams (docs/protocol.md §5.5) against a real uvicorn server on 127.0.0.1.

A follower expands each ``records`` frame as it expands a page; what it gets must be exactly
the events appended, whatever the layout of appends, the coding, or a restart between.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from msgspec import UNSET

from codec import DeltaData, Event, TextDelta, decode_live_records, decode_page_record, encode, iter_page_events
from history_client.sse import ServerSentEvent, SSEDecoder
from history_service.follow import CATCH_UP_WINDOW
from history_service.settings import Settings
from testing.servers import ThreadServer, serve_in_thread
from testing.strategies import layouts, sessions
from testing.wire import id_seq

JSON = {"Content-Type": "application/json"}


def _frames(response: httpx.Response) -> Iterator[ServerSentEvent]:
    decoder = SSEDecoder()
    for chunk in response.iter_bytes():
        yield from decoder.feed(chunk)


class Follower:
    """A packed follower's state: the events it expanded, and the seq to resume after."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.last: str | None = None
        self.ended = False
        self.frames = 0
        self.rows = 0

    def take(self, frame: ServerSentEvent) -> None:
        if frame.event == "snapshot":
            snapshot = msgspec.json.decode(frame.data)
            records = [decode_page_record(encode(record)) for record in snapshot["records"]]
            self.events += iter_page_events(records)
            self.last = frame.id
            return
        if frame.event == "end":
            self.ended = True
            return
        assert frame.event == "records", frame
        packed = decode_live_records(frame.data)
        expected = self.events[-1].seq + 1 if self.events else 0
        assert packed.fromSeq == expected and frame.id is not None and id_seq(frame.id) == packed.toSeq - 1
        records = [decode_page_record(record) for record in packed.records]
        self.frames += 1
        self.rows += sum(record.chunks is not UNSET for record in records)
        events = list(iter_page_events(records))
        assert [event.seq for event in events] == list(range(packed.fromSeq, packed.toSeq))
        self.events += events
        self.last = frame.id

    def follow(self, client: httpx.Client, *, until: int | None, gzip: bool) -> None:
        """Read until the follower holds seq ``until`` (``None``: until the stream ends)."""
        if until is not None and self.events and self.events[-1].seq >= until:
            return
        headers = {"Accept-Encoding": "gzip" if gzip else "identity"}
        if self.last is not None:
            headers["Last-Event-ID"] = self.last
        with client.stream("GET", "/v1/sessions/p/follow", params={"packed": 1}, headers=headers) as response:
            assert response.status_code == 200
            assert response.headers.get("content-encoding") == ("gzip" if gzip else None)
            for frame in _frames(response):
                self.take(frame)
                if until is not None and self.events and self.events[-1].seq >= until:
                    return
        assert until is None and self.ended


def _append(client: httpx.Client, events: list[Event], sizes: list[int]) -> None:
    at = 0
    for size in sizes:
        response = client.post(
            "/v1/sessions/p/events", content=encode({"events": events[at : at + size]}), headers=JSON
        )
        assert response.status_code == 201, response.text
        at += size


def _serve(db: Path) -> AbstractContextManager[ThreadServer]:
    return serve_in_thread(Settings(store_url=f"sqlite:///{db}", ping_interval=5))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=sessions(), cut=st.floats(0, 1), gzip=st.booleans(), data=st.data())
def test_a_packed_follower_expands_exactly_the_appended_events_across_a_restart(
    events: list[Event], cut: float, gzip: bool, data: st.DataObject
) -> None:
    """Deltas of several kinds and blocks, tool calls and plain events, in any append layout; then a close."""
    events = [Event("turn/start", 0, 1000, {"turn": 1}), *(msgspec.structs.replace(e, seq=e.seq + 1) for e in events)]
    split = max(1, int(len(events) * cut))
    first, second = events[:split], events[split:]
    follower = Follower()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "packed.db"
        with _serve(db) as server, httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.post("/v1/sessions", json={"id": "p", "createdAt": 0}).status_code == 201
            _append(client, first[:1], [1])
            follower.follow(client, until=0, gzip=gzip)  # the snapshot
            _append(client, first[1:], data.draw(layouts(len(first) - 1)))
            follower.follow(client, until=len(first) - 1, gzip=gzip)
        with _serve(db) as server, httpx.Client(base_url=server.url, timeout=30) as client:
            _append(client, second, data.draw(layouts(len(second))))
            assert client.post("/v1/sessions/p/close").status_code == 200
            follower.follow(client, until=None, gzip=gzip)
    assert encode(follower.events) == encode(events)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with serve_in_thread(Settings(store_url=f"sqlite:///{tmp_path / 'p.db'}", ping_interval=5)) as running:
        yield running.url


def test_a_busy_sessions_deltas_arrive_live_in_order_and_replay_as_rows() -> None:
    """One-event appends, as a model streams tokens: the live follower gets each once; the replay packs the run."""
    events = [Event("turn/start", 0, 1000, {"turn": 1})]
    events += [
        Event("assistant/chunk", seq, 1000 + seq, DeltaData(1, 1, TextDelta(0, f"t{seq}"))) for seq in range(1, 400)
    ]
    live, replay = Follower(), Follower()
    with (
        serve_in_thread(Settings(store_url="memory://", ping_interval=5)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        assert client.post("/v1/sessions", json={"id": "p", "createdAt": 0}).status_code == 201
        _append(client, events[:1], [1])
        live.follow(client, until=0, gzip=True)

        def produce() -> None:
            with httpx.Client(base_url=server.url, timeout=30) as producer:
                _append(producer, events[1:], [1] * (len(events) - 1))
                assert producer.post("/v1/sessions/p/close").status_code == 200

        thread = threading.Thread(target=produce)
        thread.start()
        live.follow(client, until=None, gzip=True)
        thread.join()
        replay.last = "-1"
        replay.follow(client, until=None, gzip=False)
    assert encode(live.events) == encode(events) == encode(replay.events)
    assert replay.frames == 1 and replay.rows == 1  # the whole run, read from the store, is one row


def test_the_packed_streams_openings_and_ends_are_the_unpacked_ones(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as client:
        assert client.post("/v1/sessions", json={"id": "p", "createdAt": 0}).status_code == 201
        _append(client, [Event("turn/start", 0, 1000, {"turn": 1})], [1])
        bad = client.get("/v1/sessions/p/follow", params={"packed": 2})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_parameter"
        ahead = client.get("/v1/sessions/p/follow", params={"packed": 1, "after": 5}).text
        assert ahead.endswith('event: error\ndata: {"code":"cursor_ahead","headSeq":0}\n\n')
        assert client.post("/v1/sessions/p/close").status_code == 200
        for params in ({"packed": 1}, {"packed": 0}, {}):
            closed = client.get("/v1/sessions/p/follow", params=params).text
            assert "event: snapshot" in closed and closed.endswith(
                'event: end\ndata: {"code":"session_closed","headSeq":0}\n\n'
            )
        replay = client.get("/v1/sessions/p/follow", params={"packed": 1, "after": -1}).text
        assert 'event: records\ndata: {"records":[{"event":{"type":"turn/start"' in replay
        assert replay.endswith('"fromSeq":0,"toSeq":1}\n\nevent: end\ndata: {"code":"session_closed","headSeq":0}\n\n')


def test_a_follower_far_back_in_the_buffer_gets_it_in_bounded_writes() -> None:
    """Each write from the shared buffer holds at most CATCH_UP_WINDOW events, so none is built in unbounded time."""
    events = [Event("turn/start", 0, 1000, {"turn": 1})]
    events += [Event("assistant/chunk", seq, seq, DeltaData(1, 1, TextDelta(0, "t"))) for seq in range(1, 5001)]
    with (
        serve_in_thread(Settings(store_url="memory://", ping_interval=5)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        assert client.post("/v1/sessions", json={"id": "p", "createdAt": 0}).status_code == 201
        _append(client, events[:1], [1])
        with client.stream("GET", "/v1/sessions/p/follow") as first:
            next(frame for frame in _frames(first) if frame.event == "snapshot")  # the channel holds what follows
            _append(client, events[1:], [5000])
            assert client.post("/v1/sessions/p/close").status_code == 200
            resumed = Follower()
            resumed.events = events[:11]
            with client.stream("GET", "/v1/sessions/p/follow", params={"packed": 1, "after": 10}) as response:
                spans = []
                for frame in _frames(response):
                    resumed.take(frame)
                    if frame.event == "records":
                        packed = decode_live_records(frame.data)
                        spans.append((packed.fromSeq, packed.toSeq))
    assert spans == [(11, 11 + CATCH_UP_WINDOW), (11 + CATCH_UP_WINDOW, 11 + 2 * CATCH_UP_WINDOW), (4011, 5001)]
    assert resumed.ended and encode(resumed.events) == encode(events)

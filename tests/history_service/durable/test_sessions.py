"""Sessions read as Durable Streams (docs/protocol.md §13.7), on every store: exact events, aligned reads, offsets."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from codec import (
    Event,
    SessionHeader,
    check_cover,
    decode_page_record,
    encode,
    iter_page_events,
    pack_page,
    record_seq_range,
)
from history_service.app import create_app
from history_service.durable.sessions import RECORDS_TYPE, SessionView, records_asked
from history_service.errors import NoAcceptableType
from history_service.service import HistoryService
from history_service.settings import Settings
from persistence import DEFAULT_OWNER, HistoryStore, MemoryStore
from testing.asgi import serving
from testing.events import plain, text
from testing.seeding import SEEDED, seed
from testing.servers import serve_in_thread
from testing.strategies import layouts, sessions
from tests.history_service.durable.test_reading import sse_events

pytestmark = pytest.mark.anyio

# Small, so a seeded session takes many reads and each one's alignment is seen.
SMALL = msgspec.structs.replace(SEEDED, ds_read_bytes=2000)
# What asks for the records extension (§13.7): the same reads, each value a page record.
RECORDS = {"accept": RECORDS_TYPE}


async def read_session(store: HistoryStore, session_id: str) -> list[Event]:
    return await store.read_events(session_id, 0, await store.head_seq(session_id) + 1)


async def events_of(store: HistoryStore, session_id: str) -> list[bytes]:
    return [encode(event) for event in await read_session(store, session_id)]


async def test_a_read_from_the_start_is_every_logical_event_as_the_store_holds_it(store: HistoryStore) -> None:
    async with serving(create_app(SEEDED, store=store)) as client:
        (made,) = await seed(client, "multi-turn")
        response = await client.get(f"/ds/v1/session/{made['id']}", params={"offset": "-1"})
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        values = [msgspec.json.encode(value) for value in response.json()]
        assert values == [msgspec.json.encode(json.loads(line)) for line in await events_of(store, made["id"])]
        info = await store.get_session(made["id"])
        assert response.headers["stream-next-offset"] == f"{info.incarnation}_{info.head_seq + 1:016d}"
        assert response.headers["stream-up-to-date"] == "true"
        assert "stream-closed" not in response.headers


async def test_small_reads_end_where_a_message_begins_and_together_are_the_session(store: HistoryStore) -> None:
    async with serving(create_app(SMALL, store=store)) as client:
        (made,) = await seed(client, "multi-turn")
        session_id = made["id"]
        head = await store.head_seq(session_id)
        # Every place a page may begin (a message's start), from the head back to 0.
        starts = set(await store.page_cuts(session_id, to_seq=head + 1, max_messages=head + 1))
        offset, read, reads = "-1", [], 0
        while True:
            response = await client.get(f"/ds/v1/session/{session_id}", params={"offset": offset})
            assert response.status_code == 200
            values = response.json()
            read += values
            reads += 1
            offset = response.headers["stream-next-offset"]
            if response.headers.get("stream-up-to-date") == "true":
                break
            end = int(offset.split("_")[1])
            # A read that is not at the head ends where a message begins, unless one message alone filled it.
            assert values and (end in starts or len(json.dumps(values)) > SMALL.ds_read_bytes)
        assert reads > 2
        expected = [json.loads(line) for line in await events_of(store, session_id)]
        assert read == expected
        assert [value["seq"] for value in read] == list(range(len(expected)))


async def test_an_offset_of_another_life_is_gone_and_a_malformed_one_is_refused(store: HistoryStore) -> None:
    async with serving(create_app(SEEDED, store=store)) as client:
        (made,) = await seed(client, "multi-turn")
        url = f"/ds/v1/session/{made['id']}"
        first = (await client.get(url)).headers["stream-next-offset"]
        assert (await client.delete(f"/v1/sessions/{made['id']}")).status_code == 204
        assert (await client.get(url)).status_code == 404
        created = await client.post("/v1/sessions", json={"id": made["id"], "createdAt": 1})
        assert created.status_code == 201
        assert (await client.get(url, params={"offset": first})).status_code == 410
        assert (await client.get(url, params={"offset": "zz"})).status_code == 400
        assert (await client.get(url, params={"offset": "0000000000000000_0000000000000000"})).status_code == 410
        fresh = await client.get(url, params={"offset": "-1"})
        assert fresh.status_code == 200 and fresh.json() == []


async def test_a_closed_session_is_a_closed_stream_and_writes_are_refused(store: HistoryStore) -> None:
    async with serving(create_app(SEEDED, store=store)) as client:
        (made,) = await seed(client, "multi-turn")
        url = f"/ds/v1/session/{made['id']}"
        assert (await client.post(f"/v1/sessions/{made['id']}/close")).status_code == 200
        response = await client.get(url, params={"offset": "-1"})
        assert response.headers["stream-closed"] == "true"
        tail = response.headers["stream-next-offset"]
        poll = await client.get(url, params={"offset": tail, "live": "long-poll"})
        assert poll.status_code == 204 and poll.headers["stream-closed"] == "true"
        head = await client.head(url)
        assert head.headers["stream-closed"] == "true" and head.headers["stream-next-offset"] == tail
        for method in ("POST", "PUT", "DELETE"):
            refused = await client.request(method, url, content=b"[1]", headers={"content-type": "application/json"})
            assert refused.status_code == 405
            assert "GET" in refused.headers["allow"]


async def test_a_child_is_read_through_its_parent_and_not_as_top_level(store: HistoryStore) -> None:
    async with serving(create_app(SEEDED, store=store)) as client:
        made = await seed(client, "subagent")
        parent = next(s["id"] for s in made if "parentSession" not in s.get("header", s))
        children = (await client.get(f"/v1/sessions/{parent}/subagents")).json()["sessions"]
        assert children
        child = children[0]["id"]
        through = await client.get(f"/ds/v1/session/{parent}/subagents/{child}", params={"offset": "-1"})
        assert through.status_code == 200
        assert [value["seq"] for value in through.json()] == list(range(len(through.json())))
        assert (await client.get(f"/ds/v1/session/{child}")).status_code == 404


@pytest.mark.parametrize("auth", ["token"])
async def test_another_principals_session_is_unknown(store: HistoryStore, auth: str) -> None:
    settings = msgspec.structs.replace(SEEDED, auth=auth, tokens=("t",))
    alice = {"Authorization": "Bearer t", "X-Principal": "alice"}
    async with serving(create_app(settings, store=store)) as client:
        created = await client.post("/v1/sessions", json={"id": "mine", "createdAt": 1}, headers=alice)
        assert created.status_code == 201
        assert (await client.get("/ds/v1/session/mine", headers=alice)).status_code == 200
        bob = {**alice, "X-Principal": "bob"}
        assert (await client.get("/ds/v1/session/mine", headers=bob)).status_code == 404
        mine = await client.get("/ds/v1/session/mine", headers={**alice, **RECORDS})
        assert mine.status_code == 200 and mine.headers["content-type"] == RECORDS_TYPE
        for method in ("GET", "HEAD"):
            assert (await client.request(method, "/ds/v1/session/mine", headers={**bob, **RECORDS})).status_code == 404
        anonymous = await client.get("/ds/v1/session/mine")
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "unauthorized"


def records_in(body: bytes) -> list[bytes]:
    """The records of a read's answer (or an SSE data event), each as the bytes it was sent as."""
    return [bytes(raw) for raw in msgspec.json.decode(body, type=list[msgspec.Raw])]


def expanded(records: list[bytes], from_seq: int) -> list[bytes]:
    """The events the records hold, checked to tile from ``from_seq`` on, as canonical lines."""
    decoded = [decode_page_record(record, index=i) for i, record in enumerate(records)]
    end = record_seq_range(decoded[-1])[1] + 1 if decoded else from_seq
    check_cover(map(record_seq_range, decoded), from_seq=from_seq, to_seq=end, has_more=from_seq > 0)
    return [encode(event) for event in iter_page_events(decoded)]


def packed(events: list[Event]) -> list[bytes]:
    return [encode(record) for record in pack_page(events)]


def seq_of(offset: str) -> int:
    return int(offset.split("_")[1])


async def test_records_reads_cover_the_event_reads_intervals_each_packed_as_its_page(store: HistoryStore) -> None:
    async with serving(create_app(SMALL, store=store)) as client:
        (made,) = await seed(client, "multi-turn")
        url = f"/ds/v1/session/{made['id']}"
        events = await read_session(store, made["id"])
        offset, got, reads = "-1", [], 0
        while True:
            answer = await client.get(url, params={"offset": offset}, headers=RECORDS)
            unpacked = await client.get(url, params={"offset": offset})
            assert answer.status_code == unpacked.status_code == 200
            assert answer.headers["content-type"] == RECORDS_TYPE and answer.headers["vary"] == "Accept"
            # The same interval as the events' read, the same offsets, but another ETag.
            assert answer.headers["stream-next-offset"] == unpacked.headers["stream-next-offset"]
            assert answer.headers["etag"] != unpacked.headers["etag"]
            start, end = seq_of(offset) if offset != "-1" else 0, seq_of(answer.headers["stream-next-offset"])
            records = records_in(answer.content)
            assert records == packed(events[start:end])
            got += expanded(records, start)
            reads += 1
            offset = answer.headers["stream-next-offset"]
            if answer.headers.get("stream-up-to-date") == "true":
                break
        assert reads > 2
        assert got == [encode(event) for event in events]
        # A run of deltas is one row: fewer values than events.
        whole = await client.get(url, params={"offset": "-1"}, headers=RECORDS)
        assert len(records_in(whole.content)) < len(events)
        etag = {"if-none-match": whole.headers["etag"]}
        again = await client.get(url, params={"offset": "-1"}, headers={**RECORDS, **etag})
        assert again.status_code == 304 and again.headers["vary"] == "Accept"
        # The events' read of the same range is another representation: not matched by the records' tag.
        assert (await client.get(url, params={"offset": "-1"}, headers=etag)).status_code == 200


async def test_single_delta_appends_are_one_row_a_resumed_run_a_new_one_and_a_closed_session_ends(
    store: HistoryStore,
) -> None:
    async with serving(create_app(SEEDED, store=store)) as client:
        assert (await client.post("/v1/sessions", json={"id": "run", "createdAt": 1})).status_code == 201
        url = "/ds/v1/session/run"
        events = [plain(0), *(text(seq, 1000 + seq, f"t{seq}") for seq in range(1, 12))]

        async def append(*batch: Event) -> None:
            body = b'{"events":[' + b",".join(encode(event) for event in batch) + b"]}"
            sent = await client.post(
                "/v1/sessions/run/events", content=body, headers={"content-type": "application/json"}
            )
            assert sent.status_code == 201, sent.text

        for event in events[:5]:
            await append(event)
        first = await client.get(url, params={"offset": "-1"}, headers=RECORDS)
        assert [json.loads(record) for record in records_in(first.content)] == [
            {"event": json.loads(encode(events[0]))},
            {"chunks": json.loads(encode(pack_page(events[1:5])[0].chunks))},
        ]
        middle = first.headers["stream-next-offset"]
        assert seq_of(middle) == 5
        for event in events[5:8]:
            await append(event)
        # A resume in the middle of the run: the rest of the run is a row of its own.
        resumed = await client.get(url, params={"offset": middle}, headers=RECORDS)
        assert records_in(resumed.content) == packed(events[5:8])
        assert expanded(records_in(resumed.content), 5) == [encode(event) for event in events[5:8]]
        tail = resumed.headers["stream-next-offset"]
        async with anyio.create_task_group() as tasks:
            polled: list[httpx.Response] = []

            async def poll() -> None:
                polled.append(await client.get(url, params={"offset": tail, "live": "long-poll"}, headers=RECORDS))

            tasks.start_soon(poll)
            await append(*events[8:11])
        (answer,) = polled
        assert answer.status_code == 200 and answer.headers["content-type"] == RECORDS_TYPE
        woken = seq_of(answer.headers["stream-next-offset"])
        assert records_in(answer.content) == packed(events[8:woken])
        await append(*events[11:])
        assert (await client.post("/v1/sessions/run/close")).status_code == 200
        # A closed session, read live from the middle of the run: SSE ends with the stream.
        sse = await client.get(url, params={"offset": middle, "live": "sse"}, headers=RECORDS)
        data = [
            records_in(payload.encode()) for kind, payload in sse_events(iter(sse.text.splitlines())) if kind == "data"
        ]
        assert sum(data, []) == packed(events[5:])
        controls = [json.loads(p) for kind, p in sse_events(iter(sse.text.splitlines())) if kind == "control"]
        assert controls[-1]["streamClosed"] is True and seq_of(controls[-1]["streamNextOffset"]) == len(events)
        whole = await client.get(url, params={"offset": "-1"}, headers=RECORDS)
        assert whole.headers["stream-closed"] == "true"
        assert expanded(records_in(whole.content), 0) == [encode(event) for event in events]
        end = await client.get(
            url, params={"offset": whole.headers["stream-next-offset"], "live": "long-poll"}, headers=RECORDS
        )
        assert end.status_code == 204 and end.headers["stream-closed"] == "true"
        head = await client.head(url, headers=RECORDS)
        assert head.headers["content-type"] == RECORDS_TYPE and head.headers["stream-closed"] == "true"
        assert (await client.head(url)).headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("accept", "records"),
    [
        (None, False),
        ("*/*", False),
        ("text/event-stream", False),
        ("text/plain", False),
        (RECORDS_TYPE, True),
        (f"{RECORDS_TYPE}, */*", True),
        (f"application/json;q=0.5, {RECORDS_TYPE}", True),
        (f"application/json, {RECORDS_TYPE}", True),
        (f"{RECORDS_TYPE};q=0.5, application/json", False),
        (f"{RECORDS_TYPE};q=0", False),
        (f"{RECORDS_TYPE}, application/json;q=0", True),
        ("application/json;q=0", None),
        ("*/*;q=0", None),
        (f"text/plain, application/*;q=0, {RECORDS_TYPE};q=0", None),
    ],
)
def test_accept_asks_for_records_by_name_and_refuses_json_only_by_naming_it(
    accept: str | None, records: bool | None
) -> None:
    if records is None:
        with pytest.raises(NoAcceptableType):
            records_asked(accept)
    else:
        assert records_asked(accept) is records


async def test_a_read_that_refuses_both_types_is_406_in_plain_text() -> None:
    async with serving(create_app(SEEDED, store=MemoryStore())) as client:
        assert (await client.post("/v1/sessions", json={"id": "s", "createdAt": 1})).status_code == 201
        for method in ("GET", "HEAD"):
            refused = await client.request(method, "/ds/v1/session/s", headers={"accept": "application/json;q=0"})
            assert refused.status_code == 406 and refused.headers["vary"] == "Accept"
            assert refused.headers["x-content-type-options"] == "nosniff"
            if method == "GET":
                assert refused.headers["content-type"].startswith("text/plain") and RECORDS_TYPE in refused.text
        # A bad id is refused before the store is asked, and still varies by Accept as every session read does.
        bad = await client.get("/ds/v1/session/%20bad", headers={"accept": RECORDS_TYPE})
        assert bad.status_code == 422 and bad.headers["vary"] == "Accept"


async def read_all(view: SessionView, start: int, end: int, budget: int) -> list[tuple[int, int, list[bytes]]]:
    """Each read of ``view`` from ``start`` until ``end``: the interval it covers, and its values."""
    reads = []
    while start < end:
        snapshot = await view.read(start, budget)
        stop = snapshot.chunks[-1].end
        reads.append((start, stop, [chunk.data[:-1] for chunk in snapshot.chunks]))
        start = stop
    return reads


@settings(max_examples=50, deadline=None)
@given(sessions(), st.data())
def test_every_records_read_is_the_page_of_the_event_reads_interval(events: list[Event], data: st.DataObject) -> None:
    """From any offset (inside a run too), with any budget and any layout of appends: each read's
    records are its interval's page, byte for byte, over the interval the events' read covers."""
    sizes = data.draw(layouts(len(events)))
    budget = data.draw(st.integers(1, 2000))
    start = data.draw(st.integers(0, len(events)))

    async def check() -> None:
        store = MemoryStore()
        service = HistoryService(Settings(), store)
        await store.create_session(SessionHeader(id="s", createdAt=0))
        at = 0
        for size in sizes:
            await store.append("s", events[at : at + size])
            at += size
        info = await store.get_session("s")
        views = [SessionView(service, DEFAULT_OWNER, "s", None, info, records=records) for records in (False, True)]
        plain_reads, record_reads = [await read_all(view, start, len(events), budget) for view in views]
        assert [(at, end) for at, end, _ in record_reads] == [(at, end) for at, end, _ in plain_reads]
        for at, end, records in record_reads:
            assert records == packed(events[at:end])
        expected = [encode(event) for event in events[start:]]
        assert sum((expanded(records, at) for at, _, records in record_reads), []) == expected

    anyio.run(check)


def test_a_live_sse_read_in_records_sends_the_catch_up_packed_then_each_append() -> None:
    settings = Settings(ds_long_poll=0.3, max_followers=3, limit_concurrency=8)
    events = [plain(0), *(text(seq, 1000 + seq, f"t{seq}") for seq in range(1, 8))]
    with (
        serve_in_thread(settings, store=MemoryStore()) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        assert http.post("/v1/sessions", json={"id": "live", "createdAt": 1}).status_code == 201

        def append(event: Event) -> None:
            body = b'{"events":[' + encode(event) + b"]}"
            sent = http.post("/v1/sessions/live/events", content=body, headers={"content-type": "application/json"})
            assert sent.status_code == 201

        for event in events[:5]:
            append(event)
        with http.stream("GET", "/ds/v1/session/live", params={"offset": "-1", "live": "sse"}, headers=RECORDS) as sse:
            assert sse.headers["content-type"] == "text/event-stream"
            stream = sse_events(sse.iter_lines())
            sent: list[list[bytes]] = []

            def read_to(seq: int) -> dict[str, Any]:
                """The data events up to the control that reaches ``seq``, kept in ``sent``; that control."""
                for kind, payload in stream:
                    if kind == "data":
                        sent.append(records_in(payload.encode()))
                    else:
                        control: dict[str, Any] = json.loads(payload)
                        if seq_of(control["streamNextOffset"]) >= seq:
                            return control
                raise AssertionError("the stream ended early")

            read_to(5)
            # The catch-up: one data event a record, the run of single-delta appends one row.
            assert sent == [[record] for record in packed(events[:5])]
            for event in events[5:]:
                append(event)
                read_to(event.seq + 1)
                assert sent[-1] == packed([event])
            assert http.post("/v1/sessions/live/close").status_code == 200
            assert read_to(len(events))["streamClosed"] is True
        assert expanded(sum(sent, []), 0) == [encode(event) for event in events]

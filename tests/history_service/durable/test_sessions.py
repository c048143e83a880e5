"""Sessions read as Durable Streams (docs/protocol.md §13.7), on every store: exact events, aligned reads, offsets."""

from __future__ import annotations

import json

import msgspec
import pytest

from codec import encode
from history_service.app import create_app
from persistence import HistoryStore
from testing.asgi import serving
from testing.seeding import SEEDED, seed

pytestmark = pytest.mark.anyio

# Small, so a seeded session takes many reads and each one's alignment is seen.
SMALL = msgspec.structs.replace(SEEDED, ds_read_bytes=2000)


async def events_of(store: HistoryStore, session_id: str) -> list[bytes]:
    head = await store.head_seq(session_id)
    return [encode(event) for event in await store.read_events(session_id, 0, head + 1)]


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
        anonymous = await client.get("/ds/v1/session/mine")
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "unauthorized"

"""GET /v1/search (docs/protocol.md §14.1) on every store: scoped to its caller, hostile queries answered, cursors."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from history_service.app import create_app
from history_service.bodies import SearchHits
from history_service.settings import Settings
from persistence import HistoryStore
from testing.asgi import serving
from testing.stores import BACKENDS, open_backend

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000
SEARCHABLE = [name for name in BACKENDS if getattr(name, "values", (name,))[0] not in ("jsonl", "jsonl-zstd")]


def who(principal: str) -> dict[str, str]:
    return {"Authorization": "Bearer t", "X-Principal": principal}


async def create(client: httpx.AsyncClient, principal: str, session_id: str, said: list[str], **extra: Any) -> None:
    created = await client.post(
        "/v1/sessions", json={"id": session_id, "createdAt": T0, **extra}, headers=who(principal)
    )
    assert created.status_code == 201, created.text
    events = [
        {"type": "user/message", "seq": seq, "time": T0 + seq, "data": {"text": text}} for seq, text in enumerate(said)
    ]
    appended = await client.post(f"/v1/sessions/{session_id}/events", json={"events": events}, headers=who(principal))
    assert appended.status_code in (200, 201), appended.text


async def search(client: httpx.AsyncClient, principal: str = "alice", **params: Any) -> httpx.Response:
    return await client.get("/v1/search", params=params, headers=who(principal))


@pytest.fixture(params=SEARCHABLE)
async def api(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    store = await open_backend(request.param, tmp_path)
    settings = Settings(auth="token", tokens=("t",))
    try:
        async with serving(create_app(settings, store=store)) as client:
            await create(client, "alice", "mine", ["the secret rate limit", "nothing here"])
            await create(client, "alice", "mine.c", ["a secret in the child"], parentSession="mine", origin="subagent")
            await create(client, "bob", "bobs", ["bob's secret rate limit"])
            yield client
    finally:
        await store.close()


async def test_hits_name_their_session_message_kind_and_marked_snippet(api: httpx.AsyncClient) -> None:
    response = await search(api, q="secret")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    page = msgspec.json.decode(response.content, type=SearchHits)
    assert {(hit.session, hit.seq, hit.kind) for hit in page.hits} == {("mine", 0, "user"), ("mine.c", 0, "user")}
    child = next(hit for hit in page.hits if hit.session == "mine.c")
    assert child.parent == "mine" and child.snippet == ["a ", "secret", " in the child"] and child.time == T0
    assert next(hit for hit in page.hits if hit.session == "mine").title == "the secret rate limit"
    assert page.nextCursor is None


async def test_another_principals_sessions_never_answer(api: httpx.AsyncClient) -> None:
    assert [hit["session"] for hit in (await search(api, "bob", q="secret")).json()["hits"]] == ["bobs"]
    assert (await search(api, "carol", q="secret")).json() == {"hits": [], "nextCursor": None}
    # Bob's hit is not in Alice's answer, not even as a cursor past it.
    alice = (await search(api, q='"rate limit"', limit=1)).json()
    assert [hit["session"] for hit in alice["hits"]] == ["mine"] and alice["nextCursor"] is None


@pytest.mark.parametrize(
    "q",
    [
        'secret OR "',
        "secret NEAR(x y)",
        'secr* AND -"rate" ^limit:col',
        "secret\x00\x07\x1f",
        "secret ' ; DROP TABLE search_passages; --",
        "secret \\\\ %_ *",
        "secret 北京 \u202e \ud7ff",
    ],
)
async def test_store_syntax_and_control_characters_are_plain_text(api: httpx.AsyncClient, q: str) -> None:
    response = await search(api, q=q)
    assert response.status_code == 200, response.text
    assert all(hit["session"] in ("mine", "mine.c") for hit in response.json()["hits"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "q is required"),
        ({"q": ""}, "no word"),
        ({"q": '*** ""'}, "no word"),
        ({"q": "x" * 10_000}, "at most 1000"),
        ({"q": " ".join(["w"] * 20) + " " + " ".join(f"v{n}" for n in range(17))}, "too many"),
        ({"q": "secret", "limit": "0"}, "limit"),
        ({"q": "secret", "limit": "101"}, "limit"),
        ({"q": "secret", "state": "gone"}, "state"),
        ({"q": "secret", "since": "yesterday"}, "since"),
        ({"q": "secret", "cursor": "bm90LWEtY3Vyc29y"}, "cursor"),
        ({"q": "secret", "unknown": "1"}, "unknown"),
    ],
)
async def test_bad_parameters_are_400_invalid_parameter(
    api: httpx.AsyncClient, params: dict[str, str], message: str
) -> None:
    response = await search(api, **params)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_parameter" and message in response.json()["error"]["message"]


async def test_a_cursor_continues_its_own_query_and_no_other(api: httpx.AsyncClient) -> None:
    for number in range(5):
        await create(api, "alice", f"more{number}", ["secret " * (number + 1)])
    seen: list[str] = []
    cursor = None
    while True:
        page = (await search(api, q="secret", limit=2, **({"cursor": cursor} if cursor else {}))).json()
        seen.extend(hit["session"] for hit in page["hits"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
        refused = await search(api, q="rate", cursor=cursor)
        assert refused.status_code == 400 and "cursor" in refused.json()["error"]["message"]
    assert sorted(seen) == sorted({*seen}) and len(seen) == 7
    forged = base64.urlsafe_b64encode(msgspec.json.encode([1_000_000, "x"])).decode()
    assert (await search(api, q="secret", cursor=forged)).status_code == 400


async def test_filters_by_state_and_time(api: httpx.AsyncClient) -> None:
    closed = await api.post("/v1/sessions/mine/close", headers=who("alice"))
    assert closed.status_code == 200
    assert {hit["session"] for hit in (await search(api, q="secret", state="closed")).json()["hits"]} == {"mine"}
    assert {hit["session"] for hit in (await search(api, q="secret", state="open")).json()["hits"]} == {"mine.c"}
    assert (await search(api, q="secret", since=str(T0 + 1))).json()["hits"] == []


async def test_a_deleted_session_answers_no_more(api: httpx.AsyncClient) -> None:
    assert (await api.delete("/v1/sessions/mine", headers=who("alice"))).status_code == 204
    assert (await search(api, q="secret")).json()["hits"] == []


async def test_a_store_without_an_index_answers_501(tmp_path: Path) -> None:
    store = await open_backend("jsonl", tmp_path)
    try:
        async with serving(create_app(Settings(), store=store)) as client:
            response = await client.get("/v1/search", params={"q": "anything"})
            assert response.status_code == 501
            assert response.json()["error"]["code"] == "search_unsupported"
    finally:
        await store.close()


async def test_the_route_is_documented_with_its_errors(tmp_path: Path, store: HistoryStore) -> None:
    async with serving(create_app(Settings(), store=store)) as client:
        document = (await client.get("/openapi.json")).json()
    operation = document["paths"]["/v1/search"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"q", "limit", "cursor", "state", "since", "until"}
    assert {"200", "400", "501", "503"} <= set(operation["responses"])

"""Principal A cannot read, follow or append to B's sessions, nor reach B's children by any address."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from history_service.app import create_app
from history_service.settings import Settings
from persistence import MemoryStore
from testing.asgi import serving

pytestmark = pytest.mark.anyio


def who(principal: str) -> dict[str, str]:
    return {"Authorization": "Bearer t2", "X-Principal": principal}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(auth="token", tokens=("t1", "t2"), enable_test_seed=True)
    async with serving(create_app(settings, store=MemoryStore())) as client:
        response = await client.post(
            "/v1/test-only/seed", json={"scenario": "subagent", "sessionId": "b"}, headers=who("bob")
        )
        assert response.status_code == 201
        response = await client.post(
            "/v1/test-only/seed", json={"scenario": "multi-turn", "sessionId": "a"}, headers=who("alice")
        )
        assert response.status_code == 201
        yield client


ADDRESSES = [
    "/v1/sessions/b/page",
    "/v1/sessions/b/follow",
    "/v1/sessions/b/subagents/b.child-1/page",
    "/v1/sessions/b/subagents/b.child-1/follow",
    "/v1/sessions/b.child-1/page",
    "/v1/sessions/b.child-1/subagents/b.child-1.grandchild/page",
    "/v1/sessions/a/subagents/b.child-1/page",
    "/v1/sessions/a/subagents/b.child-1/follow",
]


@pytest.mark.parametrize("address", ADDRESSES)
async def test_another_principal_sees_nothing(client: httpx.AsyncClient, address: str) -> None:
    response = await client.get(address, headers=who("alice"))
    assert response.status_code == 404
    unknown = await client.get(address.replace("/b", "/zz"), headers=who("alice"))
    # The same answer as for an id that does not exist: nothing leaks.
    assert response.json()["error"]["code"] == unknown.json()["error"]["code"] == "session_not_found"


async def test_another_principal_cannot_append(client: httpx.AsyncClient) -> None:
    event = {"type": "x", "seq": 10**6, "time": 0, "data": 1}
    for target in ("b", "b.child-1"):
        response = await client.post(f"/v1/sessions/{target}/events", json={"events": [event]}, headers=who("alice"))
        assert response.status_code == 404
    response = await client.post(
        "/v1/sessions",
        json={"id": "spy", "createdAt": 0, "parentSession": "b", "origin": "subagent"},
        headers=who("alice"),
    )
    assert response.status_code == 422


async def test_the_owner_reads_children_only_through_their_parent(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/sessions/b/subagents/b.child-1/page", headers=who("bob"))).status_code == 200
    assert (
        await client.get("/v1/sessions/b.child-1/subagents/b.child-1.grandchild/page", headers=who("bob"))
    ).status_code == 200
    direct = await client.get("/v1/sessions/b.child-1/page", headers=who("bob"))
    assert direct.status_code == 403 and direct.json()["error"]["code"] == "subagent_child"
    grand = await client.get("/v1/sessions/b/subagents/b.child-1.grandchild/page", headers=who("bob"))
    assert grand.status_code == 403 and grand.json()["error"]["code"] == "not_a_direct_child"


async def test_a_session_id_is_not_a_credential(client: httpx.AsyncClient) -> None:
    headers = {"X-Principal": "bob"}
    assert (await client.get("/v1/sessions/b/page", headers=headers)).status_code == 401
    assert (
        await client.get("/v1/sessions/b/page", headers={**headers, "Authorization": "Bearer b"})
    ).status_code == 401
    assert (
        await client.get("/v1/sessions/b/page", headers={**headers, "Authorization": "Bearer t1"})
    ).status_code == 200


async def test_an_immutable_page_is_revalidated_so_a_cache_never_serves_it_to_another_caller(
    client: httpx.AsyncClient,
) -> None:
    path = "/v1/sessions/a/page?through=3&maxMessages=7"
    first = await client.get(path, headers=who("alice"))
    assert first.status_code == 200 and first.headers["cache-control"] == "private, no-cache"
    etag = first.headers["etag"]
    # A browser that kept the page asks again with its validator: only its owner gets the 304.
    assert (await client.get(path, headers={**who("alice"), "If-None-Match": etag})).status_code == 304
    assert (await client.get(path, headers={**who("bob"), "If-None-Match": etag})).status_code == 404
    assert (await client.get(path, headers={"If-None-Match": etag})).status_code == 401

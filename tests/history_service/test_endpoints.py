"""Listing and reading sessions: the caller's own and a session's subagent children, newest first, paged,
under the same rules as pages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from codec import SessionHeader
from history_service.app import create_app
from history_service.service import HistoryService, Swept
from history_service.settings import Settings
from persistence import HistoryStore, Life, SessionNotFoundError, StoreError, now_ms
from testing.asgi import serving
from testing.events import plain

pytestmark = pytest.mark.anyio


TOKENS = {"inputTokens", "outputTokens"}


def who(principal: str) -> dict[str, str]:
    return {"Authorization": "Bearer t", "X-Principal": principal}


@pytest.fixture
async def api(store: HistoryStore) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(auth="token", tokens=("t",), enable_test_seed=True)
    async with serving(create_app(settings, store=store)) as client:
        for created_at, session_id in [(5, "b"), (9, "d"), (5, "a"), (7, "c")]:
            response = await client.post(
                "/v1/sessions", json={"id": session_id, "createdAt": created_at}, headers=who("alice")
            )
            assert response.status_code == 201
        response = await client.post(
            "/v1/test-only/seed", json={"scenario": "subagent", "sessionId": "tree"}, headers=who("alice")
        )
        assert response.status_code == 201
        response = await client.post("/v1/sessions", json={"id": "bobs", "createdAt": 99}, headers=who("bob"))
        assert response.status_code == 201
        yield client


async def test_a_listing_is_the_callers_own_sessions_newest_first(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/sessions", headers=who("alice"))
    assert response.status_code == 200
    body = response.json()
    assert [s["id"] for s in body["sessions"]] == ["tree", "d", "c", "b", "a"]
    assert body["nextCursor"] is None and body["total"] == 5
    tree = body["sessions"][0]
    assert tree["childCount"] == 2 and tree["headSeq"] > 0 and tree["createdAt"] == 1_700_000_000_000
    # The seeded session's synopsis: its first user message, its last event's time, the tokens it reports.
    assert tree["title"] and tree["lastEventAt"] >= tree["createdAt"] and set(tree["usage"]) == TOKENS
    # An empty session has no title, no last event and no tokens: those keys are left out.
    assert body["sessions"][1] == {"id": "d", "createdAt": 9, "headSeq": -1, "childCount": 0}
    bobs = (await api.get("/v1/sessions", headers=who("bob"))).json()
    assert [s["id"] for s in bobs["sessions"]] == ["bobs"] and bobs["total"] == 1
    assert (await api.get("/v1/sessions", headers=who("carol"))).json() == {
        "sessions": [],
        "nextCursor": None,
        "total": 0,
    }


async def test_pages_of_a_listing_cover_every_session_once(api: httpx.AsyncClient) -> None:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        body = (await api.get("/v1/sessions", params=params, headers=who("alice"))).json()
        seen.extend(s["id"] for s in body["sessions"])
        cursor = body["nextCursor"]
        if cursor is None:
            break
        assert len(body["sessions"]) == 2
    assert seen == ["tree", "d", "c", "b", "a"]


async def test_a_close_is_the_owners_and_listings_show_it_and_filter_on_it(api: httpx.AsyncClient) -> None:
    refused = await api.post("/v1/sessions/c/close", headers=who("bob"))
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "session_not_found"
    closed = await api.post("/v1/sessions/c/close", headers=who("alice"))
    assert closed.status_code == 200 and closed.json()["headSeq"] == -1
    child = await api.post("/v1/sessions/tree.child-1/close", headers=who("alice"))
    assert child.status_code == 200
    at = closed.json()["closedAt"]

    async def listed(path: str, state: str | None = None) -> list[tuple[str, int | None]]:
        params = {"state": state} if state else {}
        body = (await api.get(path, params=params, headers=who("alice"))).json()
        return [(s["id"], s.get("closedAt")) for s in body["sessions"]]

    assert await listed("/v1/sessions") == [("tree", None), ("d", None), ("c", at), ("b", None), ("a", None)]
    assert await listed("/v1/sessions", "closed") == [("c", at)]
    assert [i for i, _ in await listed("/v1/sessions", "open")] == ["tree", "d", "b", "a"]
    children = await listed("/v1/sessions/tree/subagents", "closed")
    assert children == [("tree.child-1", child.json()["closedAt"])]
    assert [i for i, _ in await listed("/v1/sessions/tree/subagents", "open")] == ["tree.child-2"]
    header = (await api.get("/v1/sessions/tree/subagents/tree.child-1", headers=who("alice"))).json()["header"]
    assert header["closedAt"] == child.json()["closedAt"]
    bad = await api.get("/v1/sessions", params={"state": "ended"}, headers=who("alice"))
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_parameter"
    created = await api.post("/v1/sessions", json={"id": "e", "createdAt": 1, "closedAt": 2}, headers=who("alice"))
    assert created.status_code == 422 and created.json()["error"]["code"] == "invalid_header"


async def test_a_filtered_listing_pages_what_it_keeps_and_totals_it(api: httpx.AsyncClient) -> None:
    for session_id, title in [("b", "Fix the 100% bug"), ("c", "fix LATER"), ("d", "unrelated")]:
        event = {"seq": 0, "time": 1_700_000_000_000, "type": "session/title", "data": {"title": title}}
        response = await api.post(f"/v1/sessions/{session_id}/events", json={"events": [event]}, headers=who("alice"))
        assert response.status_code == 201

    async def listed(**params: str) -> dict[str, Any]:
        response = await api.get("/v1/sessions", params=params, headers=who("alice"))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    first = await listed(q="FIX", limit="1")
    assert ([s["id"] for s in first["sessions"]], first["total"]) == (["c"], 2)
    rest = await listed(q="FIX", limit="1", cursor=first["nextCursor"])
    assert ([s["id"] for s in rest["sessions"]], rest["nextCursor"], rest["total"]) == (["b"], None, 2)
    assert (await listed(q="100%"))["sessions"][0]["title"] == "Fix the 100% bug"
    # The id counts as the title does; the state narrows it; the caller's own sessions only.
    assert [s["id"] for s in (await listed(q="tre"))["sessions"]] == ["tree"]
    assert (await listed(q="fix", state="closed"))["total"] == 0
    response = await api.get("/v1/sessions", params={"q": "fix"}, headers=who("bob"))
    assert response.json() == {"sessions": [], "nextCursor": None, "total": 0}


@pytest.mark.parametrize("q", ["", "x" * 201, "a\nb", "\x7f", "\x85"], ids=["empty", "long", "newline", "del", "c1"])
async def test_a_filter_is_1_to_200_characters_without_control_characters(api: httpx.AsyncClient, q: str) -> None:
    response = await api.get("/v1/sessions", params={"q": q}, headers=who("alice"))
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_parameter"
    assert (await api.get("/v1/sessions", params={"q": "x" * 200}, headers=who("alice"))).status_code == 200


async def test_a_sessions_state_gives_its_synopsis_as_its_listing_does(api: httpx.AsyncClient) -> None:
    (tree,) = [s for s in (await api.get("/v1/sessions", headers=who("alice"))).json()["sessions"] if s["id"] == "tree"]
    state = (await api.get("/v1/sessions/tree", headers=who("alice"))).json()
    assert {key: state[key] for key in ("title", "lastEventAt", "usage")} == {
        key: tree[key] for key in ("title", "lastEventAt", "usage")
    }
    assert set((await api.get("/v1/sessions/d", headers=who("alice"))).json()) == {"header", "headSeq"}
    children = (await api.get("/v1/sessions/tree/subagents", headers=who("alice"))).json()["sessions"]
    child = (await api.get(f"/v1/sessions/tree/subagents/{children[0]['id']}", headers=who("alice"))).json()
    assert child.get("title") == children[0].get("title") and child["headSeq"] == children[0]["headSeq"]


@pytest.mark.parametrize(
    "params", [{"limit": "0"}, {"limit": "1001"}, {"limit": "x"}, {"cursor": "nope"}, {"cursor": "W10"}, {"x": "1"}]
)
async def test_bad_listing_parameters_are_400(api: httpx.AsyncClient, params: dict[str, str]) -> None:
    response = await api.get("/v1/sessions", params=params, headers=who("alice"))
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_parameter"


async def test_a_session_reads_as_its_header_and_head(api: httpx.AsyncClient) -> None:
    response = await api.get("/v1/sessions/tree", headers=who("alice"))
    assert response.status_code == 200
    body = response.json()
    assert body["header"]["id"] == "tree" and body["header"]["type"] == "session" and body["headSeq"] > 0
    child = await api.get("/v1/sessions/tree/subagents/tree.child-1", headers=who("alice"))
    assert child.status_code == 200 and child.json()["header"]["parentSession"] == "tree"


@pytest.mark.parametrize(
    ("path", "principal", "status", "code"),
    [
        ("/v1/sessions/tree", "bob", 404, "session_not_found"),
        ("/v1/sessions/nope", "alice", 404, "session_not_found"),
        ("/v1/sessions/tree.child-1", "alice", 403, "subagent_child"),
        ("/v1/sessions/tree/subagents/tree.child-1", "bob", 404, "session_not_found"),
        ("/v1/sessions/tree/subagents/tree.child-1.grandchild", "alice", 403, "not_a_direct_child"),
        ("/v1/sessions/a%20b", "alice", 422, "invalid_session_id"),
    ],
)
async def test_a_session_follows_the_rules_of_pages(
    api: httpx.AsyncClient, path: str, principal: str, status: int, code: str
) -> None:
    response = await api.get(path, headers=who(principal))
    assert response.status_code == status and response.json()["error"]["code"] == code
    page = await api.get(path + "/page", headers=who(principal))
    assert (page.status_code, page.json()["error"]["code"]) == (status, code)


async def test_a_sessions_children_are_listed_newest_first_even_those_its_events_never_name(
    api: httpx.AsyncClient,
) -> None:
    for created_at, child in [(3, "d.x"), (8, "d.z"), (3, "d.y")]:
        header = {"id": child, "createdAt": created_at, "origin": "subagent", "parentSession": "d"}
        assert (await api.post("/v1/sessions", json=header, headers=who("alice"))).status_code == 201
    grandchild = {"id": "d.z.g", "createdAt": 1, "origin": "subagent", "parentSession": "d.z"}
    assert (await api.post("/v1/sessions", json=grandchild, headers=who("alice"))).status_code == 201
    appended = await api.post(
        "/v1/sessions/d.y/events",
        json={"events": [{"seq": 0, "time": 4, "type": "user/message", "data": {"text": "hi"}}]},
        headers=who("alice"),
    )
    assert appended.status_code == 201

    response = await api.get("/v1/sessions/d/subagents", headers=who("alice"))
    assert response.status_code == 200
    assert response.json() == {
        "sessions": [
            {"id": "d.z", "createdAt": 8, "headSeq": -1, "childCount": 1},
            {"id": "d.y", "createdAt": 3, "headSeq": 0, "childCount": 0, "title": "hi", "lastEventAt": 4},
            {"id": "d.x", "createdAt": 3, "headSeq": -1, "childCount": 0},
        ],
        "nextCursor": None,
        "total": 3,
    }
    # A child's own children are listed at its address, the one its pages use as a parent.
    nested = (await api.get("/v1/sessions/d.z/subagents", headers=who("alice"))).json()
    assert [s["id"] for s in nested["sessions"]] == ["d.z.g"]
    assert (await api.get("/v1/sessions/a/subagents", headers=who("alice"))).json() == {
        "sessions": [],
        "nextCursor": None,
        "total": 0,
    }
    # Filtered by title, as the caller's own listing is.
    found = (await api.get("/v1/sessions/d/subagents", params={"q": "HI"}, headers=who("alice"))).json()
    assert [s["id"] for s in found["sessions"]] == ["d.y"] and found["total"] == 1
    # The top-level listing still holds no child.
    top = (await api.get("/v1/sessions", headers=who("alice"))).json()
    assert "d.x" not in {s["id"] for s in top["sessions"]} and top["sessions"][1]["childCount"] == 3


async def test_pages_of_a_childrens_listing_cover_every_child_once(api: httpx.AsyncClient) -> None:
    expected = [f"c.{n:02}" for n in range(7)]
    for child in expected:
        header = {"id": child, "createdAt": 10, "origin": "subagent", "parentSession": "c"}
        assert (await api.post("/v1/sessions", json=header, headers=who("alice"))).status_code == 201
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        body = (await api.get("/v1/sessions/c/subagents", params=params, headers=who("alice"))).json()
        seen.extend(s["id"] for s in body["sessions"])
        cursor = body["nextCursor"]
        if cursor is None:
            break
        assert len(body["sessions"]) == 3
    assert seen == expected[::-1]


@pytest.mark.parametrize(
    ("path", "principal", "params", "status", "code"),
    [
        ("/v1/sessions/tree/subagents", "bob", {}, 404, "session_not_found"),
        ("/v1/sessions/nope/subagents", "alice", {}, 404, "session_not_found"),
        ("/v1/sessions/a%20b/subagents", "alice", {}, 422, "invalid_session_id"),
        ("/v1/sessions/tree/subagents", "alice", {"limit": "0"}, 400, "invalid_parameter"),
        ("/v1/sessions/tree/subagents", "alice", {"cursor": "nope"}, 400, "invalid_parameter"),
        ("/v1/sessions/tree/subagents", "alice", {"after": "1"}, 400, "invalid_parameter"),
    ],
)
async def test_a_childrens_listing_answers_a_foreign_or_bad_address_as_an_append_does(
    api: httpx.AsyncClient, path: str, principal: str, params: dict[str, str], status: int, code: str
) -> None:
    response = await api.get(path, params=params, headers=who(principal))
    assert response.status_code == status and response.json()["error"]["code"] == code


# Deletes and incarnations (docs/protocol.md §2.5, §6.4).


async def test_a_delete_is_the_owners_and_takes_the_whole_tree_with_it(api: httpx.AsyncClient) -> None:
    refused = await api.delete("/v1/sessions/tree", headers=who("bob"))
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "session_not_found"
    assert (await api.delete("/v1/sessions/tree", params={"x": "1"}, headers=who("alice"))).status_code == 400
    deleted = await api.delete("/v1/sessions/tree", headers=who("alice"))
    assert deleted.status_code == 204 and deleted.content == b""
    for path in (
        "/v1/sessions/tree",
        "/v1/sessions/tree/page",
        "/v1/sessions/tree/follow",
        "/v1/sessions/tree/subagents",
        "/v1/sessions/tree/subagents/tree.child-1/page",
    ):
        gone = await api.get(path, headers=who("alice"))
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found", path
    for method, path in (
        ("POST", "/v1/sessions/tree.child-1/events"),
        ("POST", "/v1/sessions/tree.child-2/close"),
        ("DELETE", "/v1/sessions/tree"),
        ("DELETE", "/v1/sessions/tree.child-1"),
    ):
        body = b'{"events":[{"type":"note","seq":0,"time":0,"data":{}}]}' if path.endswith("events") else None
        gone = await api.request(
            method, path, content=body, headers={**who("alice"), "Content-Type": "application/json"}
        )
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found", path
    listed = (await api.get("/v1/sessions", headers=who("alice"))).json()["sessions"]
    assert [s["id"] for s in listed] == ["d", "c", "b", "a"]


async def test_a_child_is_deleted_by_its_own_id_and_its_parent_stays(api: httpx.AsyncClient) -> None:
    assert (await api.delete("/v1/sessions/tree.child-1", headers=who("alice"))).status_code == 204
    children = (await api.get("/v1/sessions/tree/subagents", headers=who("alice"))).json()["sessions"]
    assert [s["id"] for s in children] == ["tree.child-2"]
    assert (await api.get("/v1/sessions/tree/page", headers=who("alice"))).status_code == 200


async def test_an_id_created_again_is_a_new_incarnation_that_nothing_old_reaches(api: httpx.AsyncClient) -> None:
    old_state = (await api.get("/v1/sessions/tree", headers=who("alice"))).json()
    old, head = old_state["header"]["incarnation"], old_state["headSeq"]
    pinned = {"through": str(head), "incarnation": old}
    page = await api.get("/v1/sessions/tree/page", params=pinned, headers=who("alice"))
    assert page.status_code == 200 and page.headers["session-incarnation"] == old
    etag = page.headers["etag"]
    assert etag.startswith(f'"{old}.')
    unpinned = await api.get("/v1/sessions/tree/page", params={"through": str(head)}, headers=who("alice"))
    assert unpinned.headers["etag"] == etag and unpinned.headers["cache-control"] == "private, no-cache"

    assert (await api.delete("/v1/sessions/tree", headers=who("alice"))).status_code == 204
    created = await api.post("/v1/sessions", json={"id": "tree", "createdAt": 1_700_000_000_000}, headers=who("alice"))
    assert created.status_code == 201
    new = created.json()["incarnation"]
    assert new != old and created.json() == {"id": "tree", "headSeq": -1, "incarnation": new}
    events = (
        b'{"events":['
        + b",".join(b'{"type":"note","seq":%d,"time":0,"data":{"new":true}}' % seq for seq in range(head + 1))
        + b"]}"
    )
    appended = await api.post(
        "/v1/sessions/tree/events", content=events, headers={**who("alice"), "Content-Type": "application/json"}
    )
    assert appended.status_code == 201

    stale = await api.get("/v1/sessions/tree/page", params=pinned, headers=who("alice"))
    assert stale.status_code == 404 and stale.json()["error"]["code"] == "session_not_found"
    revalidated = await api.get(
        "/v1/sessions/tree/page", params={"through": str(head)}, headers={**who("alice"), "If-None-Match": etag}
    )
    assert revalidated.status_code == 200 and revalidated.headers["etag"] != etag
    assert revalidated.headers["session-incarnation"] == new and b'"new":true' in revalidated.content
    for resume in ({"Last-Event-ID": f"{old}:{head}"}, {}):
        params = {} if resume else {"incarnation": old, "after": "0"}
        gone = await api.get("/v1/sessions/tree/follow", params=params, headers={**who("alice"), **resume})
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "session_not_found"
    fresh = await api.get("/v1/sessions/tree/page", params={"through": "0", "incarnation": new}, headers=who("alice"))
    assert fresh.headers["cache-control"] == "private, no-cache"  # token auth revalidates every page (§4.4)


@pytest.mark.parametrize("value", ["abc:", "ABC:1", "a:-2", "1234567890123456", "a" * 33 + ":1"])
async def test_a_malformed_last_event_id_is_400(api: httpx.AsyncClient, value: str) -> None:
    response = await api.get("/v1/sessions/d/follow", headers={**who("alice"), "Last-Event-ID": value})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_parameter"


async def test_a_create_may_not_name_its_incarnation(api: httpx.AsyncClient) -> None:
    body = {"id": "e", "createdAt": 1, "incarnation": "abc"}
    created = await api.post("/v1/sessions", json=body, headers=who("alice"))
    assert created.status_code == 422 and created.json()["error"]["code"] == "invalid_header"


# Expiry (docs/protocol.md §6.5).


# How far ahead a test's expiry lies: past every create the test makes before it, on a loaded machine too
# (300 ms was not, once, on CI: the child's create came after its parent had expired).
AHEAD_MS = 3000


async def past(at: int) -> None:
    """Wait until the service's clock (and a file system's coarser one) has passed ``at``."""
    while now_ms() <= at + 20:
        await anyio.sleep(0.005)


@pytest.fixture
async def expiring(store: HistoryStore) -> AsyncIterator[httpx.AsyncClient]:
    # No sweep of its own: each test sweeps when it says so.
    settings = Settings(auth="token", tokens=("t",), sweep_interval=0, sweep_batch=2, retention_ms=30 * 86_400_000)
    async with serving(create_app(settings, store=store)) as client:
        yield client


def service_of(client: httpx.AsyncClient) -> HistoryService:
    service: HistoryService = client.app_state["service"]  # type: ignore[attr-defined]
    return service


async def create(client: httpx.AsyncClient, body: dict[str, Any], **params: str) -> httpx.Response:
    return await client.post("/v1/sessions", json=body, params=params, headers=who("alice"))


async def test_a_session_expires_at_its_own_time_and_answers_as_unknown_before_the_sweep(
    expiring: httpx.AsyncClient,
) -> None:
    assert (await create(expiring, {"id": "gone", "createdAt": 1}, ttlMs="1")).status_code == 201
    assert (await create(expiring, {"id": "kept", "createdAt": 2})).status_code == 201
    service = service_of(expiring)
    expires = (await service.store.get_session("gone")).header.expiresAt
    assert isinstance(expires, int)
    await past(expires)
    state = (await expiring.get("/v1/sessions/kept", headers=who("alice"))).json()
    # Kept by the store's retention: 30 days after its last write, its creation.
    assert 30 * 86_400_000 <= state["expiresAt"] - now_ms() + 60_000
    unknown = {"error": {"code": "session_not_found", "message": "no session 'gone'"}}
    for method, path in [
        ("GET", "/v1/sessions/gone"),
        ("GET", "/v1/sessions/gone/page"),
        ("GET", "/v1/sessions/gone/follow"),
        ("POST", "/v1/sessions/gone/close"),
        ("DELETE", "/v1/sessions/gone"),
    ]:
        response = await expiring.request(method, path, headers=who("alice"))
        assert (response.status_code, response.json()) == (404, unknown), (method, path)
    appended = await expiring.post(
        "/v1/sessions/gone/events", json={"events": [msgspec.to_builtins(plain(0))]}, headers=who("alice")
    )
    assert (appended.status_code, appended.json()) == (404, unknown)
    listed = (await expiring.get("/v1/sessions", headers=who("alice"))).json()["sessions"]
    assert [s["id"] for s in listed] == ["kept"] and listed[0]["expiresAt"] == state["expiresAt"]
    # The sweep then deletes it from the store, and counts it as expired.
    assert await service.sweep() == Swept(["gone"], [])
    with pytest.raises(SessionNotFoundError):
        await service.store.get_session("gone")
    assert (await service.store.get_session("kept")).head_seq == -1
    assert await service.sweep() == Swept([], [])
    assert (await expiring.delete("/v1/sessions/kept", headers=who("alice"))).status_code == 204
    metrics = (await expiring.get("/metrics", headers=who("alice"))).text
    assert 'history_sessions_deleted_total{reason="expired"} 1.0' in metrics
    assert 'history_sessions_deleted_total{reason="request"} 1.0' in metrics


async def test_the_sweep_deletes_in_batches_each_expired_session_with_its_tree(
    expiring: httpx.AsyncClient,
) -> None:
    service = service_of(expiring)
    expires = now_ms() + 60_000
    for k in range(5):
        assert (await create(expiring, {"id": f"s{k}", "createdAt": k, "expiresAt": expires})).status_code == 201
    kid = {"id": "s0.kid", "createdAt": 9, "parentSession": "s0", "origin": "subagent"}
    assert (await create(expiring, kid)).status_code == 201
    assert (await create(expiring, {"id": "live", "createdAt": 9})).status_code == 201
    listed = (await expiring.get("/v1/sessions", headers=who("alice"))).json()["sessions"]
    assert {s["id"]: s["expiresAt"] for s in listed if s["id"] != "live"} == {f"s{k}": expires for k in range(5)}
    # Not yet: their own time is a minute away, and the retention a month.
    assert await service.sweep() == Swept([], [])
    # A process with a retention of 1 ms: every session is past it.
    brief = HistoryService(Settings(sweep_interval=0, sweep_batch=2, retention_ms=1), service.store)
    await past(now_ms())
    swept = await brief.sweep()
    assert swept is not None and sorted(swept.deleted) == ["live", "s0", "s0.kid", "s1", "s2", "s3", "s4"]
    assert await service.store.list_sessions("alice", limit=10) == []


async def test_a_create_gives_expires_at_or_ttl_ms_and_never_a_past_time(expiring: httpx.AsyncClient) -> None:
    both = await create(expiring, {"id": "a", "createdAt": 1, "expiresAt": now_ms() + 60_000}, ttlMs="5")
    assert (both.status_code, both.json()["error"]["code"]) == (422, "invalid_header")
    assert "not both" in both.json()["error"]["message"]
    late = await create(expiring, {"id": "a", "createdAt": 1, "expiresAt": 5})
    assert (late.status_code, late.json()["error"]["code"]) == (422, "invalid_header")
    for bad in ("0", "-1", "x", "9007199254740992"):
        response = await create(expiring, {"id": "a", "createdAt": 1}, ttlMs=bad)
        assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_parameter"), bad
    before = now_ms()
    assert (await create(expiring, {"id": "a", "createdAt": 1}, ttlMs="60000")).status_code == 201
    header = (await expiring.get("/v1/sessions/a", headers=who("alice"))).json()["header"]
    assert before + 60_000 <= header["expiresAt"] <= now_ms() + 60_000


async def test_a_session_stays_while_a_session_below_it_is_live(expiring: httpx.AsyncClient) -> None:
    expires = now_ms() + AHEAD_MS
    assert (await create(expiring, {"id": "p", "createdAt": 1, "expiresAt": expires})).status_code == 201
    kid = {"id": "p.kid", "createdAt": 2, "parentSession": "p", "origin": "subagent"}
    assert (await create(expiring, kid)).status_code == 201
    await past(expires)
    # The parent's own time has passed, but its child is written to and read as before: the tree stays.
    appended = await expiring.post(
        "/v1/sessions/p.kid/events", json={"events": [msgspec.to_builtins(plain(0))]}, headers=who("alice")
    )
    assert appended.status_code == 201
    assert (await expiring.get("/v1/sessions/p/subagents/p.kid/page", headers=who("alice"))).status_code == 200
    state = (await expiring.get("/v1/sessions/p", headers=who("alice"))).json()
    assert state["expiresAt"] > now_ms()  # the child's: a month after its last write
    service = service_of(expiring)
    assert await service.sweep() == Swept([], [])
    assert (await service.store.get_session("p.kid")).head_seq == 0


async def test_a_childrens_listing_pages_past_expired_children(expiring: httpx.AsyncClient) -> None:
    assert (await create(expiring, {"id": "p", "createdAt": 1})).status_code == 201
    soon = now_ms() + AHEAD_MS
    for k in range(5):
        body = {"id": f"p.c{k}", "createdAt": 10 + k, "parentSession": "p", "origin": "subagent"}
        if k >= 3:
            body["expiresAt"] = soon  # the two newest
        assert (await create(expiring, body)).status_code == 201
    await past(soon)
    seen, cursor = [], None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        body = (await expiring.get("/v1/sessions/p/subagents", params=params, headers=who("alice"))).json()
        seen += [s["id"] for s in body["sessions"]]
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert seen == ["p.c2", "p.c1", "p.c0"]


async def test_an_expired_id_not_yet_swept_may_be_created_again(expiring: httpx.AsyncClient) -> None:
    assert (await create(expiring, {"id": "s", "createdAt": 1}, ttlMs="1")).status_code == 201
    service = service_of(expiring)
    first = await service.store.get_session("s")
    assert isinstance(first.header.expiresAt, int)
    await past(first.header.expiresAt)
    created = await create(expiring, {"id": "s", "createdAt": 2})
    assert created.status_code == 201 and created.json()["incarnation"] != first.incarnation
    assert (await expiring.get("/v1/sessions/s", headers=who("alice"))).json()["header"]["createdAt"] == 2


async def test_a_sweep_that_cannot_delete_one_session_deletes_the_others_and_the_service_serves_on(
    store: HistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(sweep_interval=0.01, sweep_batch=2)
    for k in range(5):
        await store.create_session(SessionHeader(id=f"s{k}", createdAt=k, expiresAt=1_000))
    delete = store.delete_session

    async def failing(session_id: str, *, life: Life | None = None) -> list[str]:
        if session_id == "s1":
            raise StoreError("store unavailable: the disk is gone")
        return await delete(session_id, life=life)

    monkeypatch.setattr(store, "delete_session", failing)
    service = HistoryService(settings, store)
    swept = await service.sweep()
    assert swept is not None and swept.failed == ["s1"] and sorted(swept.deleted) == ["s0", "s2", "s3", "s4"]
    # The sweeper in an app: a failure of its own is logged, and the app goes on answering.
    async with serving(create_app(settings, store=store)) as client:
        await anyio.sleep(0.1)
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/v1/sessions/s1")).status_code == 404

"""The client's operations as plans (`history_client.calls`): requests built and answers read without I/O."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from codec import SessionHeader
from history_client import ProtocolError, ServiceError, SessionCreated, SessionDeletedError
from history_client.calls import Call, Calls
from history_client.follow import Connect
from history_client.history import Fetch, PageAnswer

PAGE = b'{"records": [], "hasMore": false, "fromSeq": 0, "toSeq": 0}'


def calls(**overrides: object) -> Calls:
    settings: dict[str, object] = {
        "token": "t",
        "principal": "alice",
        "timeout": 5.0,
        "follow_read_timeout": 30.0,
        "max_messages": 50,
        "max_bytes": None,
        "backoff": None,
    }
    settings.update(overrides)
    return Calls(**settings)  # type: ignore[arg-type]


def answer(call: Call[Any], status: int, content: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    request = call.build(httpx.Client(base_url="http://test"))
    return httpx.Response(status, content=content, headers=headers, request=request)


def test_a_page_call_names_its_cursor_the_defaults_and_the_caller() -> None:
    call = calls().page("s", child="c", through=9, incarnation="i1")
    request = call.build(httpx.Client(base_url="http://test"))
    assert (request.method, request.url.path) == ("GET", "/v1/sessions/s/subagents/c/page")
    assert dict(request.url.params) == {"through": "9", "maxMessages": "50", "incarnation": "i1"}
    assert request.headers["Authorization"] == "Bearer t" and request.headers["X-Principal"] == "alice"


def test_page_body_is_the_page_request_read_as_its_bare_body() -> None:
    plans = calls()
    page, body = plans.page("s", before=4), plans.page_body("s", before=4)
    assert (body.method, body.path, body.params, body.headers) == (page.method, page.path, page.params, page.headers)
    assert body.read(answer(body, 200, PAGE)) == PAGE
    assert plans.page_body.__doc__ and "raw JSON body" in plans.page_body.__doc__


def test_a_read_that_named_an_incarnation_maps_a_404_to_deleted() -> None:
    call = calls().page("s", incarnation="i1")
    gone = b'{"error": {"code": "session_not_found", "message": "no"}}'
    with pytest.raises(SessionDeletedError):
        call.read(answer(call, 404, gone))
    plain = calls().page("s")
    with pytest.raises(ServiceError) as caught:
        plain.read(answer(plain, 404, gone))
    assert type(caught.value) is ServiceError and caught.value.code == "session_not_found"


def test_writes_post_json_and_a_delete_reads_no_body() -> None:
    plans = calls()
    create = plans.create_session(SessionHeader(id="s", createdAt=1))
    assert (create.method, create.path, create.headers["Content-Type"]) == ("POST", "/v1/sessions", "application/json")
    created = b'{"id": "s", "headSeq": -1, "incarnation": "0123456789ab", "added": "later"}'
    assert create.read(answer(create, 201, created)) == SessionCreated("s", -1, "0123456789ab")
    with pytest.raises(ProtocolError, match="/v1/sessions: Object missing required field `incarnation`"):
        create.read(answer(create, 201, b'{"id": "s", "headSeq": -1}'))
    delete = plans.delete_session("s")
    assert (delete.method, delete.path, delete.body) == ("DELETE", "/v1/sessions/s", None)
    assert delete.read(answer(delete, 204, b"")) is None
    with pytest.raises(ServiceError):
        delete.read(answer(delete, 404, b""))


def test_a_walks_fetch_asks_for_the_plans_cursor_and_incarnation_with_the_page_defaults() -> None:
    plans = calls()
    fetch = plans.fetch("/v1/sessions/s/page", Fetch(through=7, incarnation="i1"))
    assert dict(fetch.params or {}) == {"through": 7, "maxMessages": 50, "incarnation": "i1"}
    read = fetch.read(answer(fetch, 200, PAGE, {"Session-Incarnation": "i1"}))
    assert read == PageAnswer(PAGE, "i1")


def test_listings_and_a_session_read_ask_the_addresses_and_parameters_of_the_protocol() -> None:
    plans = calls()
    client = httpx.Client(base_url="http://test")
    listed = plans.list_sessions(limit=20, cursor="c1", state="closed").build(client)
    assert (listed.method, listed.url.path, dict(listed.url.params)) == (
        "GET",
        "/v1/sessions",
        {"limit": "20", "cursor": "c1", "state": "closed"},
    )
    children = plans.subagents("p:1").build(client)
    assert (children.url.raw_path, dict(children.url.params)) == (b"/v1/sessions/p%3A1/subagents", {})
    state = plans.session("p", child="c").build(client)
    assert (state.method, state.url.path) == ("GET", "/v1/sessions/p/subagents/c")
    assert state.headers["X-Principal"] == "alice"


def test_a_follow_that_stops_when_idle_reads_no_longer_than_idle_before_it_looks() -> None:
    plans = calls(follow_read_timeout=30.0)
    client = httpx.Client(base_url="http://test")
    for idle, read in ((None, 30.0), (2.5, 2.5), (90.0, 30.0)):
        walk = plans.follow("s", idle=idle)
        request = plans.connect(client, walk, Connect(None))
        assert request.extensions["timeout"]["read"] == read, idle

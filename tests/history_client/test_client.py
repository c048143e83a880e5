"""The client shells: requests, headers, typed errors and ownership of the httpx client."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from codec import Event, SessionHeader, SessionIdError, encode
from history_client import (
    Appended,
    AsyncHistoryClient,
    HistoryClient,
    PageContinuityError,
    ProtocolError,
    ServiceError,
    SessionCreated,
    SessionDeletedError,
    TransportError,
)
from testing.events import make_events
from testing.wire import page_body, records_of

LOG = make_events(60)


def page_handler(seen: list[httpx.Request]) -> Any:
    def handler(request):
        seen.append(request)
        return httpx.Response(200, content=page_body(LOG[20:60]))

    return handler


def test_page_sends_parameters_credentials_and_child_address():
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(page_handler(seen))
    with HistoryClient("http://test", token="t0k", principal="ann", transport=transport, max_messages=7) as client:
        page = client.page("{{s}}", child="c@d:e", through=59, max_bytes=1000)
    request = seen[0]
    assert request.url.raw_path == (
        b"/v1/sessions/%7B%7Bs%7D%7D/subagents/c%40d%3Ae/page?through=59&maxMessages=7&maxBytes=1000"
    )
    assert request.headers["authorization"] == "Bearer t0k"
    assert request.headers["x-principal"] == "ann"
    assert list(page.events()) == LOG[20:60]


def test_async_page_matches_sync_page():
    async def main():
        transport = httpx.MockTransport(page_handler([]))
        async with AsyncHistoryClient("http://test", transport=transport) as client:
            return list((await client.page("s", before=60)).events())

    assert anyio.run(main) == LOG[20:60]


@pytest.mark.parametrize(
    ("response", "code", "message"),
    [
        (
            httpx.Response(404, json={"error": {"code": "session_not_found", "message": "no such"}}),
            "session_not_found",
            "no such",
        ),
        (
            httpx.Response(403, json={"error": {"code": "subagent_child", "message": "read it as a child"}}),
            "subagent_child",
            "read it as a child",
        ),
        (httpx.Response(502, text="<html>bad gateway</html>"), "http_502", "Bad Gateway"),
        (httpx.Response(400, json={"error": "flat"}), "http_400", "Bad Request"),
    ],
    ids=["404", "403", "502-html", "400-odd-body"],
)
def test_non_2xx_raises_service_error_with_status_code_and_message(response, code, message):
    with HistoryClient("http://test", transport=httpx.MockTransport(lambda request: response)) as client:
        with pytest.raises(ServiceError) as caught:
            client.page("s")
    error = caught.value
    assert (error.status_code, error.code, error.message) == (response.status_code, code, message)
    assert error.response is response


def test_connection_failures_raise_transport_error():
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    with HistoryClient("http://test", transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(TransportError, match="connection refused"):
            client.page("s")


def test_a_client_closes_only_the_http_client_it_created():
    shared = httpx.Client(transport=httpx.MockTransport(page_handler([])), base_url="http://test")
    with HistoryClient(http_client=shared) as client:
        client.page("s")
    assert not shared.is_closed
    shared.close()
    own = HistoryClient("http://test", transport=httpx.MockTransport(page_handler([])))
    with own:
        pass
    assert own._http.is_closed


def test_create_session_and_append_post_exact_json():
    bodies = []

    def handler(request):
        bodies.append((request.url.path, request.content))
        if request.url.path.endswith("/events"):
            return httpx.Response(201, json={"firstSeq": 0, "headSeq": 1})
        return httpx.Response(201, json={"id": "s", "headSeq": -1, "incarnation": "0123456789ab"})

    with HistoryClient("http://test", transport=httpx.MockTransport(handler)) as client:
        assert client.create_session(SessionHeader(id="s", createdAt=0)) == SessionCreated("s", -1, "0123456789ab")
        assert client.append("s", LOG[:2]) == Appended(first_seq=0, head_seq=1)
    assert bodies[0] == ("/v1/sessions", b'{"type":"session","version":0,"id":"s","createdAt":0}')
    assert bodies[1][0] == "/v1/sessions/s/events" and bodies[1][1].startswith(b'{"events":[{"type":"user/message"')


def broken_row_body() -> bytes:
    records = records_of(LOG[20:60])
    # The first record is a row; it loses a member while dt still claims it, so the cover
    # checks pass and only the row's own validation can catch it.
    del records[0]["chunks"]["data"]["texts"][-1]
    return encode({"records": records, "hasMore": True, "fromSeq": 20, "toSeq": 60})


BROKEN_BODIES = {
    "not-at-cursor": (page_body(LOG[20:59]), PageContinuityError, "requested cursor"),
    "overlap": (
        page_body(LOG[20:60], records=records_of(LOG[20:40]) + records_of(LOG[39:60])),
        PageContinuityError,
        "overlaps the previous record",
    ),
    "gap": (
        page_body(LOG[20:60], records=records_of(LOG[20:40]) + records_of(LOG[41:60])),
        PageContinuityError,
        "leaves a gap",
    ),
    "inverted": (page_body([], from_seq=61, to_seq=60), PageContinuityError, "inverted page range"),
    "malformed-row": (broken_row_body(), ProtocolError, "dt has"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_BODIES))
def test_a_broken_page_from_the_service_raises_before_any_event(name: str) -> None:
    body, error, message = BROKEN_BODIES[name]
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    with HistoryClient("http://test", transport=transport) as client:
        with pytest.raises(error, match=message):
            client.page("s", through=59)
        received: list[Event] = []
        with pytest.raises(error, match=message):
            received.extend(client.iter_history("s", after=19, through=59))
        assert received == []

    async def main() -> None:
        async with AsyncHistoryClient("http://test", transport=transport) as client:
            with pytest.raises(error, match=message):
                await client.page("s", through=59)

    anyio.run(main)


@pytest.mark.parametrize(("session", "child"), [("a/b", None), ("s", "c d"), ("..", None)])
def test_an_id_outside_the_rule_is_refused_before_any_request(session, child):
    seen: list[httpx.Request] = []
    with HistoryClient("http://test", transport=httpx.MockTransport(page_handler(seen))) as client:
        with pytest.raises(SessionIdError):
            client.page(session, child=child)
    assert seen == []


def deletes(seen: list[httpx.Request]) -> Any:
    def handler(request):
        seen.append(request)
        if request.url.path == "/v1/sessions/gone":
            return httpx.Response(404, json={"error": {"code": "session_not_found", "message": "no session 'gone'"}})
        return httpx.Response(204)

    return handler


def test_delete_session_sends_delete_to_the_sessions_own_address_on_both_clients():
    seen: list[httpx.Request] = []
    with HistoryClient("http://test", token="t0k", transport=httpx.MockTransport(deletes(seen))) as client:
        client.delete_session("{{s}}")
        with pytest.raises(ServiceError) as caught:
            client.delete_session("gone")
    assert type(caught.value) is ServiceError and (caught.value.status_code, caught.value.code) == (
        404,
        "session_not_found",
    )

    async def main() -> None:
        async with AsyncHistoryClient("http://test", transport=httpx.MockTransport(deletes(seen))) as client:
            await client.delete_session("s.child-1")
            with pytest.raises(ServiceError, match="session_not_found"):
                await client.delete_session("gone")

    anyio.run(main)
    assert [(request.method, request.url.raw_path, request.content) for request in seen] == [
        ("DELETE", b"/v1/sessions/%7B%7Bs%7D%7D", b""),
        ("DELETE", b"/v1/sessions/gone", b""),
        ("DELETE", b"/v1/sessions/s.child-1", b""),
        ("DELETE", b"/v1/sessions/gone", b""),
    ]
    assert seen[0].headers["authorization"] == "Bearer t0k"
    with HistoryClient("http://test", transport=httpx.MockTransport(deletes([]))) as client:
        with pytest.raises(SessionIdError):
            client.delete_session("a/b")


def incarnated_pages(seen: list[httpx.Request]) -> Any:
    def handler(request):
        seen.append(request)
        if request.url.params.get("incarnation", "5d0c1e9a7b22") != "5d0c1e9a7b22":
            return httpx.Response(404, json={"error": {"code": "session_not_found", "message": "no session 's'"}})
        return httpx.Response(200, content=page_body(LOG[20:60]), headers={"Session-Incarnation": "5d0c1e9a7b22"})

    return handler


def test_a_page_names_its_incarnation_and_a_page_asked_of_a_gone_one_raises_session_deleted():
    seen: list[httpx.Request] = []
    with HistoryClient("http://test", transport=httpx.MockTransport(incarnated_pages(seen))) as client:
        assert client.page("s").incarnation == "5d0c1e9a7b22"
        page = client.page("s", through=59, incarnation="5d0c1e9a7b22")
        assert page.incarnation == "5d0c1e9a7b22" and list(page.events()) == LOG[20:60]
        with pytest.raises(SessionDeletedError) as caught:
            client.page("s", through=59, incarnation="77aa00bb11cc")
        assert caught.value.incarnation == "77aa00bb11cc"
        with pytest.raises(SessionDeletedError):
            client.page_body("s", incarnation="77aa00bb11cc")
    assert [request.url.params.get("incarnation") for request in seen] == [
        None,
        "5d0c1e9a7b22",
        "77aa00bb11cc",
        "77aa00bb11cc",
    ]

    async def main() -> None:
        async with AsyncHistoryClient("http://test", transport=httpx.MockTransport(incarnated_pages([]))) as client:
            assert (await client.page("s", incarnation="5d0c1e9a7b22")).incarnation == "5d0c1e9a7b22"
            with pytest.raises(SessionDeletedError):
                await client.page("s", incarnation="77aa00bb11cc")

    anyio.run(main)


def test_a_page_of_another_incarnation_than_the_one_asked_for_is_a_protocol_error():
    def handler(request):
        return httpx.Response(200, content=page_body(LOG[20:60]), headers={"Session-Incarnation": "77aa00bb11cc"})

    with HistoryClient("http://test", transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(ProtocolError, match="names incarnation 77aa00bb11cc, but the read is of 5d0c1e9a7b22"):
            client.page("s", incarnation="5d0c1e9a7b22")

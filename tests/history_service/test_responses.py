"""PartsResponse: a body sent as its parts, in order, with its length, never joined whole."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from history_service.responses import SEND_SIZE, JsonResponse, PartsResponse
from testing.asgi import serving

BIG = bytes(range(256)) * (SEND_SIZE // 64)
PARTS: list[bytes | memoryview] = [
    b"{",
    memoryview(b"xx" * 50)[1:],
    BIG,
    *[b"y" * 1000] * 600,
    memoryview(BIG)[3:],
    b"}",
]
BODY = b"".join(PARTS)


def sends(parts: list[bytes | memoryview], method: str = "GET") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        response = PartsResponse(parts, sum(map(len, parts)), media_type="application/json", headers={"X-A": "1"})
        await response({"type": "http", "method": method}, None, send)

    anyio.run(run)
    return sent


def test_the_body_is_the_parts_in_order_with_its_length() -> None:
    sent = sends(PARTS)
    start, bodies = sent[0], sent[1:]
    headers = dict(start["headers"])
    assert start["status"] == 200 and headers[b"content-length"] == str(len(BODY)).encode()
    assert headers[b"content-type"] == b"application/json" and headers[b"x-a"] == b"1"
    assert b"".join(message["body"] for message in bodies) == BODY
    assert all(type(message["body"]) is bytes for message in bodies)
    assert [message["more_body"] for message in bodies] == [True] * (len(bodies) - 1) + [False]


def test_sends_gather_small_parts_and_keep_large_ones_whole() -> None:
    chunks = [message["body"] for message in sends(PARTS)[1:-1]]
    assert BIG in chunks or any(chunk.endswith(BIG) for chunk in chunks)
    assert len(chunks) <= len(BODY) // SEND_SIZE + 2
    assert all(len(chunk) < 2 * SEND_SIZE + len(BIG) for chunk in chunks)


def test_a_head_request_gets_the_headers_and_no_body() -> None:
    sent = sends(PARTS, method="HEAD")
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(BODY)).encode()
    assert [message["body"] for message in sent[1:]] == [b""]


@pytest.mark.anyio
async def test_through_an_http_client() -> None:
    async def endpoint(request: Request) -> PartsResponse:
        return PartsResponse(PARTS, len(BODY), media_type="application/json", headers={})

    async with serving(Starlette(routes=[Route("/", endpoint)])) as client:
        response = await client.get("/")
    assert response.content == BODY and response.headers["content-length"] == str(len(BODY))
    assert isinstance(response, httpx.Response)


def test_a_small_body_is_one_send_that_ends_it() -> None:
    sent = sends([b'{"records":[', b"1", b"]}"])
    assert [(message["body"], message["more_body"]) for message in sent[1:]] == [(b'{"records":[1]}', False)]
    assert [message["body"] for message in sends([])[1:]] == [b""]


@pytest.mark.parametrize("status", [200, 201, 409, 503])
def test_a_json_response_has_starlettes_headers_made_directly(status: int) -> None:
    body = b'{"ok":true}'
    made = JsonResponse(body, status)
    assert (made.status_code, made.body) == (status, body)
    assert made.raw_headers == Response(body, status_code=status, media_type="application/json").raw_headers


@pytest.mark.parametrize("status", [101, 204, 304])
def test_a_json_response_refuses_a_status_without_a_body(status: int) -> None:
    with pytest.raises(ValueError, match="has no body"):
        JsonResponse(b"{}", status)

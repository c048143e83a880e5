"""CORS: Starlette's middleware answers for the listed origins only, on every answer, errors and streams included."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from codec import encode
from history_service.app import create_app
from history_service.cli import launcher, program as cli
from history_service.cors import ALLOW_HEADERS, EXPOSE_HEADERS, MAX_AGE
from history_service.settings import ServerSettings, Settings
from persistence import SessionSummary
from persistence.memory import MemoryStore
from testing.asgi import serving
from testing.events import text
from testing.servers import free_port, serve_in_thread

pytestmark = pytest.mark.anyio

ALLOWED = "https://app.example"
OTHER = "https://evil.example"
CORS = Settings(cors_origins=(ALLOWED, "http://127.0.0.1:5173"))
TOKEN = {"Authorization": "Bearer t", "X-Principal": "alice"}
JSON = {"Content-Type": "application/json"}


def preflight(origin: str, method: str = "GET", headers: str = "authorization,x-principal") -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers}


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {name: value for name, value in response.headers.items() if name.startswith("access-control-")}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(CORS, store=MemoryStore())) as client:
        response = await client.post("/v1/sessions", json={"id": "s", "createdAt": 0})
        assert response.status_code == 201
        response = await client.post(
            "/v1/sessions/s/events", content=encode({"events": [text(0, 0, "hi")]}), headers=JSON
        )
        assert response.status_code == 201
        yield client


async def test_cors_is_off_by_default() -> None:
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        simple = await client.get("/v1/sessions", headers={"Origin": ALLOWED})
        refused = await client.options("/v1/sessions", headers=preflight(ALLOWED))
    assert simple.status_code == 200 and cors_headers(simple) == {}
    assert "origin" not in simple.headers.get("vary", "").lower()
    # No middleware answers a preflight: the router refuses the method, as before CORS existed.
    assert refused.status_code == 405 and cors_headers(refused) == {}


async def test_an_allowed_origin_is_echoed_with_the_exposed_headers(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/sessions/s/page", params={"through": 0}, headers={"Origin": ALLOWED})
    assert response.status_code == 200
    assert cors_headers(response) == {
        "access-control-allow-origin": ALLOWED,
        "access-control-expose-headers": ", ".join(EXPOSE_HEADERS),
    }
    # The exposed headers are there to read, and caches keep one answer per origin.
    assert {"etag", "server-timing", "x-request-id"} <= set(response.headers)
    assert response.headers["vary"] == "Accept-Encoding, Origin"


async def test_a_refused_origin_gets_no_allow_origin(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/sessions/s/page", headers={"Origin": OTHER})
    # The service still answers; it is the browser that withholds the answer from the page.
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers
    assert "access-control-allow-credentials" not in response.headers
    assert "Origin" in response.headers["vary"]


async def test_a_preflight_from_an_allowed_origin_allows_the_token_headers(client: httpx.AsyncClient) -> None:
    response = await client.options("/v1/sessions/s/page", headers=preflight(ALLOWED))
    assert response.status_code == 200
    headers = cors_headers(response)
    assert headers["access-control-allow-origin"] == ALLOWED
    # PUT and HEAD for the Durable Streams at /ds (docs/protocol.md §13).
    assert headers["access-control-allow-methods"] == "GET, HEAD, POST, PUT, DELETE"
    assert headers["access-control-max-age"] == str(MAX_AGE) == "600"
    allowed = {name.strip().lower() for name in headers["access-control-allow-headers"].split(",")}
    assert {name.lower() for name in ALLOW_HEADERS} <= allowed
    assert "access-control-allow-credentials" not in headers


@pytest.mark.parametrize(
    ("method", "requested"),
    [
        ("GET", "authorization,x-principal"),
        ("GET", "last-event-id"),
        ("GET", "If-None-Match, X-Request-ID"),
        ("POST", "authorization,x-principal,content-type,content-encoding"),
    ],
    ids=["page-with-token", "follow-resume", "conditional-page", "append"],
)
async def test_every_request_the_clients_send_passes_its_preflight(
    client: httpx.AsyncClient, method: str, requested: str
) -> None:
    response = await client.options("/v1/sessions/s/events", headers=preflight(ALLOWED, method, requested))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("origin", "method", "requested", "refused"),
    [
        (OTHER, "GET", "authorization,x-principal", "origin"),
        ("https://app.example.evil.example", "GET", "authorization", "origin"),
        ("null", "GET", "authorization", "origin"),
        (ALLOWED, "PATCH", "authorization", "method"),
        (ALLOWED, "GET", "authorization,cookie", "headers"),
    ],
    ids=["other-origin", "suffixed-origin", "opaque-origin", "method", "header"],
)
async def test_a_preflight_outside_the_policy_is_refused(
    client: httpx.AsyncClient, origin: str, method: str, requested: str, refused: str
) -> None:
    response = await client.options("/v1/sessions/s/page", headers=preflight(origin, method, requested))
    assert response.status_code == 400
    assert response.text == f"Disallowed CORS {refused}"
    assert response.headers.get("access-control-allow-origin") == (ALLOWED if origin == ALLOWED else None)


async def test_error_answers_carry_the_cors_headers() -> None:
    settings = Settings(cors_origins=(ALLOWED,), auth="token", tokens=("t",), max_body_bytes=1000)
    async with serving(create_app(settings, store=MemoryStore())) as client:
        origin = {"Origin": ALLOWED}
        answers = {
            "401": await client.get("/v1/sessions", headers=origin),
            "404": await client.get("/v1/sessions/missing/page", headers={**origin, **TOKEN}),
            "405": await client.post("/v1/sessions/missing/page", headers={**origin, **TOKEN}),
            "413": await client.post(
                "/v1/sessions", content=b"[" + b"0," * 1000 + b"0]", headers={**origin, **TOKEN, **JSON}
            ),
            "422": await client.post("/v1/sessions", json={"id": 5}, headers={**origin, **TOKEN}),
        }
    for status, response in answers.items():
        assert str(response.status_code) == status, response.text
        assert response.headers["access-control-allow-origin"] == ALLOWED, status
        # The page can read what went wrong, not just that something did.
        assert response.json()["error"]["code"], status
    assert answers["401"].headers["www-authenticate"] == "Bearer"


class FailingStore(MemoryStore):
    async def list_sessions(self, owner: str, **listing: Any) -> list[SessionSummary]:
        raise RuntimeError("a bug")


async def test_an_unexpected_failure_is_answered_500_with_the_cors_headers_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(Settings(cors_origins=(ALLOWED,)), store=FailingStore())
    async with serving(app, raise_app_exceptions=False) as client:
        with caplog.at_level(logging.ERROR, logger="history_service"):
            response = await client.get("/v1/sessions", headers={"Origin": ALLOWED, "X-Request-ID": "bug-1"})
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "internal", "message": "internal server error"}}
    assert response.headers["access-control-allow-origin"] == ALLOWED
    # Answered inside the access log now, the 500 carries its request id too.
    assert response.headers["x-request-id"] == "bug-1"
    failures = [record for record in caplog.records if record.getMessage().startswith("unhandled error")]
    assert len(failures) == 1 and "RuntimeError: a bug" in caplog.text


async def test_a_follow_stream_streams_through_the_middleware() -> None:
    settings = Settings(cors_origins=(ALLOWED,), store_url="memory://")
    with serve_in_thread(settings) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            assert (await http.post("/v1/sessions", json={"id": "s", "createdAt": 0})).status_code == 201
            await append(http, 0)
            headers = {"Origin": ALLOWED, "Last-Event-ID": "-1"}
            with anyio.fail_after(30):
                async with http.stream("GET", "/v1/sessions/s/follow", headers=headers) as stream:
                    assert stream.headers["content-type"].startswith("text/event-stream")
                    assert stream.headers["access-control-allow-origin"] == ALLOWED
                    seqs = []
                    async for line in stream.aiter_lines():
                        if line.startswith("data: "):
                            seqs.append(json.loads(line[6:])["seq"])
                            if len(seqs) == 1:
                                # A live event, appended only once the stream is open, still arrives.
                                await append(http, 1)
                            else:
                                break
    assert seqs == [0, 1]


async def append(http: httpx.AsyncClient, seq: int) -> None:
    body = encode({"events": [text(seq, seq, f"t{seq}")]})
    response = await http.post("/v1/sessions/s/events", content=body, headers=JSON)
    assert response.status_code == 201, response.text


def test_the_settings_read_the_allow_list_from_the_environment() -> None:
    settings = Settings.from_env({"HISTORY_CORS_ORIGINS": "https://app.example, http://127.0.0.1:5173,"})
    assert settings.cors_origins == ("https://app.example", "http://127.0.0.1:5173")
    assert Settings.from_env({}).cors_origins == ()


@pytest.mark.parametrize(
    ("origin", "message"),
    [
        ("*", "wildcards are refused"),
        ("https://*.example", "wildcards are refused"),
        ("https://app.example/", "use 'https://app.example'"),
        ("https://app.example/ui", "use 'https://app.example'"),
        ("https://App.Example", "use 'https://app.example'"),
        ("https://app.example:443", "use 'https://app.example'"),
        ("app.example", "is not http(s)://host[:port]"),
        ("null", "is not http(s)://host[:port]"),
        ("file:///tmp/x", "is not http(s)://host[:port]"),
        ("https://app.example:99999", "invalid port"),
    ],
)
def test_an_origin_no_browser_sends_is_refused(origin: str, message: str) -> None:
    with pytest.raises(ValueError, match="CORS origin") as refused:
        Settings(cors_origins=(origin,))
    assert message in str(refused.value) and "HISTORY_CORS_ORIGINS" in str(refused.value)


def test_serve_takes_repeated_cors_origin_flags_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[Settings] = []

    def serve(sock: Any, server: ServerSettings, *, demo: bool, out: Any, err: Any) -> int:
        served.append(server.app)
        return 0

    monkeypatch.setattr(launcher, "serve", serve)
    monkeypatch.setenv("HISTORY_CORS_ORIGINS", "https://env.example")
    # `serve` binds its port before it serves: a free one, so a server on 8000 changes nothing.
    base = ["serve", "--store", "memory://", "--port", str(free_port())]
    argv = [*base, "--cors-origin", "https://a.example", "--cors-origin", "http://[::1]:8080"]
    assert cli.main(argv, out=io.StringIO(), err=io.StringIO()) == 0
    assert cli.main(base, out=io.StringIO(), err=io.StringIO()) == 0
    assert [settings.cors_origins for settings in served] == [
        ("https://a.example", "http://[::1]:8080"),
        ("https://env.example",),
    ]
    err = io.StringIO()
    assert cli.main([*base, "--cors-origin", "*"], out=io.StringIO(), err=err) == 1
    assert err.getvalue().startswith("history-service: error: invalid setting: CORS origin '*': wildcards are refused")

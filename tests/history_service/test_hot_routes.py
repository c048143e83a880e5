"""The hot routes: served past Starlette's layers, with the same answers, errors included, as Starlette's path."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

import persistence.base
from codec import encode
from history_service.app import create_app
from history_service.hot_routes import HOT, HotRoutes
from history_service.scenarios import multi_turn
from history_service.settings import Settings
from persistence import MemoryStore
from testing.asgi import serving

pytestmark = pytest.mark.anyio

# Headers that differ per request whichever path serves it.
_VARYING = {"x-request-id", "server-timing"}
_EVENTS = multi_turn(seed=5, turns=2, max_run=4)
_CREATE = b'{"id":"s1","createdAt":1700000000000}'
_JSON = {"content-type": "application/json"}


def _body(events: list[Any]) -> bytes:
    return b'{"events":[' + b",".join(encode(event) for event in events) + b"]}"


def _requests() -> list[tuple[str, str, bytes | None, dict[str, str]]]:
    """Requests for every hot route, the answers a client may get from each, errors among them."""
    json_type = {"content-type": "application/json"}
    child = b'{"id":"kid","createdAt":1700000000000,"parentSession":"s1","origin":"subagent"}'
    return [
        ("GET", "/healthz", None, {}),
        ("POST", "/v1/sessions", b'{"id":"s1","createdAt":1700000000000}', json_type),
        ("POST", "/v1/sessions/s1/events", _body(_EVENTS[:10]), json_type),
        ("POST", "/v1/sessions/s1/events", _body(_EVENTS[:10]), json_type),  # an exact re-send: 200
        ("POST", "/v1/sessions/s1/events", _body(_EVENTS[12:14]), json_type),  # past the head: 409
        ("POST", "/v1/sessions/s1/events", b'{"events":[{"type":"x"}]}', json_type),  # 422
        ("POST", "/v1/sessions/s1/events", b"{not json", json_type),  # 400
        ("POST", "/v1/sessions/s1/events", _body(_EVENTS[10:12]), {"content-type": "text/plain"}),  # 415
        ("POST", "/v1/sessions/nobody/events", _body(_EVENTS[:1]), json_type),  # 404
        ("POST", "/v1/sessions/s1/events", _body(_EVENTS[10:]), json_type),
        ("GET", "/v1/sessions/s1/page?maxMessages=2", None, {}),
        ("GET", "/v1/sessions/s1/page?maxMessages=2", None, {"accept-encoding": "gzip"}),
        ("GET", "/v1/sessions/s1/page?through=4", None, {}),
        ("GET", f"/v1/sessions/s1/page?through={len(_EVENTS) + 5}", None, {}),  # beyond the head: 400
        ("GET", "/v1/sessions/s1/page?maxMessages=0", None, {}),  # 400
        ("GET", "/v1/sessions/s1/page?bogus=1", None, {}),  # 400
        ("GET", "/v1/sessions/nobody/page", None, {}),  # 404
        ("POST", "/v1/sessions", child, json_type),
        ("GET", "/v1/sessions/s1/subagents/kid/page", None, {}),
        ("GET", "/v1/sessions/s1/subagents/stranger/page", None, {}),  # 404
        ("HEAD", "/healthz", None, {}),
        ("GET", "/healthz/", None, {}),
        ("POST", "/v1/sessions//events", b"{}", json_type),
        ("PUT", "/v1/sessions/s1/events", b"{}", json_type),  # 405
    ]


async def _answers(app: Any) -> list[tuple[int, dict[str, str], bytes]]:
    out = []
    async with serving(app, raise_app_exceptions=False) as client:
        for method, path, body, headers in _requests():
            response = await client.request(method, path, content=body, headers=headers)
            kept = {name: value for name, value in response.headers.items() if name not in _VARYING}
            out.append((response.status_code, kept, response.content))
    return out


class _Passed:
    """Counts the requests `HotRoutes` passes on to Starlette's stack."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[tuple[str, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.paths.append((scope["method"], scope["path"]))
        await self.app(scope, receive, send)


def _starlettes_path(app: Any) -> Any:
    app.hot = False
    return app


async def test_every_hot_route_answers_as_starlettes_path_does_errors_included(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same incarnations on both sides, so bodies, headers and ETags compare whole.
    monkeypatch.setattr(persistence.base, "new_incarnation", iter(f"{n:012x}" for n in range(100)).__next__)
    hot = await _answers(create_app(Settings(), store=MemoryStore()))
    monkeypatch.setattr(persistence.base, "new_incarnation", iter(f"{n:012x}" for n in range(100)).__next__)
    plain = await _answers(_starlettes_path(create_app(Settings(), store=MemoryStore())))
    statuses = [status for status, _, _ in hot]
    assert statuses[:18] == [200, 201, 201, 200, 409, 422, 400, 415, 404, 201, 200, 200, 200, 400, 400, 400, 404, 201]
    assert statuses[18:] == [200, 404, 200, 307, 404, 405]
    for (method, path, _, _), mine, theirs in zip(_requests(), hot, plain, strict=True):
        assert mine == theirs, (method, path)


async def test_the_hot_path_serves_its_routes_and_passes_on_every_other_request() -> None:
    app = create_app(Settings(), store=MemoryStore())
    passed: list[_Passed] = []

    def build() -> Any:
        stack: Any = type(app).build_middleware_stack(app)
        hot_routes = stack.app
        assert isinstance(hot_routes, HotRoutes)
        spy = _Passed(hot_routes.app)
        hot_routes.app = spy
        passed.append(spy)
        return stack

    app.build_middleware_stack = build  # type: ignore[method-assign]
    await _answers(app)
    (spy,) = passed
    assert all((method, path.partition("?")[0]) not in _hot_paths() for method, path in spy.paths), spy.paths
    assert ("HEAD", "/healthz") in spy.paths and ("GET", "/healthz/") in spy.paths
    assert ("POST", "/v1/sessions//events") in spy.paths and ("PUT", "/v1/sessions/s1/events") in spy.paths
    assert ("POST", "/v1/sessions") in spy.paths


def _hot_paths() -> set[tuple[str, str]]:
    concrete = {
        "/healthz": "/healthz",
        "/v1/sessions/{session_id}/events": "/v1/sessions/s1/events",
        "/v1/sessions/{session_id}/page": "/v1/sessions/s1/page",
        "/v1/sessions/{session_id}/subagents/{child_id}/page": "/v1/sessions/s1/subagents/kid/page",
    }
    return {(method, concrete[template]) for method, template in HOT}


async def test_an_unexpected_error_on_a_hot_route_is_answered_500_and_raised_for_the_server() -> None:
    app = create_app(Settings(), store=MemoryStore())
    async with serving(app, raise_app_exceptions=False) as client:
        service: Any = client.app_state["service"]  # type: ignore[attr-defined]

        async def broken(*args: object, **kwargs: object) -> None:
            raise RuntimeError("a bug")

        service.page = broken
        await client.post("/v1/sessions", content=_CREATE, headers=_JSON)
        response = await client.get("/v1/sessions/s1/page")
    assert response.status_code == 500
    assert json.loads(response.content)["error"]["code"] == "internal"
    async with serving(app) as client:
        client.app_state["service"].page = broken  # type: ignore[attr-defined]
        await client.post("/v1/sessions", content=_CREATE, headers=_JSON)
        with pytest.raises(RuntimeError, match="a bug"):
            await client.get("/v1/sessions/s1/page")


def _unit(routes: list[Any], handlers: dict[Any, Any], passed: list[str]) -> HotRoutes:
    async def rest(scope: Scope, receive: Receive, send: Send) -> None:
        passed.append(scope["path"])
        await PlainTextResponse("starlette")(scope, receive, send)

    return HotRoutes(rest, routes, handlers)


async def _internal(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": "internal"}, status_code=500)


async def _health(request: Request) -> Response:
    return PlainTextResponse("hot")


async def _get(app: Any, path: str, *, raise_app_exceptions: bool = False) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        return await client.get(path)


async def test_a_handler_that_fails_is_answered_500_and_its_failure_raised() -> None:
    async def broken(request: Request) -> Response:
        raise ValueError("refused")

    async def failing(request: Request, exc: Exception) -> Response:
        raise KeyError("the handler's own bug")

    app = _unit([Route("/healthz", broken)], {Exception: _internal, ValueError: failing}, [])
    response = await _get(app, "/healthz")
    assert (response.status_code, response.json()) == (500, {"error": "internal"})
    with pytest.raises(KeyError, match="the handler's own bug"):
        await _get(app, "/healthz", raise_app_exceptions=True)


async def test_a_route_starlette_would_not_run_as_it_is_or_might_not_choose_is_not_hot() -> None:
    passed: list[str] = []
    wrapped = Route("/healthz", _health, middleware=[Middleware(GZipMiddleware)])
    assert (await _get(_unit([wrapped], {Exception: _internal}, passed), "/healthz")).text == "starlette"
    shadow = Route("/v1/sessions/{session_id}/{what}", _health, methods=["POST"])
    hot = Route("/v1/sessions/{session_id}/events", _health, methods=["POST"])
    app = _unit([shadow, hot], {Exception: _internal}, passed)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        assert (await client.post("/v1/sessions/s/events")).text == "starlette"
    assert passed == ["/healthz", "/v1/sessions/s/events"]
    routes = [Route("/v1/sessions/{session_id}/other", _health), hot, Mount("/ds", routes=[])]
    plain = _unit(routes, {Exception: _internal}, passed)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=plain), base_url="http://testserver") as client:
        assert (await client.post("/v1/sessions/s/events")).text == "hot"

"""`SegmentRouter` chooses what Starlette's router chooses: the same route, parameters, 405, redirect or 404."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, Router
from starlette.types import Message, Receive, Scope, Send

from history_service.app import create_app
from history_service.router import SegmentRouter, candidates
from history_service.settings import Settings
from persistence import MemoryStore

SEGMENTS = ["v1", "sessions", "subagents", "events", "page", "follow", "healthz", "readyz", "openapi.json"]
SEGMENTS += ["metrics", "viewer", "lib", "app.js", "s-1", "", "a b", "x" * 3, "{session_id}", "é"]
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"]


async def echo(request: Request) -> Response:
    route = request.scope.get("route")
    return JSONResponse({"route": getattr(route, "path", None), "params": request.path_params})


async def mounted(scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse({"mount": scope.get("root_path"), "path": scope["path"]})(scope, receive, send)


def echoing(routes: list[BaseRoute]) -> list[BaseRoute]:
    """The app's own route table, every endpoint replaced by one that says which route ran and with what."""
    out: list[BaseRoute] = []
    for route in routes:
        if isinstance(route, Route):
            out.append(Route(route.path, echo, methods=sorted(route.methods or ())))
        else:
            assert isinstance(route, Mount)
            out.append(Mount(route.path, app=mounted))
    return out


TABLE = echoing(create_app(Settings(enable_test_seed=True), store=MemoryStore()).routes)


class _Walk(Router):
    """Starlette's own walk, counted: `SegmentRouter` falls back to it only when none of its routes matches."""

    walks = 0

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            _Walk.walks += 1
        await super().app(scope, receive, send)


class Watched(SegmentRouter, _Walk):
    pass


ROUTERS = [Router(TABLE), Watched(TABLE)]


async def answer(router: Router, method: str, path: str) -> list[Message]:
    """What ``router`` sends for a request, built by hand: any path, even one a client would not send."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "server": ("testserver", 80),
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver")],
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await router(scope, receive, send)
    return sent


def test_every_table_route_is_placed_by_its_segments() -> None:
    placed = candidates(TABLE)
    mounts = [route for route in TABLE if isinstance(route, Mount)]
    # Each route of the table is under its own segment count; only the mounts are tried for every path.
    for route in TABLE:
        if isinstance(route, Route):
            count = len(route.path.split("/"))
            assert route in [candidate for _, candidate in placed[count]]
            assert all(literals == () or candidate in mounts for literals, candidate in placed[-1])


def filled(template: str, values: list[str]) -> list[str]:
    """A route template's segments, each parameter replaced by the next of ``values`` (``s-1`` when they run out)."""
    given = iter(values)
    return [next(given, "s-1") if part.startswith("{") else part for part in template.split("/")[1:]]


TEMPLATES = [route.path for route in TABLE if isinstance(route, Route)]
NEAR_ROUTES = st.builds(
    lambda template, values, cut, extra: filled(template, values)[: cut or None] + extra,
    st.sampled_from(TEMPLATES),
    st.lists(st.sampled_from(SEGMENTS), max_size=3),
    st.integers(-1, 0),
    st.lists(st.sampled_from(SEGMENTS), max_size=1),
)


@pytest.mark.anyio
async def test_each_table_route_is_chosen_for_its_own_paths() -> None:
    for template in TEMPLATES:
        path = "/" + "/".join(filled(template, []))
        walks = _Walk.walks
        walked, placed = [await answer(router, "GET", path) for router in ROUTERS]
        assert placed == walked and walked[0]["status"] in (200, 405), template
        assert _Walk.walks == walks, template
        if walked[0]["status"] == 200:
            assert b'"route":"' + template.encode() + b'"' in walked[1]["body"]


@pytest.mark.anyio
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    segments=st.one_of(st.lists(st.sampled_from(SEGMENTS), max_size=7), NEAR_ROUTES),
    slash=st.booleans(),
    method=st.sampled_from(METHODS),
)
async def test_a_request_gets_the_answer_starlettes_router_gives(segments: list[str], slash: bool, method: str) -> None:
    path = "/" + "/".join(segments) + ("/" if slash and segments else "")
    walks = _Walk.walks
    walked, placed = [await answer(router, method, path) for router in ROUTERS]
    assert placed == walked, path
    assert walked[0]["status"] in (200, 307, 404, 405)
    # A route matched (or matched but for the method): the segments found it, with no walk.
    assert _Walk.walks - walks == (0 if walked[0]["status"] in (200, 405) else 1), path

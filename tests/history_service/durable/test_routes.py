"""The /ds route table: the mount and the OpenAPI document both come from it, and its routes answer as the protocol."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from starlette.routing import Mount, Route

from history_service import openapi
from history_service.app import create_app
from history_service.durable import routes
from history_service.durable.routes import PREFIX, ROUTES, durable_mount
from history_service.settings import Settings
from persistence import MemoryStore
from testing.asgi import serving

pytestmark = pytest.mark.anyio

DURABLE = Path(routes.__file__).resolve().parent
API = "/ds/v1/stream/__ds/subscriptions"


def test_the_mount_serves_the_table_in_its_order_with_its_methods() -> None:
    mount = durable_mount()
    assert mount.path == PREFIX
    served = [(route.path, route.methods) for route in mount.routes if isinstance(route, Route)]
    assert len(served) == len(mount.routes) == len(ROUTES)
    for (path, methods), route in zip(served, ROUTES, strict=True):
        assert path == route.path
        assert methods == (None if route.methods is None else set(route.methods))


def test_the_app_mounts_the_table_once() -> None:
    app = create_app(Settings(), store=MemoryStore())
    mounts = [route for route in app.routes if isinstance(route, Mount) and route.path == PREFIX]
    assert len(mounts) == 1
    assert [route.path for route in mounts[0].routes if isinstance(route, Route)] == [route.path for route in ROUTES]


@pytest.mark.parametrize("auth", ["token", "none"])
def test_the_document_lists_the_documented_routes_of_the_table_and_no_other_ds_path(auth: str) -> None:
    documented = {path: item for path, item in openapi.document(auth=auth)["paths"].items() if path.startswith(PREFIX)}
    expected = {
        openapi.documented_path(PREFIX + route.path): route.document(auth)
        for route in ROUTES
        if route.document is not None
    }
    assert documented == expected
    child = "/ds/v1/session/{parent}/subagents/{child}"
    assert list(documented) == ["/ds/v1/stream/{name}", "/ds/v1/session/{id}", child]


def test_only_the_wake_routes_prove_themselves_by_a_token() -> None:
    assert sorted(route.path.rsplit("/", 1)[1] for route in ROUTES if route.by_token) == ["ack", "callback", "release"]


def _routes_by_hand(tree: ast.AST) -> list[str]:
    """What in a module routes a request itself: a regular expression of a route's path, or a read of the URL's path."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile":
            pattern = node.args[0] if node.args else None
            if isinstance(pattern, ast.Constant) and any(part in str(pattern.value) for part in ("/v1", "__ds", "/ds")):
                found.append(f"re.compile({pattern.value!r})")
        if isinstance(node, ast.Attribute) and node.attr == "path":
            if isinstance(node.value, ast.Attribute) and node.value.attr == "url":
                found.append("request.url.path")
    return found


def test_no_module_of_durable_routes_a_request_by_hand_and_the_prefix_is_named_once() -> None:
    for path in sorted(DURABLE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert _routes_by_hand(tree) == [], path.name
        prefixes = [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value == PREFIX]
        assert len(prefixes) == (1 if path.name == "routes.py" else 0), path.name


def test_the_scan_sees_a_route_matched_by_hand() -> None:
    by_hand = ast.parse('_WAKE = re.compile(r"/ds/v1/stream/__ds/x")\nif _WAKE.fullmatch(request.url.path): pass')
    assert _routes_by_hand(by_hand) == ["re.compile('/ds/v1/stream/__ds/x')", "request.url.path"]


async def test_a_method_a_subscription_route_does_not_serve_is_the_protocols_405_with_the_ones_it_does() -> None:
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        refused = await client.get(f"{API}/s1/streams")
        assert (refused.status_code, refused.text, refused.headers["allow"]) == (405, "method not allowed", "POST")
        assert refused.headers["x-content-type-options"] == "nosniff"
        unknown = await client.request("PATCH", f"{API}/s1")
        assert unknown.status_code == 405 and unknown.json()["error"]["code"] == "method_not_allowed"


async def test_a_reserved_name_no_route_serves_is_the_apis_404_and_never_a_stream() -> None:
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        for path in ("/ds/v1/stream/__ds/", "/ds/v1/stream/__ds/nothing", f"{API}/s1/nothing"):
            refused = await client.put(path, content=b"x")
            assert refused.status_code == 404, path
            assert refused.json() == {
                "error": {"code": "SUBSCRIPTION_NOT_FOUND", "message": "Durable Streams control route not found"}
            }

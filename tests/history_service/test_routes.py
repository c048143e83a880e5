"""The route table is the HTTP surface: a route added to it is served, parsed by its query Struct, and documented."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Literal

import httpx
import pytest
from msgspec import Meta, Struct
from openapi_spec_validator import validate
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from history_service import openapi, routes
from history_service.app import create_app
from history_service.params import IF_NONE_MATCH, NoParams, Param, parameters
from history_service.requests import address, query
from history_service.settings import Settings
from persistence import open_store
from testing.asgi import serving

pytestmark = pytest.mark.anyio


class ProbeParams(Struct, frozen=True, forbid_unknown_fields=True):
    depth: Annotated[int, Meta(ge=2, le=9, description="How deep to probe.")] = 3
    mode: Annotated[Literal["wide", "narrow"], Meta(description="How to probe.")] | None = None


async def probe(request: Request) -> Response:
    session, _ = address(request)
    params = query(request, ProbeParams)
    return JSONResponse({"session": session, "depth": params.depth, "mode": params.mode})


PROBE = routes.Route(
    path="/v1/sessions/{session_id}/probe",
    operations=(
        routes.Operation(
            method="GET",
            name="probeSession",
            summary="A route only this test has",
            tag="reading",
            endpoint=probe,
            replies=(routes.Reply(status=200, description="Probed."),),
            errors=("invalid_parameter", "invalid_session_id", "session_not_found"),
            query=ProbeParams,
            headers=(IF_NONE_MATCH,),
        ),
    ),
)


def test_a_route_added_to_the_table_is_documented_with_its_parameters_and_error_answers() -> None:
    assert "/v1/sessions/{id}/probe" not in openapi.document()["paths"]
    doc = openapi.document(table=(*routes.ROUTES, PROBE))
    validate(doc)
    operation = doc["paths"]["/v1/sessions/{id}/probe"]["get"]
    assert list(doc["paths"]["/v1/sessions/{id}/probe"]) == ["get"]
    assert (operation["operationId"], operation["tags"]) == ("probeSession", ["reading"])
    assert [(p["name"], p["in"], p["schema"]) for p in operation["parameters"]] == [
        ("id", "path", {"$ref": "#/components/schemas/SessionId"}),
        ("depth", "query", {"type": "integer", "minimum": 2, "maximum": 9, "default": 3}),
        ("mode", "query", {"enum": ["wide", "narrow"]}),
        ("If-None-Match", "header", {"type": "string"}),
    ]
    assert operation["parameters"][1]["description"] == "How deep to probe."

    def codes(status: str) -> list[str]:
        schema = operation["responses"][status]["content"]["application/json"]["schema"]
        found: list[str] = schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"]
        return found

    assert list(operation["responses"]) == ["200", "400", "401", "404", "422"]
    assert codes("400") == ["duplicate_header", "invalid_parameter"]
    assert codes("401") == ["unauthorized"]
    assert (codes("404"), codes("422")) == (["session_not_found"], ["invalid_session_id"])
    # Without token auth there are no credentials to get wrong.
    local = openapi.document(auth="none", table=(*routes.ROUTES, PROBE))["paths"]["/v1/sessions/{id}/probe"]["get"]
    assert list(local["responses"]) == ["200", "400", "404", "422"]


@asynccontextmanager
async def local_app() -> AsyncIterator[httpx.AsyncClient]:
    store = await open_store("memory://", create=True)
    try:
        async with serving(create_app(Settings(metrics=False), store=store)) as client:
            yield client
    finally:
        await store.close()


@pytest.fixture
async def probing(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setattr(routes, "ROUTES", (*routes.ROUTES, PROBE))
    async with local_app() as client:
        yield client


async def test_a_route_added_to_the_table_is_served_and_in_the_apps_own_document(probing: httpx.AsyncClient) -> None:
    served = (await probing.get("/openapi.json")).json()
    assert served["paths"]["/v1/sessions/{id}/probe"]["get"]["operationId"] == "probeSession"
    answered = await probing.get("/v1/sessions/s1/probe", params={"depth": "9", "mode": "wide"})
    assert answered.status_code == 200
    assert answered.json() == {"session": "s1", "depth": 9, "mode": "wide"}
    assert (await probing.get("/v1/sessions/s1/probe")).json() == {"session": "s1", "depth": 3, "mode": None}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"depth": "10"}, "depth must be an integer from 2 to 9, got '10'"),
        ({"depth": "1"}, "depth must be an integer from 2 to 9, got '1'"),
        ({"mode": "deep"}, "mode must be 'wide' or 'narrow'"),
        ({"width": "1"}, "unknown query parameter(s): width"),
    ],
    ids=["above", "below", "not-a-value", "unknown"],
)
async def test_a_route_added_to_the_table_refuses_what_its_query_struct_refuses(
    probing: httpx.AsyncClient, params: dict[str, str], message: str
) -> None:
    refused = await probing.get("/v1/sessions/s1/probe", params=params)
    assert refused.status_code == 400
    assert refused.json()["error"] == {"code": "invalid_parameter", "message": message}


def _address(path: str) -> str:
    return path.replace("{session_id}", "s").replace("{child_id}", "s.c")


READS = [
    pytest.param(operation.method, route.path, param, id=f"{operation.name}-{param.name}")
    for route in routes.ROUTES
    for operation in route.operations
    for param in parameters(operation.query or NoParams)
    if param.kind == "integer"
]
# The required parameters a request with a parameter at the edge of its range sends besides, each a valid value.
REQUIRED = {
    route.path: {param.name: "word" for param in parameters(operation.query or NoParams) if param.required}
    for route in routes.ROUTES
    for operation in route.operations
}
# What a request with a parameter at the edge of its range sends besides: a valid body, for a create.
BODIES = {"POST": {"id": "s.new", "createdAt": 1}}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with local_app() as client:
        yield client


@pytest.mark.parametrize(("method", "path", "param"), READS)
async def test_every_integer_parameter_of_the_table_is_served_within_its_declared_range(
    client: httpx.AsyncClient, method: str, path: str, param: Param
) -> None:
    assert param.low is not None and param.high is not None
    low, high, name = param.low, param.high, param.name
    body = BODIES.get(method)

    async def ask(value: int) -> httpx.Response:
        return await client.request(method, _address(path), params={name: str(value), **REQUIRED[path]}, json=body)

    past = await ask(high + 1)
    assert past.status_code == 400
    assert past.json()["error"]["message"] == f"{name} must be an integer from {low} to {high}, got '{high + 1}'"
    below = await ask(low - 1)
    assert below.status_code == 400 and below.json()["error"]["code"] == "invalid_parameter"
    # At the edge the parameter passes: what answers is the address (no session "s" here), the listing or the create.
    edge = await ask(low)
    assert edge.status_code in (200, 201, 404) and edge.json().get("error", {}).get("code") != "invalid_parameter"


def test_every_operation_of_the_table_is_named_once() -> None:
    names = [operation.name for route in routes.ROUTES for operation in route.operations]
    assert names and len(names) == len(set(names))
    assert len({route.path for route in routes.ROUTES}) == len(routes.ROUTES)


@pytest.mark.parametrize(
    ("path", "params", "headers", "named"),
    [
        ("page", {"through": "zz", "expand": "x"}, {}, "expand must be 'raw'"),
        ("page", {"maxBytes": "0", "through": "zz"}, {}, "through must be"),
        ("follow", {"maxMessages": "0"}, {"Last-Event-ID": "x"}, "Last-Event-ID must match"),
        ("follow", {"maxMessages": "0", "after": "q"}, {"Last-Event-ID": "x"}, "after must be"),
        ("follow", {"maxMessages": "0"}, {"Last-Event-ID": ""}, "maxMessages must be"),
    ],
)
async def test_of_several_bad_parameters_the_400_names_the_one_checked_first(
    client: httpx.AsyncClient, path: str, params: dict[str, str], headers: dict[str, str], named: str
) -> None:
    answer = await client.get(_address(f"/v1/sessions/{{session_id}}/{path}"), params=params, headers=headers)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_parameter"
    assert answer.json()["error"]["message"].startswith(named)

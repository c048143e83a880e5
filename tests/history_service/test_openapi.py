"""The OpenAPI document: committed as generated, valid OpenAPI 3.1, and true to the app's routes, errors and bodies."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgspec
import pytest
from openapi_spec_validator import validate
from starlette.routing import BaseRoute, Mount, Route

from codec import check_session_id
from history_service import bodies, openapi
from history_service.answers import ERRORS
from history_service.app import create_app
from history_service.settings import Settings
from persistence import open_store
from testing.asgi import serving

pytestmark = pytest.mark.anyio

TOKEN_MODE = Settings(auth="token", tokens=("t0k",))
CALLER = {"Authorization": "Bearer t0k", "X-Principal": "alice"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    store = await open_store("memory://", create=True)
    try:
        async with serving(create_app(TOKEN_MODE, store=store)) as client:
            client.headers.update(CALLER)
            yield client
    finally:
        await store.close()


def test_the_committed_document_is_the_generated_one() -> None:
    committed = openapi.DOCUMENT_PATH.read_bytes()
    assert committed == openapi.encode_document(), "regenerate it: python -m history_service.openapi --write"


@pytest.mark.parametrize(
    "settings",
    [{}, {"auth": "none"}, {"auth": "none", "metrics": False}, {"default_max_bytes": 1024}],
    ids=["token", "none", "none-without-metrics", "small-pages"],
)
def test_the_document_is_valid_openapi_3_1(settings: dict[str, object]) -> None:
    validate(openapi.document(**settings))  # type: ignore[arg-type]


def _template(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


def _routes(routes: list[BaseRoute], prefix: str = "") -> list[tuple[str, Route]]:
    """Every route with its full path, a mount's (the Durable Streams at /ds) included."""
    found: list[tuple[str, Route]] = []
    for route in routes:
        if isinstance(route, Mount):
            found += _routes(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            found.append((prefix + route.path, route))
    return found


def test_every_route_is_documented_with_its_methods() -> None:
    app = create_app(TOKEN_MODE)
    served = {
        (method.lower(), _template(path))
        for path, route in _routes(app.routes)
        if not path.startswith(("/viewer", "/v1/test-only"))
        for method in route.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }
    documented = {(method, _template(path)) for path, item in openapi.document()["paths"].items() for method in item}
    assert documented == served


def test_every_declared_error_code_is_answered_with_its_status_by_the_error_table() -> None:
    statuses: dict[str, set[int]] = {}
    for answer in ERRORS.values():
        statuses.setdefault(answer.code, set()).add(answer.status)
    statuses["not_found"] = {404}
    for path, item in openapi.document()["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                schema = response.get("content", {}).get("application/json", {}).get("schema", {})
                if "allOf" not in schema:
                    continue
                codes = schema["allOf"][1]["properties"]["error"]["properties"]["code"]["enum"]
                for code in codes:
                    assert statuses[code] == {int(status)}, (method, path, code)


def test_the_api_page_shows_every_operation_with_curl_against_base() -> None:
    page = (openapi.DOCUMENT_PATH.parent / "api.md").read_text()
    headings = set(re.findall(r"^### `([A-Z]+ \S+)`", page, re.MULTILINE))
    documented = {f"{method.upper()} {path}" for path, item in openapi.document()["paths"].items() for method in item}
    assert headings == documented
    commands = [line for line in page.splitlines() if line.startswith("curl ")]
    assert commands and all("$BASE" in line for line in commands)


def test_none_mode_declares_no_credentials() -> None:
    doc = openapi.document(auth="none")
    # An empty requirement list, said outright: no operation needs a credential.
    assert doc["security"] == [] and "securitySchemes" not in doc["components"]
    assert all(op.get("security", []) == [] for item in doc["paths"].values() for op in item.values())
    paths = msgspec.json.encode(doc["paths"])
    assert b'"401"' not in paths and b"duplicate_header" not in paths


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("s1", True),
        ("{{sessionId}}", True),
        ("a.b:c@d~e-f_g", True),
        ("x" * 200, True),
        ("x" * 201, False),
        (".", False),
        ("..", False),
        ("...", True),
        ("a/b", False),
        ("a b", False),
        ("", False),
        ("é", False),
    ],
)
def test_the_session_id_schema_is_the_id_rule(value: str, valid: bool) -> None:
    schema = openapi.document()["components"]["schemas"]["SessionId"]
    by_schema = (
        schema["minLength"] <= len(value) <= schema["maxLength"]
        and re.search(schema["pattern"], value) is not None
        and value not in schema["not"]["enum"]
    )
    try:
        check_session_id(value)
    except ValueError:
        by_rule = False
    else:
        by_rule = True
    assert by_schema == by_rule == valid


async def test_the_app_serves_its_own_document(client: httpx.AsyncClient) -> None:
    first = await client.get("/openapi.json", headers={"Authorization": "", "X-Principal": ""})
    assert first.status_code == 200 and first.headers["content-type"] == "application/json"
    assert first.json() == openapi.document(auth="token")
    assert (await client.get("/openapi.json")).content == first.content


async def test_a_none_mode_app_serves_a_document_without_credentials() -> None:
    store = await open_store("memory://", create=True)
    async with serving(create_app(Settings(metrics=False), store=store)) as client:
        served = (await client.get("/openapi.json")).json()
    await store.close()
    assert served == openapi.document(auth="none", metrics=False)


async def test_the_bodies_structs_decode_what_the_endpoints_answer(client: httpx.AsyncClient) -> None:
    """Each JSON body the endpoints build by hand decodes strictly into the Struct the document names for it."""

    def strictly(response: httpx.Response, kind: type[msgspec.Struct]) -> msgspec.Struct:
        return msgspec.json.decode(response.content, type=kind)

    created = await client.post("/v1/sessions", json={"id": "s1", "createdAt": 1})
    incarnation = created.json()["incarnation"]
    assert strictly(created, bodies.SessionCreated) == bodies.SessionCreated("s1", -1, incarnation)
    batch = {"events": [{"type": "turn/start", "seq": 0, "time": 1, "data": {}}]}
    assert strictly(await client.post("/v1/sessions/s1/events", json=batch), bodies.Appended) == bodies.Appended(0, 0)
    again = strictly(await client.post("/v1/sessions/s1/events", json=batch), bodies.Appended)
    assert again == bodies.Appended(0, 0, idempotent=True)
    usage = {"type": "assistant/chunk", "seq": 2, "time": 3, "data": {"chunk": {"type": "usage", "usage": USAGE}}}
    named = {"type": "session/title", "seq": 1, "time": 2, "data": {"title": "Named"}}
    assert (await client.post("/v1/sessions/s1/events", json={"events": [named, usage]})).status_code == 201
    listed = strictly(await client.get("/v1/sessions", params={"limit": 1}), bodies.SessionList)
    entry = bodies.ListedSession("s1", 1, 2, 0, title="Named", lastEventAt=3, usage=bodies.Usage(7, 2))
    assert listed == bodies.SessionList([entry], None, 1)
    state = strictly(await client.get("/v1/sessions/s1"), bodies.SessionState)
    assert isinstance(state, bodies.SessionState) and state.headSeq == 2 and state.usage == entry.usage
    conflict = strictly(
        await client.post("/v1/sessions/s1/events", json={"events": [{**batch["events"][0], "seq": 5}]}),
        bodies.ErrorBody,
    )
    assert (
        isinstance(conflict, bodies.ErrorBody) and conflict.error.code == "seq_conflict" and conflict.error.headSeq == 2
    )
    bad = strictly(await client.post("/v1/sessions/s1/events", json={"events": [{"type": 1}]}), bodies.ErrorBody)
    assert isinstance(bad, bodies.ErrorBody) and bad.error.index == 0
    assert strictly(await client.get("/healthz"), bodies.Health) == bodies.Health("ok")
    assert strictly(await client.get("/readyz"), bodies.Readiness) == bodies.Readiness("ready", "ok", "in-process")


USAGE = {"inputTokens": 7, "outputTokens": 2}
REDOCLY = os.environ.get("HISTORY_REDOCLY")


@pytest.mark.skipif(not REDOCLY, reason="HISTORY_REDOCLY is not set; scripts/with-node installs the pinned Redocly")
@pytest.mark.parametrize("auth", ["committed", "none", "token"])
def test_redocly_lints_the_documents_with_no_error(auth: str, tmp_path: Path) -> None:
    assert REDOCLY
    if auth == "committed":
        path = openapi.DOCUMENT_PATH
    else:
        path = tmp_path / f"openapi-{auth}.json"
        path.write_bytes(openapi.encode_document(auth=auth))
    linted = subprocess.run([REDOCLY, "lint", str(path)], capture_output=True, text=True, timeout=120)
    assert linted.returncode == 0, linted.stdout[-4000:] + linted.stderr[-4000:]
    assert "Error was generated" not in linted.stdout + linted.stderr

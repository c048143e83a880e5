"""Every endpoint refuses bad input with its documented 4xx and leaves the store unchanged."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from codec import compress, encode
from history_service.app import create_app
from history_service.settings import Settings
from persistence import MemoryStore
from tests.codec.helpers import plain
from tests.history_service.conftest import serving

pytestmark = pytest.mark.anyio

TOKEN = {"Authorization": "Bearer service-token", "X-Principal": "alice"}
EVENT = {"type": "x", "seq": 0, "time": 0, "data": 1}


@pytest.fixture
async def api() -> AsyncIterator[tuple[httpx.AsyncClient, MemoryStore]]:
    store = MemoryStore()
    settings = Settings(auth="token", tokens=("service-token",), max_body_bytes=100_000, max_batch_events=50)
    async with serving(create_app(settings, store=store)) as client:
        client.headers.update(TOKEN)
        assert (await client.post("/v1/sessions", json={"id": "s", "createdAt": 0})).status_code == 201
        assert (await client.post("/v1/sessions/s/events", json={"events": [EVENT]})).status_code == 201
        yield client, store


async def snapshot(store: MemoryStore) -> bytes:
    return encode([(s, await store.read_events(s, 0, 10**6)) for s in sorted(store._sessions)])


def bomb() -> bytes:
    return gzip.compress(b'{"events":[' + b" " * 5_000_000 + b"]}")


BAD: list[Any] = [
    # POST /v1/sessions
    ("post", "/v1/sessions", {"content": b"{nope"}, 400, "malformed_json"),
    ("post", "/v1/sessions", {"json": {"id": "t"}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "t", "createdAt": "0"}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "t", "createdAt": 2**53}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "t", "createdAt": 0, "owner": "bob"}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "", "createdAt": 0}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "s", "createdAt": 0}}, 409, "session_exists"),
    (
        "post",
        "/v1/sessions",
        {"json": {"id": "c", "createdAt": 0, "parentSession": "nope", "origin": "subagent"}},
        422,
        "invalid_parent",
    ),
    ("post", "/v1/sessions", {"content": b"[" * 100_001}, 413, "body_too_large"),
    # POST events
    ("post", "/v1/sessions/s/events", {"content": b"{nope"}, 400, "malformed_json"),
    ("post", "/v1/sessions/s/events", {"content": b"[" * 40_000 + b"]" * 40_000}, 422, "invalid_batch"),
    (
        "post",
        "/v1/sessions/s/events",
        {"content": b'{"events":[{"type":"x","seq":1,"time":0,"data":' + b"[" * 40_000 + b"]" * 40_000 + b"}]}"},
        400,
        "malformed_json",
    ),
    ("post", "/v1/sessions/s/events", {"json": {"events": []}}, 422, "invalid_batch"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [EVENT], "extra": 1}}, 422, "invalid_batch"),
    ("post", "/v1/sessions/s/events", {"json": {"events": "no"}}, 422, "invalid_batch"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 1, "time": 1.5}]}}, 422, "invalid_event"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": -1}]}}, 422, "invalid_event"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 2**64}]}}, 422, "invalid_event"),
    (
        "post",
        "/v1/sessions/s/events",
        {"json": {"events": [{**EVENT, "seq": 1, "surfaceOp": "x"}]}},
        422,
        "invalid_event",
    ),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 1, "bad": 1}]}}, 422, "invalid_event"),
    (
        "post",
        "/v1/sessions/s/events",
        {"json": {"events": [{"type": "text-chunks", "seq0": 1, "time0": 0, "data": {"turn": 1}}]}},
        422,
        "invalid_event",
    ),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 5}]}}, 409, "seq_conflict"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 0, "data": 2}]}}, 409, "seq_conflict"),
    (
        "post",
        "/v1/sessions/s/events",
        {"json": {"events": [{**EVENT, "seq": 1 + k} for k in range(51)]}},
        413,
        "batch_too_large",
    ),
    ("post", "/v1/sessions/s/events", {"content": b" " * 100_001}, 413, "body_too_large"),
    (
        "post",
        "/v1/sessions/s/events",
        {"content": bomb(), "headers": {"Content-Encoding": "gzip"}},
        413,
        "body_too_large",
    ),
    (
        "post",
        "/v1/sessions/s/events",
        {"content": b"garbage", "headers": {"Content-Encoding": "br"}},
        400,
        "bad_encoding",
    ),
    (
        "post",
        "/v1/sessions/s/events",
        {"content": b"x", "headers": {"Content-Encoding": "lz4"}},
        415,
        "unsupported_encoding",
    ),
    ("post", "/v1/sessions/nope/events", {"json": {"events": [EVENT]}}, 404, "session_not_found"),
    ("post", "/v1/sessions/..%2F..%2Fetc/events", {"json": {"events": [EVENT]}}, 404, "not_found"),
    ("post", "/v1/sessions/%2e%2e/events", {"json": {"events": [EVENT]}}, 404, "session_not_found"),
    ("get", "/v1/sessions/s/subagents/..%2F..%2Fs/page", {}, 404, "not_found"),
    # GET page
    ("get", "/v1/sessions/s/page?maxMessages=0", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?maxMessages=1001", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?maxMessages=abc", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?through=-2", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?through=1", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?through=1.5", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?through=99999999999999999999", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?before=-1", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?maxBytes=0", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?bogus=1", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?expand=all", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/nope/page", {}, 404, "session_not_found"),
    ("get", "/v1/sessions/s/subagents/nope/page", {}, 404, "session_not_found"),
    ("get", "/v1/sessions/s/page", {"headers": {"Accept-Encoding": "identity;q=0"}}, 406, "not_acceptable"),
    # GET follow
    ("get", "/v1/sessions/s/follow?after=abc", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/follow?after=-2", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/follow", {"headers": {"Last-Event-ID": "x"}}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/follow?bogus=1", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/nope/follow", {}, 404, "session_not_found"),
    # Auth and routing
    ("get", "/v1/sessions/s/page", {"headers": {"Authorization": ""}}, 401, "unauthorized"),
    ("get", "/v1/sessions/s/page", {"headers": {"Authorization": "Bearer wrong"}}, 401, "unauthorized"),
    ("get", "/v1/sessions/s/page", {"headers": {"Authorization": "Basic service-token"}}, 401, "unauthorized"),
    (
        "post",
        "/v1/sessions/s/events",
        {"headers": {"X-Principal": ""}, "json": {"events": [EVENT]}},
        401,
        "unauthorized",
    ),
    ("get", "/v1/sessions/s/follow", {"headers": {"X-Principal": "x" * 300}}, 401, "unauthorized"),
    ("get", "/v1/nothing", {}, 404, "not_found"),
    ("delete", "/v1/sessions/s/page", {}, 405, "method_not_allowed"),
    ("post", "/v1/test-only/seed", {"json": {"scenario": "multi-turn"}}, 404, "not_found"),
]


@pytest.mark.parametrize(
    ("method", "path", "options", "status", "code"), BAD, ids=[f"{b[0]} {b[1][:48]} {b[4]}" for b in BAD]
)
async def test_bad_input_gets_its_4xx_and_changes_nothing(
    api: tuple[httpx.AsyncClient, MemoryStore], method: str, path: str, options: dict[str, Any], status: int, code: str
) -> None:
    client, store = api
    before = await snapshot(store)
    headers = {**TOKEN, **options.pop("headers", {})}
    response = await client.request(method.upper(), path, headers=headers, **options)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert isinstance(response.json()["error"]["message"], str)
    assert await snapshot(store) == before


async def test_conflict_reports_the_head_and_index_of_a_bad_event(api: tuple[httpx.AsyncClient, MemoryStore]) -> None:
    client, _ = api
    response = await client.post("/v1/sessions/s/events", json={"events": [{**EVENT, "seq": 9}]})
    assert response.json()["error"]["headSeq"] == 0
    response = await client.post(
        "/v1/sessions/s/events", json={"events": [{**EVENT, "seq": 1}, {**EVENT, "seq": 2, "time": "x"}]}
    )
    error = response.json()["error"]
    assert error["index"] == 1 and error["message"].startswith("events[1].time: expected `int`")


async def test_compressed_and_packed_appends_are_accepted(api: tuple[httpx.AsyncClient, MemoryStore]) -> None:
    client, store = api
    row = {
        "type": "text-chunks",
        "seq0": 1,
        "time0": 5,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]},
    }
    body = encode({"events": [row, plain(4)]})
    for coding in ("zstd", "br", "gzip"):
        if coding != "zstd":
            body = encode({"events": [plain(5 if coding == "br" else 6)]})
        response = await client.post(
            "/v1/sessions/s/events", content=compress(body, coding), headers={"Content-Encoding": coding}
        )
        assert response.status_code == 201, response.text
    assert [e.seq for e in await store.read_events("s", 0, 10)] == list(range(7))
    again = await client.post("/v1/sessions/s/events", content=encode({"events": [plain(6)]}))
    assert again.status_code == 200 and again.json()["idempotent"] is True


def test_the_seeder_is_absent_without_its_flag() -> None:
    script = """
import anyio, sys, httpx
from history_service.app import create_app
from history_service.settings import Settings
from persistence import MemoryStore
from tests.history_service.conftest import serving

async def main():
    async with serving(create_app(Settings.from_env({}), store=MemoryStore())) as client:
        response = await client.post("/v1/test-only/seed", json={"scenario": "multi-turn"})
        assert response.status_code == 404, response.status_code
    assert "history_service.seed" not in sys.modules
    print("absent")

anyio.run(main)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "absent"


def test_the_seeder_loads_with_its_flag() -> None:
    script = "import sys; from history_service.app import create_app; from history_service.settings import Settings;"
    script += (
        "create_app(Settings.from_env({'HISTORY_ENABLE_TEST_SEED': '1'})); print('history_service.seed' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"

"""The /ds mount (docs/protocol.md §13.1): switched on and off, per store, with the API's auth, metrics and document."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from history_service.app import create_app
from history_service.settings import Settings
from persistence import JsonlStore, MemoryStore
from testing.asgi import serving

pytestmark = pytest.mark.anyio

TEXT = {"content-type": "text/plain"}


async def test_the_mount_can_be_turned_off() -> None:
    async with serving(create_app(Settings(durable_streams=False), store=MemoryStore())) as client:
        assert (await client.put("/ds/v1/stream/a", headers=TEXT)).status_code == 404
        document = (await client.get("/openapi.json")).json()
        assert not any(path.startswith("/ds/") for path in document["paths"])


async def test_a_store_without_streams_answers_501_but_still_serves_sessions(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path / "jsonl")
    try:
        async with serving(create_app(Settings(), store=store)) as client:
            refused = await client.put("/ds/v1/stream/a", headers=TEXT)
            assert refused.status_code == 501
            assert refused.headers["x-content-type-options"] == "nosniff"
            assert (await client.post("/v1/sessions", json={"id": "s", "createdAt": 1})).status_code == 201
            assert (await client.get("/ds/v1/session/s")).status_code == 200
    finally:
        await store.close()


async def test_credentials_are_the_apis_and_streams_belong_to_their_principal() -> None:
    settings = Settings(auth="token", tokens=("secret",))
    alice = {"Authorization": "Bearer secret", "X-Principal": "alice"}
    bob = {**alice, "X-Principal": "bob"}
    async with serving(create_app(settings, store=MemoryStore())) as client:
        assert (await client.put("/ds/v1/stream/a", headers={**TEXT, **alice}, content=b"x")).status_code == 201
        assert (await client.get("/ds/v1/stream/a", headers=alice)).text == "x"
        assert (await client.get("/ds/v1/stream/a", headers=bob)).status_code == 404
        forked = await client.put("/ds/v1/stream/b", headers={**bob, "Stream-Forked-From": "/v1/stream/a"})
        assert forked.status_code == 404
        wrong = await client.get("/ds/v1/stream/a", headers={**alice, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"


async def test_a_preflight_allows_the_protocols_headers_and_every_answer_carries_the_browser_headers() -> None:
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        preflight = await client.options(
            "/ds/v1/stream/a",
            headers={"Origin": "https://example.com", "Access-Control-Request-Method": "PUT"},
        )
        assert preflight.status_code == 204
        allowed = preflight.headers["access-control-allow-headers"].lower()
        for header in ("if-none-match", "producer-id", "stream-forked-from", "stream-ttl"):
            assert header in allowed
        # Without HISTORY_CORS_ORIGINS no origin is allowed, here as on every route.
        assert "access-control-allow-origin" not in preflight.headers
        missing = await client.get("/ds/v1/stream/nothing", headers={"Origin": "https://evil.example"})
        assert missing.status_code == 404
        assert missing.headers["x-content-type-options"] == "nosniff"
        assert missing.headers["cross-origin-resource-policy"] == "cross-origin"
        assert missing.headers["content-security-policy"] == "sandbox"
        assert "access-control-allow-origin" not in missing.headers


async def test_a_configured_origin_may_use_the_protocol_and_read_its_headers() -> None:
    settings = Settings(cors_origins=("https://app.example",))
    origin = {"Origin": "https://app.example"}
    async with serving(create_app(settings, store=MemoryStore())) as client:
        preflight = await client.options(
            "/ds/v1/stream/a",
            headers={
                **origin,
                "Access-Control-Request-Method": "PUT",
                "Access-Control-Request-Headers": "content-type, stream-ttl, producer-id",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        created = await client.put("/ds/v1/stream/a", headers={**origin, **TEXT}, content=b"x")
        assert created.status_code == 201
        assert "stream-next-offset" in created.headers["access-control-expose-headers"].lower()
        refused = await client.options(
            "/ds/v1/stream/a", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "PUT"}
        )
        assert refused.status_code == 400


async def test_requests_are_counted_and_documented() -> None:
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        await client.put("/ds/v1/stream/counted", headers=TEXT, content=b"x")
        metrics = (await client.get("/metrics")).text
        assert 'route="/ds/v1/stream/{name:path}"' in metrics
        paths = (await client.get("/openapi.json")).json()["paths"]
        assert set(paths["/ds/v1/stream/{name}"]) == {"get", "put", "post", "delete"}
        assert set(paths["/ds/v1/session/{id}"]) == {"get"}


async def test_a_body_past_the_limit_is_refused() -> None:
    settings = msgspec.structs.replace(Settings(), max_body_bytes=1024)
    async with serving(create_app(settings, store=MemoryStore())) as client:
        assert (await client.put("/ds/v1/stream/big", headers=TEXT)).status_code == 201
        refused = await client.post("/ds/v1/stream/big", headers=TEXT, content=b"x" * 2048)
        assert refused.status_code == 413
        assert (await client.get("/ds/v1/stream/big")).content == b""


async def test_a_json_body_past_the_value_limit_is_refused() -> None:
    """Issue 41 F9, as found: 3,000,000 ``{}`` values, past the default HISTORY_MAX_BODY_VALUES (2,000,000)."""
    json = {"content-type": "application/json"}
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        assert (await client.put("/ds/v1/stream/j", headers=json)).status_code == 201
        refused = await client.post("/ds/v1/stream/j", headers=json, content=b"[" + b"{}," * 2_999_999 + b"{}]")
        assert refused.status_code == 413 and "JSON values" in refused.text
        assert (await client.get("/ds/v1/stream/j")).content == b"[]"

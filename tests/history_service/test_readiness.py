"""Readiness: /readyz reads the store for real and answers 503 while it cannot, 200 once it can again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import psycopg
import pytest
import sqlalchemy as sa

from history_service import readiness
from history_service.app import create_app
from history_service.settings import Settings
from persistence import HistoryStore, SessionInfo
from persistence.errors import StoreError
from persistence.jsonl import JsonlStore
from persistence.memory import MemoryStore
from persistence.sql import SqlStore
from testing.asgi import serving
from testing.postgres import PG_URL, PG_URL_ENV

pytestmark = pytest.mark.anyio

NOT_READY_STORE = {"status": "not_ready", "store": "unavailable", "notifier": "in-process"}


async def wait_for_status(client: httpx.AsyncClient, status: int) -> httpx.Response:
    """Ask /readyz until it answers ``status``; a PostgreSQL listener reconnects with backoff of up to 5 s."""
    with anyio.fail_after(60):
        while (response := await client.get("/readyz")).status_code != status:
            await anyio.sleep(0.1)
    return response


async def test_a_ready_process_names_its_store_and_notifier() -> None:
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "store": "ok", "notifier": "in-process"}


class BrokenStore(MemoryStore):
    def __init__(self, probe: Callable[[], Awaitable[object]]) -> None:
        super().__init__()
        self.probe = probe
        self.reads = 0

    async def check_ready(self) -> None:
        self.reads += 1
        await self.probe()

    async def get_session(self, session_id: str) -> SessionInfo:
        raise AssertionError("liveness must not read the store")


async def test_a_failing_probe_is_503_with_a_reason_and_liveness_never_reads_the_store() -> None:
    async def fail() -> None:
        raise StoreError("store unavailable: /secret/path is gone")

    store = BrokenStore(fail)
    async with serving(create_app(Settings(), store=store)) as client:
        response = await client.get("/readyz")
        assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert response.status_code == 503
    body = response.json()
    assert {key: body[key] for key in NOT_READY_STORE} == NOT_READY_STORE
    assert "store" in body["reason"] and "/secret/path" not in response.text
    assert store.reads == 1


async def test_a_probe_that_never_answers_is_not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readiness, "PROBE_TIMEOUT", 0.05)
    async with serving(create_app(Settings(), store=BrokenStore(anyio.sleep_forever))) as client:
        response = await client.get("/readyz")
    assert response.status_code == 503 and response.json()["store"] == "unavailable"


@asynccontextmanager
async def file_store(kind: str, directory: Path) -> AsyncIterator[HistoryStore]:
    directory.mkdir()
    if kind == "sqlite":
        store: HistoryStore = await SqlStore.open(f"sqlite:///{directory / 'history.db'}")
    else:
        store = await JsonlStore.open(directory / "logs", compression="zstd" if kind == "jsonl-zstd" else None)
    try:
        yield store
    finally:
        await store.close()


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "jsonl-zstd"])
async def test_a_file_store_whose_directory_is_removed_is_not_ready_until_it_is_back(tmp_path: Path, kind: str) -> None:
    directory, elsewhere = tmp_path / "store", tmp_path / "moved"
    async with file_store(kind, directory) as store, serving(create_app(Settings(), store=store)) as client:
        # Used first, so the store holds open connections and loaded state that would still read.
        assert (await client.post("/v1/sessions", json={"id": "s", "createdAt": 0})).status_code == 201
        assert (await client.get("/v1/sessions/s/page")).status_code == 200
        # Ready once the notices of the other processes are read (§7.6).
        ready = await wait_for_status(client, 200)
        assert ready.json() == {"status": "ready", "store": "ok", "notifier": "listening"}
        directory.rename(elsewhere)
        try:
            response = await client.get("/readyz")
            assert response.status_code == 503
            assert {key: response.json()[key] for key in NOT_READY_STORE} == {
                **NOT_READY_STORE,
                "notifier": "listening",
            }
            assert str(tmp_path) not in response.text
            assert (await client.get("/healthz")).status_code == 200
        finally:
            elsewhere.rename(directory)
        response = await wait_for_status(client, 200)
        assert response.json() == {"status": "ready", "store": "ok", "notifier": "listening"}
        assert (await client.get("/v1/sessions/s/page")).status_code == 200


def _libpq(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.mark.skipif(not PG_URL, reason=f"{PG_URL_ENV} is not set; run under scripts/with-postgres")
async def test_postgresql_that_refuses_the_service_is_not_ready_until_it_lets_it_back_in() -> None:
    """The database the service uses stops taking connections and drops the open ones, then takes them again."""
    assert PG_URL
    name = f"history_ready_{uuid.uuid4().hex[:12]}"
    admin = await psycopg.AsyncConnection.connect(_libpq(PG_URL), autocommit=True)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.errors.InsufficientPrivilege:
        await admin.close()
        pytest.skip(f"{PG_URL_ENV} may not create databases")
    try:
        store = await SqlStore.open(sa.make_url(PG_URL).set(database=name).render_as_string(hide_password=False))
        try:
            async with serving(create_app(Settings(), store=store)) as client:
                ready = await wait_for_status(client, 200)
                assert ready.json() == {"status": "ready", "store": "ok", "notifier": "listening"}
                assert (await client.post("/v1/sessions", json={"id": "s", "createdAt": 0})).status_code == 201
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
                await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
                refused = await wait_for_status(client, 503)
                assert refused.json()["store"] == "unavailable"
                await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
                back = await wait_for_status(client, 200)
                assert back.json() == {"status": "ready", "store": "ok", "notifier": "listening"}
                assert (await client.get("/v1/sessions/s/page")).status_code == 200
        finally:
            await store.close()
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from history_service.app import create_app
from history_service.settings import Settings
from persistence import HistoryStore
from tests.persistence.conftest import store

__all__ = ["SEEDED", "client", "seed", "serving", "store"]

SEEDED = Settings(enable_test_seed=True)


@asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the app in process, with the lifespan run and its state in every request scope."""
    async with app.router.lifespan_context(app) as state:

        async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await app({**scope, "state": dict(state or {})}, receive, send)

        transport = httpx.ASGITransport(app=asgi)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            client.app_state = state  # type: ignore[attr-defined]
            yield client


@pytest.fixture
async def client(store: HistoryStore) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(SEEDED, store=store)) as client:
        yield client


async def seed(client: httpx.AsyncClient, scenario: str, **extra: Any) -> list[dict[str, Any]]:
    response = await client.post("/v1/test-only/seed", json={"scenario": scenario, **extra})
    assert response.status_code == 201, response.text
    sessions: list[dict[str, Any]] = response.json()["sessions"]
    return sessions

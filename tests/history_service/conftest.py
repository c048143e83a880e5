from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from history_service.app import create_app
from persistence import HistoryStore
from testing.asgi import serving
from testing.seeding import SEEDED


@pytest.fixture
async def client(store: HistoryStore) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(SEEDED, store=store)) as client:
        yield client

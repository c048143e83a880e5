from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from persistence.base import HistoryStore
from testing.rand import Rand
from testing.stores import BACKENDS, open_backend


@pytest.fixture
def rand() -> Rand:
    return Rand.from_env()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HistoryStore]:
    """An empty store of each backend in turn (PostgreSQL only with ``HISTORY_TEST_PG_URL``)."""
    opened = await open_backend(request.param, tmp_path)
    try:
        yield opened
    finally:
        await opened.close()

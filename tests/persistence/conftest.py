"""Fixtures of the persistence tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from testing.postgres import PG_URL, empty_postgres


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgresql", marks=pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set")),
    ]
)
async def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """An empty SQLite file, then the test PostgreSQL database, emptied."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'h.db'}"
    else:
        assert PG_URL
        await empty_postgres(PG_URL)
        yield PG_URL

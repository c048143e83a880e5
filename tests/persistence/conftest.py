from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from persistence.base import HistoryStore
from persistence.jsonl import JsonlStore
from persistence.memory import MemoryStore
from persistence.sql import SqlStore, metadata

PG_URL = os.environ.get("HISTORY_TEST_PG_URL")
BACKENDS = [
    "memory",
    "sqlite",
    "jsonl",
    "jsonl-zstd",
    pytest.param("postgresql", marks=pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set")),
]

StoreFactory = Callable[[], Awaitable[HistoryStore]]


async def open_backend(name: str, tmp_path: Path) -> HistoryStore:
    if name == "memory":
        return MemoryStore()
    if name == "sqlite":
        return await SqlStore.open(f"sqlite:///{tmp_path / 'history.db'}")
    if name == "jsonl":
        return await JsonlStore.open(tmp_path / "jsonl")
    if name == "jsonl-zstd":
        return await JsonlStore.open(tmp_path / "jsonl", compression="zstd")
    if name == "postgresql":
        assert PG_URL
        return await fresh_postgres_store(PG_URL)
    raise AssertionError(name)


async def fresh_postgres_store(url: str) -> HistoryStore:
    """A store on an emptied database: each test starts from no tables."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    with engine.begin() as conn:
        metadata.drop_all(conn)
        conn.execute(sa.text("DROP TABLE IF EXISTS history_meta"))
    engine.dispose()
    return await SqlStore.open(url)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HistoryStore]:
    opened = await open_backend(request.param, tmp_path)
    try:
        yield opened
    finally:
        await opened.close()

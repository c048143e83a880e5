"""Every store backend by name, opened empty: the matrix the store contract and service tests run over."""

from __future__ import annotations

from pathlib import Path

import pytest

from codec import splice
from persistence.base import HistoryStore
from persistence.jsonl import JsonlStore
from persistence.memory import MemoryStore
from persistence.sql import SqlStore
from testing.postgres import PG_URL, PG_URL_ENV, empty_postgres, fresh_postgres_store

__all__ = ["BACKENDS", "backend_url", "emptied_backend_url", "open_backend", "page_records"]

BACKENDS = [
    "memory",
    "sqlite",
    "jsonl",
    "jsonl-zstd",
    pytest.param("postgresql", marks=pytest.mark.skipif(not PG_URL, reason=f"{PG_URL_ENV} is not set")),
]


def backend_url(name: str, root: Path) -> str:
    """The URL of a store of backend ``name`` under ``root``; PostgreSQL's is the one shared test database."""
    if name == "postgresql":
        assert PG_URL
        return PG_URL
    return {
        "memory": "memory://",
        "sqlite": f"sqlite:///{root / 'history.db'}",
        "jsonl": f"jsonl:///{root / 'jsonl'}",
        "jsonl-zstd": f"jsonl:///{root / 'jsonl'}?compression=zstd",
    }[name]


async def emptied_backend_url(name: str, root: Path) -> str:
    """`backend_url`, with the shared PostgreSQL database emptied first."""
    if name == "postgresql":
        assert PG_URL
        await empty_postgres(PG_URL)
    return backend_url(name, root)


async def open_backend(name: str, tmp_path: Path) -> HistoryStore:
    """An empty store of backend ``name``; file stores live under ``tmp_path``."""
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


async def page_records(store: HistoryStore, session_id: str, from_seq: int, to_seq: int) -> list[bytes]:
    """The page records of an interval, spliced from one read of the store, each as bytes."""
    return list(splice(await store.read_stored(session_id, from_seq, to_seq), from_seq, to_seq))

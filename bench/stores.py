"""Store URLs for the benchmarks: every backend, PostgreSQL only when ``HISTORY_TEST_PG_URL`` is set."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from testing.postgres import PG_URL, drop_tables

__all__ = ["BACKENDS", "reset", "url_for"]

BACKENDS: Final = ["sqlite", "jsonl", "jsonl-zstd"] + (["postgresql"] if PG_URL else [])


def url_for(backend: str, root: Path) -> str:
    """A fresh store URL under ``root`` (PostgreSQL is one shared database: `reset` it first)."""
    if backend == "sqlite":
        return f"sqlite:///{root / 'h.db'}"
    if backend == "jsonl":
        return f"jsonl:///{root / 'jsonl'}"
    if backend == "jsonl-zstd":
        return f"jsonl:///{root / 'zstd'}?compression=zstd"
    assert PG_URL
    return PG_URL


async def reset(url: str) -> None:
    """Drop our tables from a PostgreSQL store; other stores start empty already."""
    if url.startswith("postgresql"):
        drop_tables(url)

"""Open a store from its URL (DESIGN §7).

| URL | store |
|---|---|
| ``sqlite:///path.db`` | SQLite, the embedded default |
| ``postgresql+psycopg://user@host/db`` | PostgreSQL (``postgresql://`` means the same) |
| ``jsonl:///dir`` | JSONL files; ``?compression=zstd`` writes one zstd frame per batch |
| ``memory://`` | in process memory, for tests and demos |
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from persistence.base import HistoryStore
from persistence.errors import StoreError
from persistence.jsonl import JsonlStore
from persistence.memory import MemoryStore
from persistence.sql import SqlStore

__all__ = ["open_store"]


async def open_store(url: str) -> HistoryStore:
    """Open the store a URL names; raise `StoreError` for an unknown scheme or bad options."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        return MemoryStore()
    if scheme == "sqlite":
        return await SqlStore.open(url)
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return await SqlStore.open("postgresql+psycopg://" + url.split("://", 1)[1])
    if scheme == "jsonl":
        path = parts.netloc + parts.path
        if not path:
            raise StoreError(f"{url!r} names no directory; use jsonl:///absolute/dir or jsonl://relative/dir")
        options = parse_qs(parts.query)
        unknown = set(options) - {"compression"}
        if unknown:
            raise StoreError(f"unknown JSONL store option(s) {', '.join(sorted(unknown))} in {url!r}")
        return await JsonlStore.open(path, compression=options.get("compression", ["none"])[-1])
    raise StoreError(f"unsupported store URL {url!r}; use sqlite:///path.db, postgresql+psycopg://..., or jsonl:///dir")

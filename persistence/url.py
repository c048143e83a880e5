"""Open a store from its URL (docs/protocol.md §7).

| URL | store |
|---|---|
| ``sqlite:///path.db`` | SQLite, the embedded default |
| ``postgresql+psycopg://user@host/db`` | PostgreSQL (``postgresql://`` means the same) |
| ``jsonl:///dir`` | JSONL files; ``?compression=zstd`` writes one zstd frame per batch |
| ``memory://`` | in process memory, for tests and demos |

File paths follow SQLAlchemy's rule for both SQLite and JSONL: after the scheme, three
slashes start a relative path and four an absolute one (``sqlite:///history.db``,
``jsonl:////var/lib/history``). Only a caller that asks may create a store; reading a
store that does not exist is an error that names the path, never an empty new store.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from persistence.base import DEFAULT_SESSION_CACHE, DEFAULT_STORE_TIMEOUT, HistoryStore
from persistence.errors import SchemaVersionError, StoreError, StoreNotFoundError
from persistence.jsonl import ROOT_MARKER, JsonlStore
from persistence.memory import MemoryStore
from persistence.sql import SqlStore

__all__ = ["describe_url", "open_store", "shareable_across_workers"]

_KNOWN = frozenset({"memory", "sqlite", "postgresql", "postgres", "postgresql+psycopg", "jsonl"})
# Stores that tell every process of the others' writes: PostgreSQL by LISTEN/NOTIFY, SQLite files and
# JSONL by a log of notices (`persistence.notice_log`).
_SHARED = frozenset({"postgresql", "postgres", "postgresql+psycopg", "jsonl"})
_SCHEMES = "use sqlite:///path.db, postgresql+psycopg://user@host/db, jsonl:///dir or memory://"


async def open_store(
    url: str,
    *,
    create: bool = False,
    session_cache: int = DEFAULT_SESSION_CACHE,
    timeout: float = DEFAULT_STORE_TIMEOUT,
) -> HistoryStore:
    """Open the store a URL names; raise `StoreError` for an unknown scheme, bad options or a missing store.

    With ``create``, a SQLite file or JSONL directory that does not exist is made, in a
    directory that must exist; without it, a missing one raises `StoreNotFoundError`.
    Every failure to open names the URL and, for a file store, the path. ``session_cache``
    bounds the idle sessions whose state the store keeps; ``timeout`` (seconds) bounds each
    call of a SQL store, past which it raises `StoreError` (the file and memory stores wait
    on no server).
    """
    if urlsplit(url).scheme.lower() not in _KNOWN:
        raise StoreError(f"unsupported store URL {_shown(url)}; {_SCHEMES}")
    try:
        return await _open(url, create, session_cache, timeout)
    except (StoreNotFoundError, SchemaVersionError):
        raise
    except StoreError as exc:
        raise StoreError(f"cannot open {describe_url(url)}: {exc}") from exc


async def _open(url: str, create: bool, session_cache: int, timeout: float) -> HistoryStore:
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        return MemoryStore()
    if scheme == "sqlite":
        path = _sqlite_path(url)
        if path is not None:
            _check_location(path, create, what="SQLite database", url=url)
        return await SqlStore.open(url, session_cache=session_cache, timeout=timeout)
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        pg_url = "postgresql+psycopg://" + url.split("://", 1)[1]
        return await SqlStore.open(pg_url, session_cache=session_cache, timeout=timeout)
    if scheme == "jsonl":
        root, compression = _jsonl(url)
        if not (root / ROOT_MARKER).exists():
            _check_location(root / ROOT_MARKER, create, what="JSONL store", url=url, shown=root)
        return await JsonlStore.open(root, compression=compression, session_cache=session_cache)
    raise AssertionError(scheme)


def shareable_across_workers(url: str) -> bool:
    """Whether several processes may serve one store of this URL, each hearing of the writes made through the others.

    PostgreSQL tells them across hosts, a SQLite file and a JSONL directory on one host. A
    memory store, or an in-memory SQLite database, lives in one process: a follower in another
    would never hear of its appends.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        try:
            return _sqlite_path(url) is not None
        except StoreError:
            return False
    return scheme in _SHARED


def describe_url(url: str) -> str:
    """The URL with any password hidden, and for a file store the absolute path it resolves to."""
    scheme = urlsplit(url).scheme.lower()
    try:
        if scheme == "sqlite":
            path = _sqlite_path(url)
            return f"{url} ({path.resolve()})" if path is not None else url
        if scheme == "jsonl":
            return f"{url} ({_jsonl(url)[0].resolve()})"
    except StoreError:
        return url
    return _shown(url)


def _shown(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


def _sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL, or ``None`` for an in-memory database."""
    rest = url.split("://", 1)[1].split("?", 1)[0] if "://" in url else ""
    if not rest.startswith("/"):
        raise StoreError(f"{url!r}: a SQLite URL is sqlite:///relative.db or sqlite:////absolute.db")
    database = rest[1:]
    if database in ("", ":memory:"):
        return None
    return Path(database)


def _jsonl(url: str) -> tuple[Path, str | None]:
    parts = urlsplit(url)
    if parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
        raise StoreError(f"{url!r}: a JSONL URL is jsonl:///relative/dir or jsonl:////absolute/dir")
    options = parse_qs(parts.query)
    unknown = set(options) - {"compression"}
    if unknown:
        raise StoreError(f"unknown JSONL store option(s) {', '.join(sorted(unknown))} in {url!r}")
    return Path(parts.path[1:]), options["compression"][-1] if "compression" in options else None


def _check_location(path: Path, create: bool, *, what: str, url: str, shown: Path | None = None) -> None:
    """A store that is missing at ``path`` may only be created, and only inside a directory that exists."""
    if path.exists():
        return
    place = (shown or path).resolve()
    if not create:
        raise StoreNotFoundError(f"no {what} at {place} ({url}); `serve` or `import` create one")
    if not place.parent.is_dir():
        raise StoreNotFoundError(f"cannot create the {what} {place}: the directory {place.parent} does not exist")

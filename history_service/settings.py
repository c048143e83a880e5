"""Service configuration: one frozen `Settings`, parsed from the environment once, at the edge."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal
from urllib.parse import urlsplit

import msgspec

from persistence import DEFAULT_SESSION_CACHE, DEFAULT_STORE_TIMEOUT

__all__ = ["DEFAULT_STORE", "Settings"]

DEFAULT_STORE: Final = "sqlite:///history.db"
LAUNCHED: Final = "_HISTORY_LAUNCHED_SETTINGS"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every knob of the service. Unknown or invalid values raise ``ValueError`` at startup.

    Parameters:
        store_url: the store (see `persistence.url`).
        store_timeout: seconds a call of a SQL store may take (connecting, waiting for a lock,
            a server that does not answer) before it fails and the request gets 503 ``store_unavailable``.
        host, port: where ``serve`` listens.
        auth: ``none`` (one principal, ``local``) or ``token`` (a service bearer token plus ``X-Principal``).
        tokens: accepted service tokens when ``auth == "token"``.
        cors_origins: the browser origins (``scheme://host[:port]``) whose pages may call the
            service from another origin (`history_service.cors`); none, the default, sends no CORS headers.
        max_batch_events: most logical events one append may carry, a packed row counting its members (413 beyond).
        max_body_bytes: most request-body bytes, before and after decompression (413 beyond).
        max_body_values: most JSON values a request body may hold, counted before it is decoded (413 beyond).
        default_max_bytes: the page byte target when a request gives no ``maxBytes``.
        page_cache_bytes, page_cache_entries: bounds of the cache of encoded immutable pages (explicit ``through``).
        inflight_bytes: the process's budget of page and snapshot bytes in flight: read from the
            store, spliced, or waiting on a slow reader's socket. A read that would pass it waits
            up to ``inflight_wait`` seconds, then gets 503 ``overloaded`` with ``Retry-After``.
        inflight_wait: seconds a read waits for room in ``inflight_bytes`` before it is refused.
        max_followers: most follow streams open at once; past it a new follow gets 503
            ``overloaded``. Unset, three quarters of ``limit_concurrency`` (at most that less
            two), so health checks, metrics and other requests always find a connection.
        session_cache: most sessions whose state each process keeps while they are idle (owner and
            header; the JSONL store's loaded index; the SQL store's open run); the least recently
            used beyond it are released, and read again when next used.
        ping_interval: seconds between ``: ping`` comments on an idle follow stream.
        retry_ms: the ``retry:`` a follow stream advertises.
        follow_buffer: recent events kept per session for followers; a follower further
            behind catches up from the store.
        follow_coalesce_ms: while a session publishes more often than every quarter of
            this, the least time between two writes to one follower; events published
            meanwhile share the next write. Quieter sessions are written at once.
        enable_test_seed: mount ``POST /v1/test-only/seed``.
        timeout_keep_alive: seconds an idle keep-alive connection stays open between requests.
        limit_concurrency: most connections and requests in flight; beyond it new requests get 503.
        max_header_bytes: most bytes of a request's head (request line and headers) the server buffers.
        workers: how many server processes ``serve`` runs; more than one needs a store that
            tells every process of the others' appends (PostgreSQL).
        http: the HTTP/1.1 implementation ``serve`` runs: ``h11`` enforces ``max_header_bytes``;
            ``httptools`` is faster but buffers a request's headers without a bound, so use it
            only behind a gateway that bounds them.
        log_format: ``text`` (one readable line per record) or ``json`` (one JSON object per line).
        log_level: the least severe records written: ``debug``, ``info``, ``warning``, ``error`` or ``critical``.
        metrics: record Prometheus metrics and serve them at ``GET /metrics`` (off: neither).
        metrics_port: ``serve`` serves the metrics on this port of ``host`` instead, with no
            authentication, from its own process, and the API port serves no ``/metrics``
            (a launcher's setting, like ``port``: ``uvicorn --factory`` ignores it).
        metrics_dir: where every worker process writes its metric samples, so that each one's
            ``/metrics`` sums them all (``PROMETHEUS_MULTIPROC_DIR``; ``serve --workers`` makes one).
    """

    store_url: str = DEFAULT_STORE
    store_timeout: float = DEFAULT_STORE_TIMEOUT
    host: str = "127.0.0.1"
    port: int = 8000
    auth: Literal["none", "token"] = "none"
    tokens: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_batch_events: int = 100_000
    max_body_bytes: int = 64 * 1024 * 1024
    max_body_values: int = 2_000_000
    default_max_bytes: int = 16 * 1024 * 1024
    page_cache_bytes: int = 64 * 1024 * 1024
    page_cache_entries: int = 10_000
    inflight_bytes: int = 32 * 1024 * 1024
    inflight_wait: float = 1.0
    max_followers: int | None = None
    session_cache: int = DEFAULT_SESSION_CACHE
    ping_interval: float = 15.0
    retry_ms: int = 1000
    follow_buffer: int = 8192
    follow_coalesce_ms: float = 40.0
    enable_test_seed: bool = False
    timeout_keep_alive: int = 5
    limit_concurrency: int = 4096
    max_header_bytes: int = 16 * 1024
    http: Literal["h11", "httptools"] = "h11"
    workers: int = 1
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    metrics: bool = True
    metrics_port: int | None = None
    metrics_dir: str | None = None

    def __post_init__(self) -> None:
        if self.auth == "token" and not self.tokens:
            raise ValueError("auth=token needs at least one service token (HISTORY_SERVICE_TOKENS or --token-file)")
        for origin in self.cors_origins:
            _check_origin(origin)
        positive = (
            "max_batch_events",
            "max_body_bytes",
            "max_body_values",
            "default_max_bytes",
            "follow_buffer",
            "session_cache",
            "retry_ms",
            "ping_interval",
            "timeout_keep_alive",
            "limit_concurrency",
            "max_header_bytes",
            "workers",
            "inflight_bytes",
            "store_timeout",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_followers is not None and not 1 <= self.max_followers <= self.limit_concurrency - 2:
            raise ValueError(
                f"max_followers must be at least 1 and at most limit_concurrency - 2 ({self.limit_concurrency - 2}): "
                f"the server refuses a request once its connections, the asking one included, reach "
                f"limit_concurrency, so a health check needs two to spare; got {self.max_followers}"
            )
        for name in ("page_cache_bytes", "page_cache_entries", "follow_coalesce_ms", "inflight_wait"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be from 1 to 65535, got {self.port}")
        if self.metrics_port is not None:
            if not 1 <= self.metrics_port <= 65535 or self.metrics_port == self.port:
                raise ValueError(f"metrics_port must be from 1 to 65535 and not the port, got {self.metrics_port}")
            if not self.metrics:
                raise ValueError("metrics_port needs metrics on (HISTORY_METRICS=1)")

    @property
    def follower_cap(self) -> int:
        """The most follow streams open at once: ``max_followers``, else three quarters of ``limit_concurrency``.

        Never more than ``limit_concurrency - 2``: uvicorn refuses a request once its
        connections, the asking one included, reach the limit.
        """
        if self.max_followers is not None:
            return self.max_followers
        return max(1, min(self.limit_concurrency * 3 // 4, self.limit_concurrency - 2))

    def for_workers(self) -> dict[str, str]:
        """The environment that hands these settings, exactly, to worker processes a launcher starts."""
        return {LAUNCHED: msgspec.json.encode(self).decode()}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: object) -> Settings:
        """Read ``HISTORY_*`` variables; keyword overrides (from CLI flags) win.

        A worker process that ``serve --workers`` started reads the settings its launcher
        resolved (`for_workers`), so every worker runs with the same ones.
        """
        if LAUNCHED in environ and not overrides:
            return msgspec.json.decode(environ[LAUNCHED], type=cls)
        values: dict[str, object] = {}
        table = {
            "HISTORY_STORE": ("store_url", str),
            "HISTORY_STORE_TIMEOUT": ("store_timeout", float),
            "HISTORY_HOST": ("host", str),
            "HISTORY_PORT": ("port", int),
            "HISTORY_AUTH": ("auth", str),
            "HISTORY_MAX_BATCH_EVENTS": ("max_batch_events", int),
            "HISTORY_MAX_BODY_BYTES": ("max_body_bytes", int),
            "HISTORY_MAX_BODY_VALUES": ("max_body_values", int),
            "HISTORY_DEFAULT_MAX_BYTES": ("default_max_bytes", int),
            "HISTORY_PAGE_CACHE_BYTES": ("page_cache_bytes", int),
            "HISTORY_PAGE_CACHE_ENTRIES": ("page_cache_entries", int),
            "HISTORY_SESSION_CACHE": ("session_cache", int),
            "HISTORY_INFLIGHT_BYTES": ("inflight_bytes", int),
            "HISTORY_INFLIGHT_WAIT": ("inflight_wait", float),
            "HISTORY_MAX_FOLLOWERS": ("max_followers", int),
            "HISTORY_PING_INTERVAL": ("ping_interval", float),
            "HISTORY_RETRY_MS": ("retry_ms", int),
            "HISTORY_FOLLOW_BUFFER": ("follow_buffer", int),
            "HISTORY_FOLLOW_COALESCE_MS": ("follow_coalesce_ms", float),
            "HISTORY_TIMEOUT_KEEP_ALIVE": ("timeout_keep_alive", int),
            "HISTORY_LIMIT_CONCURRENCY": ("limit_concurrency", int),
            "HISTORY_MAX_HEADER_BYTES": ("max_header_bytes", int),
            "HISTORY_HTTP": ("http", str),
            "HISTORY_WORKERS": ("workers", int),
            "HISTORY_LOG_FORMAT": ("log_format", str),
            "HISTORY_LOG_LEVEL": ("log_level", str),
            "HISTORY_METRICS_PORT": ("metrics_port", int),
            "PROMETHEUS_MULTIPROC_DIR": ("metrics_dir", str),
        }
        for variable, (name, kind) in table.items():
            if variable in environ:
                try:
                    values[name] = kind(environ[variable])
                except ValueError:
                    raise ValueError(f"{variable}={environ[variable]!r} is not a valid {kind.__name__}") from None
        if "HISTORY_SERVICE_TOKENS" in environ:
            values["tokens"] = tuple(t.strip() for t in environ["HISTORY_SERVICE_TOKENS"].split(",") if t.strip())
        if "HISTORY_CORS_ORIGINS" in environ:
            values["cors_origins"] = tuple(o.strip() for o in environ["HISTORY_CORS_ORIGINS"].split(",") if o.strip())
        values["enable_test_seed"] = environ.get("HISTORY_ENABLE_TEST_SEED") == "1"
        if "HISTORY_METRICS" in environ:
            if environ["HISTORY_METRICS"] not in ("0", "1"):
                raise ValueError(f"HISTORY_METRICS={environ['HISTORY_METRICS']!r} must be 0 or 1")
            values["metrics"] = environ["HISTORY_METRICS"] == "1"
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return msgspec.convert(values, cls)
        except msgspec.ValidationError as exc:
            # Name the variable when one alone is at fault: every field has a default, so each converts alone.
            for variable, (name, _) in table.items():
                if variable in environ and name in values and overrides.get(name) is None:
                    try:
                        msgspec.convert({name: values[name]}, cls)
                    except (msgspec.ValidationError, ValueError):
                        raise ValueError(f"invalid setting ({variable}): {exc}") from exc
            raise ValueError(f"invalid setting: {exc}") from exc


def read_token_file(path: Path) -> tuple[str, ...]:
    """Tokens from a file, one per line; blank lines and ``#`` comments are ignored."""
    lines = path.read_text().splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))


def _check_origin(origin: str) -> None:
    """Refuse an allowed origin that no browser sends as its ``Origin``, so it could never match."""
    where = "(HISTORY_CORS_ORIGINS or --cors-origin)"
    if "*" in origin:
        raise ValueError(
            f"CORS origin {origin!r}: wildcards are refused, since any site's pages could then send requests "
            f"with a user's token in Authorization; list each origin {where}"
        )
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:
        raise ValueError(f"CORS origin {origin!r} has an invalid port {where}") from None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        raise ValueError(f"CORS origin {origin!r} is not http(s)://host[:port] {where}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    sent = f"{parts.scheme}://{host}" + ("" if port in (None, _DEFAULT_PORTS[parts.scheme]) else f":{port}")
    if origin != sent:
        raise ValueError(
            f"CORS origin {origin!r} is not spelled as a browser sends it (no path, lower case, "
            f"no default port): use {sent!r} {where}"
        )

"""Service configuration, parsed from the environment once, at the edge.

`Settings` is the app's (`create_app` takes one); `ServerSettings` is the launcher's: where
``serve`` listens, and what it hands uvicorn. Each field names its own environment variable
(`Env`), so the variables are read, and a bad one is named, from the fields alone.
"""

from __future__ import annotations

import argparse
import os
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self, Union, get_args, get_origin
from urllib.parse import urlsplit

import msgspec

from codec import workers_count
from history_service.durations import duration_ms
from persistence import DEFAULT_SESSION_CACHE, DEFAULT_STORE_TIMEOUT

__all__ = ["DEFAULT_STORE", "Env", "ServerSettings", "Settings", "environment_variables"]

DEFAULT_STORE: Final = "sqlite:///history.db"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Env:
    """The environment variable a setting is read from (``Annotated[int, Env("HISTORY_PORT")]``).

    ``parse`` turns the variable's text into the value, raising ``ValueError`` with what is
    wrong; without it the field's type does: a number, a string, or a comma-separated tuple.
    """

    name: str
    parse: Callable[[str], object] | None = None


def _one(text: str) -> bool:
    return text == "1"


def _duration(text: str) -> int:
    try:
        return duration_ms(text)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(str(exc).removeprefix("expected ")) from None


def _workers(text: str) -> int | Literal["auto"]:
    try:
        return workers_count(text)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(str(exc).removeprefix("expected ")) from None


def _zero_or_one(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError("must be 0 or 1")
    return text == "1"


class _FromEnv(msgspec.Struct, frozen=True, kw_only=True):
    """Reading ``HISTORY_*`` variables into the fields that name them."""

    @classmethod
    def _read(cls, environ: Mapping[str, str], overrides: Mapping[str, object]) -> Self:
        values: dict[str, object] = {}
        named: dict[str, str] = {}
        for name, env, kind in _env_fields(cls):
            if env.name in environ:
                text = environ[env.name]
                try:
                    values[name] = (env.parse or _parser(kind))(text)
                except ValueError as exc:
                    raise ValueError(f"{env.name}={text!r} {exc}") from None
                named[name] = env.name
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return msgspec.convert(values, cls)
        except msgspec.ValidationError as exc:
            # Name the variable when one alone is at fault: every field has a default, so each converts alone.
            for name, variable in named.items():
                if overrides.get(name) is None:
                    try:
                        msgspec.convert({name: values[name]}, cls)
                    except (msgspec.ValidationError, ValueError):
                        raise ValueError(f"invalid setting ({variable}): {exc}") from exc
            raise ValueError(f"invalid setting: {exc}") from exc


def _env_fields(cls: type[msgspec.Struct]) -> list[tuple[str, Env, Any]]:
    """Each field of ``cls`` read from the environment: its name, its `Env`, and its type."""
    found = []
    for field in msgspec.structs.fields(cls):
        if get_origin(field.type) is Annotated:
            kind, *extras = get_args(field.type)
            found += [(field.name, extra, kind) for extra in extras if isinstance(extra, Env)]
    return found


def _parser(kind: Any) -> Callable[[str], object]:
    """How a variable's text becomes a value of ``kind``."""
    if get_origin(kind) in (Union, types.UnionType):
        (kind,) = [arg for arg in get_args(kind) if arg is not type(None)]
    if get_origin(kind) is tuple:
        return lambda text: tuple(part.strip() for part in text.split(",") if part.strip())
    if kind in (int, float):
        return _number(kind)
    return str  # a string, or a Literal that msgspec checks


def _number(kind: type[int] | type[float]) -> Callable[[str], object]:
    def parse(text: str) -> object:
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"is not a valid {kind.__name__}") from None

    return parse


def _check_positive(settings: msgspec.Struct, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(settings, name) <= 0:
            raise ValueError(f"{name} must be positive")


def environment_variables() -> dict[str, str]:
    """Every variable the settings read, with the field that reads it (``ServerSettings.port``)."""
    return {
        env.name: f"{cls.__name__}.{name}" for cls in (Settings, ServerSettings) for name, env, _ in _env_fields(cls)
    }


class Settings(_FromEnv, frozen=True, kw_only=True):
    """Every knob of the app. Unknown or invalid values raise ``ValueError`` at startup.

    Parameters:
        store_url: the store (see `persistence.url`).
        store_timeout: seconds a call of a SQL store may take (connecting, waiting for a lock,
            a server that does not answer) before it fails and the request gets 503 ``store_unavailable``.
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
        retention_ms: how long a session is kept after its last write (its creation, last append
            or close), in ms; ``HISTORY_RETENTION`` takes a duration such as ``30d``, ``12h`` or
            ``90s``. Unset, sessions are kept until deleted or until their own ``expiresAt``
            (docs/protocol.md §6.5).
        sweep_interval: seconds between two sweeps of expired sessions; 0 sweeps never (``purge`` then can).
        sweep_batch: most expired sessions one read of the sweep finds; each is then deleted apart.
        enable_test_seed: mount ``POST /v1/test-only/seed``.
        limit_concurrency: most connections and requests in flight; beyond it new requests get 503.
            The server enforces it (``serve`` hands it to uvicorn); the app keeps its follow
            streams below it (`follower_cap`), so it is the app's to know.
        log_format: ``text`` (one readable line per record) or ``json`` (one JSON object per line).
        log_level: the least severe records written: ``debug``, ``info``, ``warning``, ``error`` or ``critical``.
        metrics: record Prometheus metrics and serve them at ``GET /metrics`` (off: neither).
        metrics_port: the metrics are served on this port, with no authentication, by the
            launcher's own process, and the API port serves no ``/metrics``. Only ``serve``
            opens it: `history_service.app.app_factory` (``uvicorn --factory``) ignores it.
        metrics_dir: where every worker process writes its metric samples, so that each one's
            ``/metrics`` sums them all (``PROMETHEUS_MULTIPROC_DIR``; ``serve --workers`` makes one).
        durable_streams: serve the Durable Streams protocol at ``/ds`` (docs/protocol.md §13).
        ds_long_poll: seconds a Durable Streams long-poll waits before answering 204, and an idle
            SSE read before its keep-alive control event.
        ds_read_bytes: the most bytes of stream data one Durable Streams read answers, or one
            stored piece of an append (1 MiB) when that alone is more; a reader asks again from
            the offset it was given.
        ds_webhooks: deliver webhook subscriptions (off: a webhook subscription is refused, and
            none is notified; pull-wake subscriptions still work).
        ds_webhook_hosts: the only host names a webhook may name; none, the default, allows any
            public host. Every address a host resolves to must be public either way.
        ds_webhook_loopback: let webhooks reach loopback addresses (127.0.0.0/8, ``::1``,
            ``localhost``), over plain http too: for tests and development, never a shared host.
    """

    store_url: Annotated[str, Env("HISTORY_STORE")] = DEFAULT_STORE
    store_timeout: Annotated[float, Env("HISTORY_STORE_TIMEOUT")] = DEFAULT_STORE_TIMEOUT
    auth: Annotated[Literal["none", "token"], Env("HISTORY_AUTH")] = "none"
    tokens: Annotated[tuple[str, ...], Env("HISTORY_SERVICE_TOKENS")] = ()
    cors_origins: Annotated[tuple[str, ...], Env("HISTORY_CORS_ORIGINS")] = ()
    max_batch_events: Annotated[int, Env("HISTORY_MAX_BATCH_EVENTS")] = 100_000
    max_body_bytes: Annotated[int, Env("HISTORY_MAX_BODY_BYTES")] = 64 * 1024 * 1024
    max_body_values: Annotated[int, Env("HISTORY_MAX_BODY_VALUES")] = 2_000_000
    default_max_bytes: Annotated[int, Env("HISTORY_DEFAULT_MAX_BYTES")] = 16 * 1024 * 1024
    page_cache_bytes: Annotated[int, Env("HISTORY_PAGE_CACHE_BYTES")] = 64 * 1024 * 1024
    page_cache_entries: Annotated[int, Env("HISTORY_PAGE_CACHE_ENTRIES")] = 10_000
    inflight_bytes: Annotated[int, Env("HISTORY_INFLIGHT_BYTES")] = 32 * 1024 * 1024
    inflight_wait: Annotated[float, Env("HISTORY_INFLIGHT_WAIT")] = 1.0
    max_followers: Annotated[int | None, Env("HISTORY_MAX_FOLLOWERS")] = None
    session_cache: Annotated[int, Env("HISTORY_SESSION_CACHE")] = DEFAULT_SESSION_CACHE
    ping_interval: Annotated[float, Env("HISTORY_PING_INTERVAL")] = 15.0
    retry_ms: Annotated[int, Env("HISTORY_RETRY_MS")] = 1000
    follow_buffer: Annotated[int, Env("HISTORY_FOLLOW_BUFFER")] = 8192
    follow_coalesce_ms: Annotated[float, Env("HISTORY_FOLLOW_COALESCE_MS")] = 40.0
    retention_ms: Annotated[int | None, Env("HISTORY_RETENTION", _duration)] = None
    sweep_interval: Annotated[float, Env("HISTORY_SWEEP_INTERVAL")] = 60.0
    sweep_batch: Annotated[int, Env("HISTORY_SWEEP_BATCH")] = 100
    enable_test_seed: Annotated[bool, Env("HISTORY_ENABLE_TEST_SEED", _one)] = False
    limit_concurrency: Annotated[int, Env("HISTORY_LIMIT_CONCURRENCY")] = 4096
    log_format: Annotated[Literal["text", "json"], Env("HISTORY_LOG_FORMAT")] = "text"
    log_level: Annotated[Literal["debug", "info", "warning", "error", "critical"], Env("HISTORY_LOG_LEVEL")] = "info"
    metrics: Annotated[bool, Env("HISTORY_METRICS", _zero_or_one)] = True
    metrics_port: Annotated[int | None, Env("HISTORY_METRICS_PORT")] = None
    metrics_dir: Annotated[str | None, Env("PROMETHEUS_MULTIPROC_DIR")] = None
    durable_streams: Annotated[bool, Env("HISTORY_DURABLE_STREAMS", _zero_or_one)] = True
    ds_long_poll: Annotated[float, Env("HISTORY_DS_LONG_POLL")] = 15.0
    ds_read_bytes: Annotated[int, Env("HISTORY_DS_READ_BYTES")] = 1024 * 1024
    ds_webhooks: Annotated[bool, Env("HISTORY_DS_WEBHOOKS", _zero_or_one)] = True
    ds_webhook_hosts: Annotated[tuple[str, ...], Env("HISTORY_DS_WEBHOOK_HOSTS")] = ()
    ds_webhook_loopback: Annotated[bool, Env("HISTORY_DS_WEBHOOK_LOOPBACK", _zero_or_one)] = False

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
            "limit_concurrency",
            "inflight_bytes",
            "store_timeout",
            "sweep_batch",
            "ds_long_poll",
            "ds_read_bytes",
        )
        _check_positive(self, positive)
        if self.max_followers is not None and not 1 <= self.max_followers <= self.limit_concurrency - 2:
            raise ValueError(
                f"max_followers must be at least 1 and at most limit_concurrency - 2 ({self.limit_concurrency - 2}): "
                f"the server refuses a request once its connections, the asking one included, reach "
                f"limit_concurrency, so a health check needs two to spare; got {self.max_followers}"
            )
        if self.retention_ms is not None and self.retention_ms <= 0:
            raise ValueError("retention_ms must be positive")
        for name in ("page_cache_bytes", "page_cache_entries", "follow_coalesce_ms", "inflight_wait", "sweep_interval"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.metrics_port is not None:
            if not 1 <= self.metrics_port <= 65535:
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

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: object) -> Settings:
        """Read the variables the fields name; keyword overrides (from CLI flags) win, unless ``None``."""
        return cls._read(environ, overrides)


class ServerSettings(_FromEnv, frozen=True, kw_only=True):
    """What the launcher (``serve``) reads besides the app's `Settings`: where it listens, and how it runs uvicorn.

    Parameters:
        app: the settings of the app each server process runs.
        host, port: where ``serve`` listens.
        workers: how many server processes ``serve`` runs, or ``auto``: one per usable core
            (`history_service.cli.launcher.resolve_workers`). More than one needs a store that tells
            every process of the others' writes (`persistence.url.shareable_across_workers`).
        http: the HTTP/1.1 implementation ``serve`` runs: ``h11`` enforces ``max_header_bytes``;
            ``httptools`` is faster but buffers a request's headers without a bound, so use it
            only behind a gateway that bounds them.
        timeout_keep_alive: seconds an idle keep-alive connection stays open between requests.
        max_header_bytes: most bytes of a request's head (request line and headers) the server buffers.
    """

    app: Settings = Settings()
    host: Annotated[str, Env("HISTORY_HOST")] = "127.0.0.1"
    port: Annotated[int, Env("HISTORY_PORT")] = 8000
    workers: Annotated[int | Literal["auto"], Env("HISTORY_WORKERS", _workers)] = 1
    http: Annotated[Literal["h11", "httptools"], Env("HISTORY_HTTP")] = "h11"
    timeout_keep_alive: Annotated[int, Env("HISTORY_TIMEOUT_KEEP_ALIVE")] = 5
    max_header_bytes: Annotated[int, Env("HISTORY_MAX_HEADER_BYTES")] = 16 * 1024

    def __post_init__(self) -> None:
        _check_positive(self, ("timeout_keep_alive", "max_header_bytes"))
        if self.workers != "auto" and self.workers <= 0:
            raise ValueError("workers must be positive, or auto")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be from 1 to 65535, got {self.port}")
        if self.app.metrics_port == self.port:
            raise ValueError(f"metrics_port must be from 1 to 65535 and not the port, got {self.app.metrics_port}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: object) -> ServerSettings:
        """The app's settings and the launcher's, from the same variables; overrides go to whichever has the field."""
        own = set(cls.__struct_fields__)
        app = Settings.from_env(environ, **{k: v for k, v in overrides.items() if k not in own})
        return cls._read(environ, {"app": app, **{k: v for k, v in overrides.items() if k in own}})


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

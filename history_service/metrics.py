"""Prometheus metrics: what one app counts and ``GET /metrics``; `history_service.edge` times requests.

`Metrics` records nothing: it is what ``HISTORY_METRICS=0`` runs with, and what a part
built without one (a `PageReader` in the CLI) counts into. `PrometheusMetrics` records
into metric objects of its own, so two apps in one process never share a count.

Under ``serve --workers N`` every worker writes its samples to files in one directory
(prometheus-client's multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``), and any worker's
``/metrics`` reads them all: the counts of every worker, summed. The launcher makes that
directory before the workers start and removes it when they have stopped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import anyio.to_thread
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, values
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from history_service.auth import check_service_token
from history_service.logs import route_template
from history_service.settings import Settings

__all__ = ["Metrics", "PrometheusMetrics", "metrics_for", "multiprocess_registry", "route_label", "scrape"]

UNMATCHED: Final = "unmatched"
# Any other method is one label value, so a client cannot mint series.
_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_SECONDS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """What the service counts. This base counts nothing; `PrometheusMetrics` records it all.

    Every method is one or two metric updates, cheap enough for the hot paths that call it.
    """

    enabled = False

    @contextmanager
    def running(self) -> Iterator[None]:
        """Hold while the app serves (its lifespan)."""
        yield

    def responded(self, route: str, method: str, status: int, seconds: float) -> None:
        """A request to ``route`` (its template) got ``status``; ``seconds`` to its first body bytes."""

    def sent(self, route: str, coding: str, size: int) -> None:
        """``size`` response body bytes of ``route`` went out in content coding ``coding``."""

    def page_cached(self) -> None:
        """An immutable page was served from the page cache."""

    def page_built(self, seconds: float, *, immutable: bool) -> None:
        """A page was built from the store's read (spliced, validated, coded) in ``seconds``."""

    def follow_opened(self) -> None:
        """A follow stream opened."""

    def follow_closed(self) -> None:
        """A follow stream ended, however it ended."""

    def follow_frames(self, frame: str, count: int = 1) -> None:
        """``count`` follow frames of kind ``frame`` (snapshot, event, records, error, end or ping) were written."""

    def follow_caught_up(self, *, behind: bool) -> None:
        """A follower turned to the store: it fell ``behind`` the shared buffer, or it resumed from before it."""

    def appended(self, events: int, *, idempotent: bool = False) -> None:
        """An append of ``events`` logical events was stored, or was an exact re-send (``idempotent``)."""

    def seq_conflict(self) -> None:
        """An append was refused because it did not continue the head."""

    def session_closed(self) -> None:
        """A session was closed (a repeated close is not counted)."""

    def sessions_deleted(self, count: int, reason: str) -> None:
        """``count`` sessions were deleted (a tree counts each of its sessions), for ``reason``: request or expired."""

    def store_error(self, exc: BaseException) -> None:
        """The store failed; counted by the kind (class) of ``exc``."""


class PrometheusMetrics(Metrics):
    """The service's Prometheus metrics, in a registry of their own.

    Parameters:
        multiprocess_dir: where every worker of a deployment writes its samples
            (``PROMETHEUS_MULTIPROC_DIR``); ``registry`` then reads them all. Without it,
            ``registry`` holds this object's own metrics and the process's CPU and memory.
    """

    enabled = True

    def __init__(self, *, multiprocess_dir: str | None = None) -> None:
        self._dir = multiprocess_dir
        if multiprocess_dir is None:
            self.registry = CollectorRegistry()
            ProcessCollector(registry=self.registry)
            owner: CollectorRegistry | None = self.registry
        else:
            # The library picks file-backed values when it is imported, from the environment alone.
            if not getattr(values.ValueClass, "_multiprocess", False):
                raise RuntimeError(
                    "metrics from several processes need PROMETHEUS_MULTIPROC_DIR set before prometheus_client "
                    "is imported; `history-service serve --workers N` sets it"
                )
            self.registry = multiprocess_registry(multiprocess_dir)
            # Each worker's samples reach `registry` through their files, never as objects.
            owner = None
        self._latency = Histogram(
            "history_http_request_duration_seconds",
            "Seconds from a request's arrival to its first response body bytes, by route template.",
            ["route", "method", "status"],
            buckets=_SECONDS,
            registry=owner,
        )
        self._bytes = Counter(
            "history_http_response_bytes",
            "Response body bytes sent, by route template and content coding.",
            ["route", "coding"],
            registry=owner,
        )
        self._pages = Counter(
            "history_pages",
            "Pages served: from the cache of immutable pages, or built from a store read.",
            ["source", "kind"],
            registry=owner,
        )
        self._from_cache = self._pages.labels("cache", "immutable")
        self._built = {kind: self._pages.labels("built", kind) for kind in ("immutable", "head")}
        self._build_time = Histogram(
            "history_page_build_seconds",
            "Seconds to build a page from the store's read: splice, validator and content coding.",
            ["kind"],
            buckets=_SECONDS,
            registry=owner,
        )
        self._build_times = {kind: self._build_time.labels(kind) for kind in ("immutable", "head")}
        self._streams = Gauge(
            "history_follow_streams_open",
            "Follow streams open now.",
            registry=owner,
            multiprocess_mode="livesum",
        )
        self._frames = Counter("history_follow_frames", "Follow frames written, by kind.", ["frame"], registry=owner)
        kinds = ("snapshot", "event", "records", "error", "end", "ping")
        self._frame_kinds = {kind: self._frames.labels(kind) for kind in kinds}
        self._catch_ups = Counter(
            "history_follow_catch_ups",
            "Times a follower turned to the store instead of the shared buffer: behind (events published "
            "after it opened had left the buffer) or resume (it replayed from before what the buffer holds).",
            ["reason"],
            registry=owner,
        )
        self._behind, self._resumed = self._catch_ups.labels("behind"), self._catch_ups.labels("resume")
        self._events = Counter(
            "history_appended_events", "Logical events appended (exact re-sends not counted).", registry=owner
        )
        self._batches = Counter(
            "history_append_batches",
            "Append batches accepted: stored, or idempotent re-sends.",
            ["result"],
            registry=owner,
        )
        self._stored, self._repeated = self._batches.labels("stored"), self._batches.labels("idempotent")
        self._conflicts = Counter(
            "history_seq_conflicts", "Appends refused because they did not continue the head.", registry=owner
        )
        self._closed = Counter("history_sessions_closed", "Sessions closed.", registry=owner)
        self._deleted = Counter(
            "history_sessions_deleted",
            "Sessions deleted, by reason: a request, or expiry; a tree counts each of its sessions.",
            ["reason"],
            registry=owner,
        )
        for reason in ("request", "expired"):
            self._deleted.labels(reason)
        self._store_errors = Counter(
            "history_store_errors", "Store failures, by kind (the store error's class).", ["kind"], registry=owner
        )
        # Bounded: route templates, normalized methods, statuses and the service's own codings.
        self._latency_children: dict[tuple[str, str, int], Histogram] = {}
        self._bytes_children: dict[tuple[str, str], Counter] = {}

    @contextmanager
    def running(self) -> Iterator[None]:
        """With several processes, keep the open-stream gauge to the living ones.

        A worker that died without cleaning up (and that the server restarted) left its
        gauge file behind; the next worker to start removes it, and each removes its own
        when it stops.
        """
        if self._dir is None:
            yield
            return
        for path in Path(self._dir).glob("gauge_live*_*.db"):
            pid = int(path.stem.rsplit("_", 1)[1])
            if not _alive(pid):
                mark_process_dead(pid, self._dir)  # type: ignore[no-untyped-call]
        try:
            yield
        finally:
            mark_process_dead(os.getpid(), self._dir)  # type: ignore[no-untyped-call]

    def responded(self, route: str, method: str, status: int, seconds: float) -> None:
        # labels() validates and locks on every call; the few children a process meets are kept.
        key = (route, method if method in _METHODS else "other", status)
        child = self._latency_children.get(key)
        if child is None:
            child = self._latency_children[key] = self._latency.labels(key[0], key[1], str(status))
        child.observe(seconds)

    def sent(self, route: str, coding: str, size: int) -> None:
        key = (route, coding)
        child = self._bytes_children.get(key)
        if child is None:
            child = self._bytes_children[key] = self._bytes.labels(route, coding)
        child.inc(size)

    def page_cached(self) -> None:
        self._from_cache.inc()

    def page_built(self, seconds: float, *, immutable: bool) -> None:
        kind = "immutable" if immutable else "head"
        self._built[kind].inc()
        self._build_times[kind].observe(seconds)

    def follow_opened(self) -> None:
        self._streams.inc()

    def follow_closed(self) -> None:
        self._streams.dec()

    def follow_frames(self, frame: str, count: int = 1) -> None:
        self._frame_kinds[frame].inc(count)

    def follow_caught_up(self, *, behind: bool) -> None:
        (self._behind if behind else self._resumed).inc()

    def appended(self, events: int, *, idempotent: bool = False) -> None:
        if idempotent:
            self._repeated.inc()
        else:
            self._stored.inc()
            self._events.inc(events)

    def seq_conflict(self) -> None:
        self._conflicts.inc()

    def session_closed(self) -> None:
        self._closed.inc()

    def sessions_deleted(self, count: int, reason: str) -> None:
        self._deleted.labels(reason).inc(count)

    def store_error(self, exc: BaseException) -> None:
        self._store_errors.labels(type(exc).__name__).inc()


def metrics_for(settings: Settings) -> Metrics:
    """The metrics an app built from ``settings`` records into."""
    if not settings.metrics:
        return Metrics()
    return PrometheusMetrics(multiprocess_dir=settings.metrics_dir)


def multiprocess_registry(directory: str) -> CollectorRegistry:
    """A registry that reads the samples every process wrote under ``directory``, summed."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return registry


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def route_label(scope: Scope) -> str:
    """The ``route`` label of a request: its route template, or ``unmatched``."""
    return route_template(scope) or UNMATCHED


async def scrape(request: Request) -> Response:
    """``GET /metrics``: the Prometheus text format, or OpenMetrics when the scraper asks for it.

    In token mode it needs the service token, but no ``X-Principal``: it shows no session.
    """
    check_service_token(request, request.state.service.settings)
    metrics: PrometheusMetrics = request.state.metrics
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    # Collecting reads every worker's files under several processes: off the event loop.
    body = await anyio.to_thread.run_sync(encoder, metrics.registry)
    return Response(body, headers={"Content-Type": content_type, "Cache-Control": "no-store"})

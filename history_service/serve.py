"""``history-service serve``: the launcher that runs the app under uvicorn.

It binds the API port first, so a taken port is the only line printed; then it creates the
store if needed, seeds the demo, prints the banner, and runs one server process, or with
``workers`` several sharing the bound socket, with the metrics on their own port if asked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec
from prometheus_client import start_wsgi_server

from history_service.command import PROG, CommandError
from history_service.demo import DEMO_SESSION, demo_sessions
from history_service.metrics import Metrics, PrometheusMetrics, metrics_for, multiprocess_registry
from history_service.settings import Settings
from persistence import StoreError, open_store
from persistence.url import describe_url, shareable_across_workers

__all__ = ["listen", "serve"]


async def _prepare(settings: Settings, demo: bool) -> int | None:
    """Create the store if needed (so a bad URL fails here, in one line), and seed the demo session."""
    store = await open_store(settings.store_url, create=True, timeout=settings.store_timeout)
    try:
        if not demo:
            return None
        try:
            return (await store.get_session(DEMO_SESSION)).head_seq + 1
        except StoreError:
            pass
        sessions = demo_sessions()
        for header, events in sessions:
            await store.create_session(header)
            await store.append(header.id, events)
        return len(sessions[0][1])
    finally:
        await store.close()


@contextlib.contextmanager
def _metrics_files(settings: Settings) -> Iterator[Settings]:
    """With several workers, the settings with a directory all of them write their metric samples to.

    An operator's ``PROMETHEUS_MULTIPROC_DIR`` is emptied of an earlier run's samples; else
    a new directory is made, and removed once the workers have stopped. The variable is set
    for the workers too: prometheus-client reads it when a worker imports it.
    """
    if not settings.metrics or (settings.workers == 1 and not settings.metrics_dir):
        yield settings
        return
    given = settings.metrics_dir
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        for stale in Path(given).glob("*.db"):
            stale.unlink()
    directory = given or tempfile.mkdtemp(prefix="history-metrics-")
    previous = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    try:
        yield msgspec.structs.replace(settings, metrics_dir=directory)
    finally:
        if previous is None:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        else:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = previous
        if not given:
            shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def _metrics_listener(settings: Settings, metrics: Metrics | None) -> Iterator[None]:
    """With ``metrics_port``, serve the metrics there from this process, without authentication.

    With several workers this process serves none of the API, and reads every worker's samples.
    """
    if settings.metrics_port is None:
        yield
        return
    if isinstance(metrics, PrometheusMetrics):
        registry = metrics.registry
    else:
        assert settings.metrics_dir is not None
        registry = multiprocess_registry(settings.metrics_dir)
    try:
        httpd, thread = start_wsgi_server(settings.metrics_port, addr=settings.host, registry=registry)
    except OSError as exc:
        raise CommandError(f"cannot serve metrics on {settings.host}:{settings.metrics_port}: {exc.strerror}") from exc
    try:
        yield
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def listen(settings: Settings) -> socket.socket:
    """The API port, bound before the store is prepared or anything printed, so a taken port is the only line."""
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET)
    # As uvicorn binds: a port whose last server just stopped (TIME_WAIT) is free again at once.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        sock.close()
        where = f"{settings.host}:{settings.port}"
        if exc.errno != errno.EADDRINUSE:
            raise CommandError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
        other = settings.port + 1 if settings.port < 65535 else settings.port - 1
        raise CommandError(
            f"port {settings.port} is in use on {settings.host} (another server is running?): choose another "
            f"with `make serve PORT={other}`, HISTORY_PORT={other} or --port {other}"
        ) from exc
    sock.set_inheritable(True)
    return sock


def _client_command() -> str:
    """The absolute path of this environment's history-client, so the banner's command runs from anywhere."""
    beside = Path(os.path.abspath(sys.executable)).parent / "history-client"
    return str(beside) if beside.exists() else shutil.which("history-client") or "history-client"


def serve(sock: socket.socket, settings: Settings, *, demo: bool, out: TextIO, err: TextIO) -> int:
    """Serve on ``sock`` (from `listen`) until stopped; returns the exit status."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from history_service.app import create_app
    from history_service.logs import configure_logging

    if settings.workers > 1 and not shareable_across_workers(settings.store_url):
        raise CommandError(
            f"--workers {settings.workers} needs a PostgreSQL store: with {settings.store_url.split(':')[0]}, "
            "followers in one worker would never hear of appends made through another; run one worker"
        )
    count = anyio.run(_prepare, settings, demo)
    # Once the store is known good, before the server starts: uvicorn's lines and ours go through one handler.
    configure_logging(settings, stream=err)
    if settings.auth == "token":
        print(f"{PROG}: auth token: {len(settings.tokens)} service token(s), and X-Principal on each request", file=err)
    else:
        print(f"{PROG}: auth none: every caller is the principal 'local' (for local use only)", file=err)
    if settings.cors_origins:
        print(f"{PROG}: CORS: pages on {', '.join(settings.cors_origins)} may call the service", file=err)
    if count is not None:
        base = f"http://{settings.host}:{settings.port}"
        session = f"{base}/v1/sessions/{DEMO_SESSION}"
        print(f"demo session {DEMO_SESSION!r} ({count} events) in {describe_url(settings.store_url)}", file=out)
        print(f"  page:   curl -s {session}/page", file=out)
        print(f"  follow: curl -N {session}/follow", file=out)
        print(f"  client: {_client_command()} follow {base} {DEMO_SESSION}", file=out)
        print(f"  viewer: {base}/viewer/?session={DEMO_SESSION}", file=out)
        out.flush()
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "lifespan": "on",
        "http": settings.http,
        "timeout_graceful_shutdown": 5,
        "timeout_keep_alive": settings.timeout_keep_alive,
        "limit_concurrency": settings.limit_concurrency,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        # Logging is ours (history_service.logs): no dictConfig of uvicorn's, and our access log replaces its own.
        "log_config": None,
        "access_log": False,
        "log_level": settings.log_level,
    }
    if settings.metrics:
        where = "GET /metrics" + (" with the service token" if settings.auth == "token" else "")
        if settings.metrics_port is not None:
            where = f"unauthenticated at http://{settings.host}:{settings.metrics_port}/metrics, not on the API port"
        print(f"{PROG}: metrics: {where}", file=err)
    else:
        print(f"{PROG}: metrics off", file=err)
    print(f"{PROG}: listening on http://{settings.host}:{settings.port} (Ctrl+C to stop)", file=err)
    if settings.workers > 1:
        with _metrics_files(settings) as settings, _metrics_listener(settings, None):
            # Each worker builds its own app from the settings resolved here, and serves the socket bound here.
            os.environ.update(settings.for_workers())
            app = "history_service.app:app_factory"
            try:
                Multiprocess(uvicorn.Config(app, factory=True, workers=settings.workers, **options), [sock]).run()
            except KeyboardInterrupt:
                pass
        return 0
    with _metrics_files(settings) as settings:
        metrics = metrics_for(settings)
        server = uvicorn.Server(uvicorn.Config(create_app(settings, metrics=metrics), **options))
        try:
            with _metrics_listener(settings, metrics):
                server.run(sockets=[sock])
        except KeyboardInterrupt:
            # Ctrl+C is how a user stops the server; uvicorn has already shut down cleanly.
            pass
    # uvicorn returns normally when the app fails to start (it has logged why).
    return 0 if server.started else 1

"""``history-service serve``: the launcher that runs the app under uvicorn.

It binds the API port first, so a taken port is the only line printed; then it creates the
store if needed, seeds the demo, prints the banner, and serves: in this process, or with
``workers`` in several that share the bound socket (``auto``: one per usable core,
`resolve_workers`), with the metrics on a port of their own if asked. It never writes to
``os.environ``: what the workers need reaches them explicitly.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal, TextIO

import anyio
import msgspec
from prometheus_client import start_wsgi_server

from history_service.cli import PROG
from history_service.cli.demo import DEMO_SESSION, demo_sessions
from history_service.cli.worker_sockets import WorkerSockets, spreading, spreads
from history_service.errors import CommandError
from history_service.metrics import Metrics, PrometheusMetrics, metrics_for, multiprocess_registry
from history_service.settings import ServerSettings, Settings
from persistence import StoreError, describe_url, open_store, shareable_across_workers

__all__ = ["listen", "resolve_workers", "serve", "supervise", "usable_cores"]

# Run by `serve --workers`: the supervisor of the worker processes (see `_run_workers`).
_SUPERVISOR: Final = "from history_service.cli.launcher import supervise; supervise()"
# cgroup v2: "<quota> <period>" in microseconds, or "max <period>" when the group's CPU time is not capped.
_CPU_MAX: Final = Path("/sys/fs/cgroup/cpu.max")
# uvicorn's supervisor kills a worker that has not answered its ping within this bound, a starting one
# included: its 5 s default killed workers still importing on a loaded host, over and over.
WORKER_HEALTHCHECK_S: Final = 30


def usable_cores(cpu_max: Path = _CPU_MAX) -> int:
    """The cores this process may run on: its affinity mask, capped by its cgroup's CPU quota; at least 1."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = cpu_max.read_text().split()[:2]
        cores = min(cores, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        pass  # no cgroup v2 file, "max", or nothing readable: the mask alone bounds it
    return max(1, cores)


def resolve_workers(workers: int | Literal["auto"], store_url: str) -> int:
    """How many server processes ``serve`` runs: ``workers``, with ``auto`` as one per usable core.

    ``auto`` on a store that only one process may serve is 1; an explicit number past 1 on it
    is refused with a `CommandError`.
    """
    shared = shareable_across_workers(store_url)
    if workers == "auto":
        return usable_cores() if shared else 1
    if workers > 1 and not shared:
        raise CommandError(
            f"--workers {workers} needs a store several processes can share (SQLite or JSONL on one host, "
            f"or PostgreSQL): {describe_url(store_url)} lives in one process; run one worker"
        )
    return workers


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
def _metrics_files(server: ServerSettings) -> Iterator[ServerSettings]:
    """With several workers, the settings with a directory all of them write their metric samples to.

    An operator's ``PROMETHEUS_MULTIPROC_DIR`` is emptied of an earlier run's samples; else
    a new directory is made, and removed once the workers have stopped.
    """
    app = server.app
    if not app.metrics or (server.workers == 1 and not app.metrics_dir):
        yield server
        return
    given = app.metrics_dir
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        for stale in Path(given).glob("*.db"):
            stale.unlink()
    directory = given or tempfile.mkdtemp(prefix="history-metrics-")
    try:
        yield msgspec.structs.replace(server, app=msgspec.structs.replace(app, metrics_dir=directory))
    finally:
        if not given:
            shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def _metrics_listener(server: ServerSettings, metrics: Metrics | None) -> Iterator[None]:
    """With ``metrics_port``, serve the metrics there from this process, without authentication.

    With several workers this process serves none of the API, and reads every worker's samples.
    """
    port = server.app.metrics_port
    if port is None:
        yield
        return
    if isinstance(metrics, PrometheusMetrics):
        registry = metrics.registry
    else:
        assert server.app.metrics_dir is not None
        registry = multiprocess_registry(server.app.metrics_dir)
    try:
        httpd, thread = start_wsgi_server(port, addr=server.host, registry=registry)
    except OSError as exc:
        raise CommandError(f"cannot serve metrics on {server.host}:{port}: {exc.strerror}") from exc
    try:
        yield
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def listen(server: ServerSettings) -> socket.socket:
    """The API port, bound before the store is prepared or anything printed, so a taken port is the only line."""
    family = socket.AF_INET6 if ":" in server.host else socket.AF_INET
    sock = socket.socket(family)
    # As uvicorn binds: a port whose last server just stopped (TIME_WAIT) is free again at once.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        if server.workers != 1 and spreads():
            # Workers get sockets of their own on this port (`worker_sockets`). A bind without
            # SO_REUSEPORT first, so a port another server holds, with it or not, is refused as in use.
            with socket.socket(family) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((server.host, server.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((server.host, server.port))
    except OSError as exc:
        sock.close()
        where = f"{server.host}:{server.port}"
        if exc.errno != errno.EADDRINUSE:
            raise CommandError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
        other = server.port + 1 if server.port < 65535 else server.port - 1
        raise CommandError(
            f"port {server.port} is in use on {server.host} (another server is running?): choose another "
            f"with `make serve PORT={other}`, HISTORY_PORT={other} or --port {other}"
        ) from exc
    sock.set_inheritable(True)
    return sock


def _client_command() -> str:
    """The absolute path of this environment's history-client, so the banner's command runs from anywhere."""
    beside = Path(os.path.abspath(sys.executable)).parent / "history-client"
    return str(beside) if beside.exists() else shutil.which("history-client") or "history-client"


def _uvicorn_options(server: ServerSettings) -> dict[str, Any]:
    return {
        "host": server.host,
        "port": server.port,
        "lifespan": "on",
        "http": server.http,
        "timeout_graceful_shutdown": 5,
        "timeout_keep_alive": server.timeout_keep_alive,
        "limit_concurrency": server.app.limit_concurrency,
        "h11_max_incomplete_event_size": server.max_header_bytes,
        # Logging is ours (history_service.logs): no dictConfig of uvicorn's, and our access log replaces its own.
        "log_config": None,
        "access_log": False,
        "log_level": server.app.log_level,
    }


def _workers_line(asked: int | Literal["auto"], workers: int, store_url: str) -> str:
    """How many server processes serve, and why that many."""
    if asked != "auto":
        return f"{workers} worker{'s' if workers > 1 else ''}"
    if not shareable_across_workers(store_url):
        return f"1 worker (auto: {describe_url(store_url)} lives in one process)"
    return f"{workers} worker{'s' if workers > 1 else ''} (auto: {workers} usable core{'s' if workers > 1 else ''})"


def _banner(server: ServerSettings, count: int | None, out: TextIO, err: TextIO, *, workers: str) -> None:
    settings = server.app
    if settings.auth == "token":
        print(f"{PROG}: auth token: {len(settings.tokens)} service token(s), and X-Principal on each request", file=err)
    else:
        print(f"{PROG}: auth none: every caller is the principal 'local' (for local use only)", file=err)
    if settings.cors_origins:
        print(f"{PROG}: CORS: pages on {', '.join(settings.cors_origins)} may call the service", file=err)
    if count is not None:
        base = f"http://{server.host}:{server.port}"
        session = f"{base}/v1/sessions/{DEMO_SESSION}"
        print(f"demo session {DEMO_SESSION!r} ({count} events) in {describe_url(settings.store_url)}", file=out)
        print(f"  page:   curl -s {session}/page", file=out)
        print(f"  follow: curl -N {session}/follow", file=out)
        print(f"  client: {_client_command()} follow {base} {DEMO_SESSION}", file=out)
        print(f"  viewer: {base}/viewer/?session={DEMO_SESSION}", file=out)
        out.flush()
    if settings.metrics:
        where = "GET /metrics" + (" with the service token" if settings.auth == "token" else "")
        if settings.metrics_port is not None:
            where = f"unauthenticated at http://{server.host}:{settings.metrics_port}/metrics, not on the API port"
        print(f"{PROG}: metrics: {where}", file=err)
    else:
        print(f"{PROG}: metrics off", file=err)
    print(f"{PROG}: {workers}", file=err)
    print(f"{PROG}: listening on http://{server.host}:{server.port} (Ctrl+C to stop)", file=err)


def serve(sock: socket.socket, server: ServerSettings, *, demo: bool, out: TextIO, err: TextIO) -> int:
    """Serve on ``sock`` (from `listen`) until stopped; returns the exit status."""
    import uvicorn

    from history_service.app import create_app
    from history_service.logs import configure_logging

    workers = resolve_workers(server.workers, server.app.store_url)
    line = _workers_line(server.workers, workers, server.app.store_url)
    server = msgspec.structs.replace(server, workers=workers)
    count = anyio.run(_prepare, server.app, demo)
    # Once the store is known good, before the server starts: uvicorn's lines and ours go through one handler.
    configure_logging(server.app, stream=err)
    _banner(server, count, out, err, workers=line)
    if workers > 1:
        with _metrics_files(server) as server, _metrics_listener(server, None):
            return _run_workers(sock, server)
    with _metrics_files(server) as server:
        metrics = metrics_for(server.app)
        app = create_app(server.app, metrics=metrics)
        instance = uvicorn.Server(uvicorn.Config(app, **_uvicorn_options(server)))
        try:
            with _metrics_listener(server, metrics):
                instance.run(sockets=[sock])
        except KeyboardInterrupt:
            # Ctrl+C is how a user stops the server; uvicorn has already shut down cleanly.
            pass
    # uvicorn returns normally when the app fails to start (it has logged why).
    return 0 if instance.started else 1


def _run_workers(sock: socket.socket, server: ServerSettings) -> int:
    """Run `supervise` in a process of its own, started with the environment the workers need, until it ends.

    prometheus-client takes its multiprocess directory from ``PROMETHEUS_MULTIPROC_DIR`` in
    each worker's environment alone, so the supervisor, whose workers inherit its
    environment, is started with it set; this process's environment stays as it was. The
    settings go down a pipe (they may hold tokens: never on a command line), the socket by
    its descriptor. Signals this process gets (Ctrl+C, SIGTERM, and uvicorn's SIGHUP,
    SIGTTIN and SIGTTOU) are passed on; the supervisor stops the workers and returns.
    """
    from uvicorn.supervisors.multiprocess import SIGNALS

    env = dict(os.environ)
    if server.app.metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = server.app.metrics_dir
    # Isolated like this interpreter, and never importing from the working directory instead of what is installed.
    flags = ["-I"] if sys.flags.isolated else ["-P"]
    read, write = os.pipe()
    started: list[subprocess.Popen[bytes]] = []

    def forward(number: int, frame: object) -> None:
        for child in started:
            child.send_signal(number)

    previous = {number: signal.signal(number, forward) for number in SIGNALS}
    try:
        try:
            argv = [sys.executable, *flags, "-c", _SUPERVISOR, str(sock.fileno()), str(read)]
            started.append(subprocess.Popen(argv, env=env, pass_fds=(sock.fileno(), read)))
        finally:
            os.close(read)
        with open(write, "wb") as pipe, contextlib.suppress(BrokenPipeError):
            # A supervisor that died before reading says why on stderr, and exits non-zero.
            pipe.write(msgspec.json.encode(server))
        return 0 if started[0].wait() == 0 else 1
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def supervise() -> None:
    """The workers' supervisor (`_run_workers` starts it): uvicorn's, running each worker's app from our settings.

    Each worker builds its app with `history_service.app.app_factory` from the settings
    resolved by ``serve`` (handed over as the factory's argument, pickled with uvicorn's
    config), and serves the socket bound by ``serve``.
    """
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from history_service.app import app_factory
    from history_service.logs import configure_logging

    sock_fd, settings_fd = (int(arg) for arg in sys.argv[1:3])
    with open(settings_fd, "rb") as pipe:
        server = msgspec.json.decode(pipe.read(), type=ServerSettings)
    configure_logging(server.app)
    factory = functools.partial(app_factory, server.app)
    workers = resolve_workers(server.workers, server.app.store_url)  # resolved by ``serve`` already: an int
    config = uvicorn.Config(
        factory,
        factory=True,
        workers=workers,
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
        **_uvicorn_options(server),
    )
    with socket.socket(fileno=sock_fd) as sock:
        supervisor: type[Multiprocess] = Multiprocess
        slots = None
        # `listen` set SO_REUSEPORT where the system has it: then each worker gets a socket of its own.
        if workers > 1 and spreads() and sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT):
            slots = WorkerSockets(sock, workers)
            supervisor = spreading(slots)
        try:
            supervisor(config, [sock]).run()
        except KeyboardInterrupt:
            pass
        finally:
            if slots is not None:
                slots.close_twins()

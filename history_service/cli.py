"""The ``history-service`` command line: serve, import, export, list and page.

Every command reads the same settings as ``serve`` (``HISTORY_*`` variables, then flags),
says on stderr which store it uses, and reports a failure as one line on stderr with a
non-zero exit. Only ``serve`` and ``import`` may create a store.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TextIO
from urllib.parse import urlsplit

import msgspec

from codec import CodecError, check_session_id, distribution_version, encode
from history_service.demo import DEMO_SESSION, demo_sessions
from history_service.settings import DEFAULT_STORE, Settings, read_token_file

try:
    import anyio
    from prometheus_client import start_wsgi_server

    from history_service.importer import ImportOptions, find_logs, import_logs
    from history_service.metrics import Metrics, PrometheusMetrics, metrics_for, multiprocess_registry
    from history_service.pages import PageQuery, PageReader
    from persistence import DEFAULT_OWNER, HistoryStore, StoreError, describe_url, open_store
except ModuleNotFoundError as missing:  # a client-only install: say what to install, not a traceback
    _MISSING: ModuleNotFoundError | None = missing
else:
    _MISSING = None

__all__ = ["main"]

EXPORT_WINDOW: Final = 10_000
PROG: Final = "history-service"
# Stores that tell every process of the others' appends (their HeadListener), so several workers may share one.
_SHARED_STORES: Final = frozenset({"postgresql", "postgres", "postgresql+psycopg"})

STORE_HELP: Final = (
    f"store URL (default: $HISTORY_STORE, else {DEFAULT_STORE}): sqlite:///relative.db or sqlite:////absolute.db, "
    "jsonl:///relative/dir or jsonl:////absolute/dir (add ?compression=zstd), postgresql+psycopg://user@host/db"
)


class CommandError(Exception):
    """A failure the command reports as one line."""


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 1-65535")
    return port


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def _seq(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Session-history transport service: store, page and follow agent session logs. Every command reads "
            "HISTORY_* variables (HISTORY_STORE, HISTORY_AUTH, ...); flags win."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {distribution_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    server = commands.add_parser(
        "serve",
        help="run the HTTP service",
        description=(
            "Serve session.page, session.follow and appends over HTTP with uvicorn, creating the store if it does "
            "not exist. Also read from the environment: HISTORY_HOST, HISTORY_PORT, HISTORY_AUTH, "
            "HISTORY_SERVICE_TOKENS, HISTORY_MAX_BODY_BYTES, HISTORY_MAX_BODY_VALUES, HISTORY_MAX_BATCH_EVENTS, "
            "HISTORY_TIMEOUT_KEEP_ALIVE, HISTORY_LIMIT_CONCURRENCY, HISTORY_MAX_HEADER_BYTES, HISTORY_HTTP and "
            "more (README.md lists them all)."
        ),
    )
    server.add_argument("--store", help=STORE_HELP)
    server.add_argument("--host", help="interface to bind (default: $HISTORY_HOST, else 127.0.0.1)")
    server.add_argument("--port", type=_port, help="port to bind, 1-65535 (default: $HISTORY_PORT, else 8000)")
    server.add_argument(
        "--auth",
        choices=["none", "token"],
        help="none: one local principal (default); token: a service bearer token plus X-Principal",
    )
    server.add_argument(
        "--token-file", type=Path, help="file of accepted service tokens, one per line (or HISTORY_SERVICE_TOKENS)"
    )
    server.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help=(
            "let pages on this origin (scheme://host[:port]) call the service; repeat for more "
            "(default: $HISTORY_CORS_ORIGINS, comma-separated, else none: no CORS)"
        ),
    )
    server.add_argument(
        "--workers",
        type=_count,
        help="server processes (default: $HISTORY_WORKERS, else 1); more than one needs a PostgreSQL store",
    )
    server.add_argument(
        "--metrics-port",
        type=_port,
        help=(
            "serve GET /metrics on this port of --host instead of the API port, without authentication "
            "(or HISTORY_METRICS_PORT)"
        ),
    )
    server.add_argument(
        "--no-metrics", action="store_true", help="record no metrics and serve no /metrics (or HISTORY_METRICS=0)"
    )
    server.add_argument(
        "--log-format",
        type=str.lower,
        choices=["text", "json"],
        help="text lines, or one JSON object per line (default: $HISTORY_LOG_FORMAT, else text)",
    )
    server.add_argument(
        "--log-level",
        type=str.lower,
        choices=["debug", "info", "warning", "error", "critical"],
        help="the least severe records logged (default: $HISTORY_LOG_LEVEL, else info)",
    )
    server.add_argument("--demo", action="store_true", help="seed a demo session (if missing) and print its URLs")

    importer = commands.add_parser(
        "import",
        help="import session logs (deepseek-harness format, or an export)",
        description=(
            "Import session logs into the store, creating the store if it does not exist. PATH is a log file, or a "
            "folder walked recursively: each folder's session.jsonl is imported, then its subagent children "
            "session.N.jsonl in N order, as `export --with-children` writes. Lines that omit seq/time get them "
            "rebuilt. Each log is imported whole or not at all; a failed log does not stop the others, and the "
            "summary at the end names every log skipped or failed and why (exit 1 if any failed)."
        ),
    )
    importer.add_argument("paths", nargs="+", metavar="PATH", type=Path, help="a log file or a folder of logs")
    importer.add_argument("--store", help=STORE_HELP)
    importer.add_argument(
        "--owner", default=DEFAULT_OWNER, help="principal that owns the imported sessions (default: %(default)s)"
    )
    importer.add_argument("--id", metavar="NEW", help="import the one log given under this session id")
    importer.add_argument(
        "--rename-templated",
        action="store_true",
        help=(
            "give a log whose id is a placeholder such as {{sessionId}}, not a session id, or shared by another log "
            "of this import an id named for its folder (FOLDER, or FOLDER.N for session.N.jsonl), the same on "
            "every run; its children's parentSession follows"
        ),
    )
    importer.add_argument(
        "--skip-existing", action="store_true", help="skip a log whose session id is already in the store"
    )

    exporter = commands.add_parser(
        "export",
        help="write a session as a log that `import` reads back",
        description=(
            "Write a session as a complete log: its header line, then its records (events and packed chunk rows) "
            "in seq order. With --with-children, write a directory (-o DIR) holding session.jsonl and every "
            "subagent descendant as session.N.jsonl, parents before children, so `import DIR` restores them all."
        ),
    )
    exporter.add_argument("session_id", metavar="SESSION_ID")
    exporter.add_argument("--store", help=STORE_HELP)
    exporter.add_argument("--output", "-o", type=Path, help="write to this file (or directory) instead of stdout")
    exporter.add_argument("--with-children", action="store_true", help="also export the subagent descendants")

    lister = commands.add_parser(
        "list",
        help="list a principal's sessions, newest first",
        description="Print one JSON line per session of --owner that is not a subagent child, newest first.",
    )
    lister.add_argument("--store", help=STORE_HELP)
    lister.add_argument("--owner", default=DEFAULT_OWNER, help="whose sessions (default: %(default)s)")
    lister.add_argument("--limit", type=_seq, metavar="N", help="print at most N sessions (default: all)")

    pager = commands.add_parser(
        "page",
        help="print one page as the service would serve it",
        description="Print one session.page body (packed records, JSON) read straight from the store.",
    )
    pager.add_argument("session_id", metavar="SESSION_ID")
    pager.add_argument("--store", help=STORE_HELP)
    pager.add_argument("--through", type=_seq, metavar="N", help="inclusive upper seq (default: the head)")
    pager.add_argument("--before", type=_seq, metavar="N", help="exclusive upper seq, for paging backwards")
    pager.add_argument("--max-messages", type=int, default=50, metavar="N", help="messages (default: %(default)s)")
    pager.add_argument("--max-bytes", type=_seq, metavar="N", help="byte target for the body")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    try:
        if args.command != "serve":
            settings = Settings.from_env(store_url=args.store)
        else:
            tokens, auth = None, args.auth
            if args.token_file is not None:
                if auth == "none":
                    raise CommandError("--token-file needs --auth token; with --auth none no token is checked")
                try:
                    tokens = read_token_file(args.token_file)
                except OSError as exc:
                    raise CommandError(f"cannot read the token file {args.token_file}: {exc.strerror}") from exc
                # A token file means tokens are to be checked: never serve open by mistake.
                auth = "token"
            settings = Settings.from_env(
                store_url=args.store,
                host=args.host,
                port=args.port,
                auth=auth,
                tokens=tokens,
                cors_origins=None if args.cors_origin is None else tuple(args.cors_origin),
                workers=args.workers,
                metrics=False if args.no_metrics else None,
                metrics_port=args.metrics_port,
                log_format=args.log_format,
                log_level=args.log_level,
            )
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    if urlsplit(settings.store_url).scheme == "memory" and args.command != "serve":
        raise CommandError(f"memory:// keeps nothing between commands; `{args.command}` needs a store on disk")
    return settings


# Import.


def _logs(args: argparse.Namespace) -> list[Path]:
    try:
        logs = find_logs(args.paths)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    if args.id is not None:
        try:
            check_session_id(args.id, where="--id")
        except CodecError as exc:
            raise CommandError(str(exc)) from exc
        if len(logs) != 1:
            raise CommandError(f"--id names one log, and {len(logs)} were given: {', '.join(map(str, logs[:3]))}...")
    return logs


async def _import(
    store: HistoryStore, logs: Sequence[Path], args: argparse.Namespace, out: TextIO, err: TextIO
) -> None:
    options = ImportOptions(
        owner=args.owner, new_id=args.id, rename=args.rename_templated, skip_existing=args.skip_existing
    )
    outcomes = await import_logs(store, logs, options, out, err)
    failed = sum(outcome.status == "failed" for outcome in outcomes)
    if failed:
        raise CommandError(f"{failed} of {len(outcomes)} log{'' if len(outcomes) == 1 else 's'} not imported")


# Export.


async def _write_log(store: HistoryStore, session_id: str, out: TextIO) -> int:
    """Write the header line and every stored record; returns the number of logical events."""
    info = await store.get_session(session_id)
    out.write(encode(info.header).decode() + "\n")
    next_seq = 0
    while next_seq <= info.head_seq:
        records = await store.read_stored(session_id, next_seq, min(info.head_seq + 1, next_seq + EXPORT_WINDOW))
        lines = []
        for record in records:
            if record.seq >= next_seq:
                lines.append(record.line.decode())
                next_seq = record.seq + record.members
        if not lines:
            raise CommandError(f"the store returned no record at seq {next_seq} of session {session_id!r}")
        out.write("\n".join(lines) + "\n")
    return info.head_seq + 1


async def _descendants(store: HistoryStore, session_id: str) -> list[str]:
    """Every subagent descendant, breadth first, so each parent comes before its children."""
    found: list[str] = []
    frontier = [session_id]
    while frontier:
        children = [header.id for parent in frontier for header in await store.children(parent)]
        found.extend(children)
        frontier = children
    return found


async def _export(store: HistoryStore, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    if args.with_children:
        if args.output is None:
            raise CommandError("--with-children writes a directory: give it with -o DIR")
        if args.output.exists() and (not args.output.is_dir() or any(args.output.iterdir())):
            raise CommandError(f"{args.output} exists and is not an empty directory; give a new one")
        await store.get_session(args.session_id)
        args.output.mkdir(parents=True, exist_ok=True)
        sessions = [args.session_id, *await _descendants(store, args.session_id)]
        for number, session_id in enumerate(sessions):
            name = "session.jsonl" if number == 0 else f"session.{number}.jsonl"
            with open(args.output / name, "w", encoding="utf-8") as target:
                count = await _write_log(store, session_id, target)
            print(f"exported {session_id} ({count} events) to {args.output / name}", file=err)
    elif args.output is not None:
        if args.output.is_dir():
            raise CommandError(f"{args.output} is a directory; give a file, or --with-children to write a directory")
        with open(args.output, "w", encoding="utf-8") as target:
            await _write_log(store, args.session_id, target)
    else:
        await _write_log(store, args.session_id, out)


# List.


async def _list(store: HistoryStore, args: argparse.Namespace, out: TextIO) -> None:
    before = None
    left = args.limit
    while left is None or left > 0:
        batch = await store.list_sessions(args.owner, limit=min(500, left or 500), before=before)
        for summary in batch:
            row = {"id": summary.id, "createdAt": summary.created_at, "headSeq": summary.head_seq}
            out.write(encode({**row, "childCount": summary.child_count}).decode() + "\n")
        if len(batch) < min(500, left or 500):
            return
        before = batch[-1].key
        left = None if left is None else left - len(batch)


# Page.


async def _page(store: HistoryStore, args: argparse.Namespace, settings: Settings, out: TextIO) -> None:
    if not 1 <= args.max_messages <= 1000:
        raise CommandError("--max-messages must be from 1 to 1000")
    head = (await store.get_session(args.session_id)).head_seq
    if args.through is not None and args.through > head:
        raise CommandError(f"--through {args.through} is beyond the head {head}")
    query = PageQuery(
        through=args.through,
        before=args.before,
        max_messages=args.max_messages,
        max_bytes=args.max_bytes or settings.default_max_bytes,
    )
    body, _, _ = await PageReader(store).body(args.session_id, head, query)
    out.write(body.decode() + "\n")


async def _run(args: argparse.Namespace, settings: Settings, out: TextIO, err: TextIO) -> None:
    # The inputs are found before the store is opened, so a typo creates no empty store.
    logs = _logs(args) if args.command == "import" else []
    store = await open_store(settings.store_url, create=args.command == "import", timeout=settings.store_timeout)
    try:
        if args.command == "import":
            await _import(store, logs, args, out, err)
        elif args.command == "export":
            await _export(store, args, out, err)
        elif args.command == "list":
            await _list(store, args, out)
        else:
            await _page(store, args, settings, out)
    finally:
        await store.close()


# Serve.


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


def _listen(settings: Settings) -> socket.socket:
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


def _serve(sock: socket.socket, args: argparse.Namespace, settings: Settings, out: TextIO, err: TextIO) -> int:
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from history_service.app import create_app
    from history_service.logs import configure_logging

    if settings.workers > 1 and urlsplit(settings.store_url).scheme.lower() not in _SHARED_STORES:
        raise CommandError(
            f"--workers {settings.workers} needs a PostgreSQL store: with {settings.store_url.split(':')[0]}, "
            "followers in one worker would never hear of appends made through another; run one worker"
        )
    count = anyio.run(_prepare, settings, args.demo)
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


def _discard(out: TextIO) -> None:
    """Point ``out``'s descriptor at /dev/null, so the interpreter's flush of what is left at exit cannot fail again."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # not a file (a test's StringIO): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    args = _parser().parse_args(argv)
    if _MISSING is not None:
        print(
            f"{PROG}: error: the service and its stores need the server extra "
            f"(pip install 'history-transport[server]'): {_MISSING}",
            file=err,
        )
        return 1
    try:
        settings = _settings(args)
        if args.command == "serve":
            with _listen(settings) as sock:
                print(f"{PROG}: store {describe_url(settings.store_url)}", file=err)
                return _serve(sock, args, settings, out, err)
        print(f"{PROG}: store {describe_url(settings.store_url)}", file=err)
        anyio.run(_run, args, settings, out, err)
        out.flush()
    except BrokenPipeError:
        # The reader went away (`export ... | head`): it has what it wanted.
        _discard(out)
        return 0
    except (CommandError, StoreError, OSError) as exc:
        # One line, whatever the driver's message looks like.
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        print(f"{PROG}: error: {'; '.join(lines)}", file=err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

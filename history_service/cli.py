"""The ``history-service`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import anyio

from codec import CodecError, SessionHeader, encode, read_session_log
from history_service.scenarios import TIME_ZERO, multi_turn
from persistence import DEFAULT_OWNER, HistoryStore, StoreError, open_store

__all__ = ["main"]

DEFAULT_STORE: Final = "sqlite:///history.db"
IMPORT_BATCH: Final = 512
EXPORT_WINDOW: Final = 10_000
DEMO_SESSION: Final = "demo"

STORE_HELP: Final = (
    "store URL: sqlite:///path.db (default: %(default)s), postgresql+psycopg://user@host/db, "
    "jsonl:///dir or jsonl:///dir?compression=zstd"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="history-service",
        description="Session-history transport service: store, page and follow agent session logs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    importer = commands.add_parser(
        "import",
        help="import deepseek-harness session logs",
        description=(
            "Import deepseek-harness session logs. PATH is a session.jsonl file, or a directory holding "
            "session.jsonl and its subagent children session.N.jsonl (the parent is imported first). "
            "Lines that omit seq/time get them rebuilt."
        ),
    )
    importer.add_argument("paths", nargs="+", metavar="PATH", type=Path, help="a log file or a directory of logs")
    importer.add_argument("--store", default=DEFAULT_STORE, help=STORE_HELP)
    importer.add_argument(
        "--owner", default=DEFAULT_OWNER, help="principal that owns the imported sessions (default: %(default)s)"
    )

    server = commands.add_parser(
        "serve",
        help="run the HTTP service",
        description=(
            "Serve session.page, session.follow and appends over HTTP with uvicorn. Settings also come from "
            "HISTORY_* variables (HISTORY_STORE, HISTORY_AUTH, HISTORY_SERVICE_TOKENS, ...); flags win."
        ),
    )
    server.add_argument("--store", default=None, help=STORE_HELP.replace("%(default)s", DEFAULT_STORE))
    server.add_argument("--host", default="127.0.0.1", help="interface to bind (default: %(default)s)")
    server.add_argument("--port", type=int, default=8000, help="port to bind (default: %(default)s)")
    server.add_argument(
        "--auth",
        choices=["none", "token"],
        default=None,
        help="none: one local principal (default); token: a service bearer token plus X-Principal",
    )
    server.add_argument(
        "--token-file", type=Path, help="file of accepted service tokens, one per line (or HISTORY_SERVICE_TOKENS)"
    )
    server.add_argument("--demo", action="store_true", help="seed a demo session (if missing) and print its URLs")

    exporter = commands.add_parser(
        "export",
        help="write a session's exact logical events as JSON lines",
        description="Write every logical event of a session, seq 0 first, one JSON object per line.",
    )
    exporter.add_argument("session_id", metavar="SESSION_ID")
    exporter.add_argument("--store", default=DEFAULT_STORE, help=STORE_HELP)
    exporter.add_argument("--output", "-o", type=Path, help="write to this file instead of standard output")
    return parser


def _logs(paths: Sequence[Path]) -> list[Path]:
    logs: list[Path] = []
    for path in paths:
        if path.is_dir():
            parent = path / "session.jsonl"
            children = sorted(path.glob("session.*.jsonl"), key=lambda p: int(p.name.split(".")[1]))
            if not parent.exists() and not children:
                raise StoreError(f"{path} holds no session.jsonl")
            logs.extend(([parent] if parent.exists() else []) + children)
        elif path.exists():
            logs.append(path)
        else:
            raise StoreError(f"{path}: no such file or directory")
    return logs


async def _import(store: HistoryStore, paths: Sequence[Path], owner: str, out: TextIO) -> None:
    for path in _logs(paths):
        try:
            log = read_session_log(path.read_bytes())
        except CodecError as exc:
            raise StoreError(f"{path}: {exc}") from exc
        await store.create_session(log.header, owner=owner)
        for start in range(0, len(log.events), IMPORT_BATCH):
            await store.append(log.header.id, log.events[start : start + IMPORT_BATCH])
        print(f"imported {log.header.id} ({len(log.events)} events) from {path}", file=out)


async def _export(store: HistoryStore, session_id: str, out: TextIO) -> None:
    head = await store.head_seq(session_id)
    for start in range(0, head + 1, EXPORT_WINDOW):
        events = await store.read_events(session_id, start, min(head + 1, start + EXPORT_WINDOW))
        out.write("".join(encode(event).decode() + "\n" for event in events))


async def _run(args: argparse.Namespace, out: TextIO) -> None:
    store = await open_store(args.store)
    try:
        if args.command == "import":
            await _import(store, args.paths, args.owner, out)
        elif args.output is not None:
            with open(args.output, "w", encoding="utf-8") as target:
                await _export(store, args.session_id, target)
        else:
            await _export(store, args.session_id, out)
    finally:
        await store.close()


async def _seed_demo(url: str, out: TextIO) -> int:
    store = await open_store(url)
    try:
        try:
            return (await store.get_session(DEMO_SESSION)).head_seq + 1
        except StoreError:
            pass
        events = multi_turn(seed=1, turns=8)
        await store.create_session(SessionHeader(id=DEMO_SESSION, createdAt=TIME_ZERO))
        await store.append(DEMO_SESSION, events)
        return len(events)
    finally:
        await store.close()


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    import uvicorn

    from history_service.app import create_app
    from history_service.settings import Settings, read_token_file

    tokens = read_token_file(args.token_file) if args.token_file else None
    try:
        settings = Settings.from_env(store_url=args.store, auth=args.auth, tokens=tokens)
    except ValueError as exc:
        print(f"history-service: error: {exc}", file=sys.stderr)
        return 2
    if args.demo:
        count = anyio.run(_seed_demo, settings.store_url, out)
        base = f"http://{args.host}:{args.port}/v1/sessions/{DEMO_SESSION}"
        print(f"demo session {DEMO_SESSION!r} ({count} events) in {settings.store_url}", file=out)
        print(f"  page:   curl -s {base}/page", file=out)
        print(f"  follow: curl -N {base}/follow", file=out)
        print(f"  client: .venv/bin/history-client follow http://{args.host}:{args.port} {DEMO_SESSION}", file=out)
        out.flush()
    app = create_app(settings)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # End follow streams first, so the graceful shutdown does not wait on them.
            service = getattr(app.state, "service", None)
            if service is not None:
                service.hub.close()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=args.host, port=args.port, timeout_graceful_shutdown=5, lifespan="on")
    try:
        Server(config).run()
    except KeyboardInterrupt:
        # Ctrl+C is how a user stops the server; uvicorn has already shut down cleanly.
        pass
    return 0


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "serve":
        try:
            return _serve(args, out or sys.stdout)
        except (StoreError, OSError) as exc:
            print(f"history-service: error: {exc}", file=sys.stderr)
            return 1
    try:
        anyio.run(_run, args, out or sys.stdout)
    except (StoreError, OSError) as exc:
        print(f"history-service: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

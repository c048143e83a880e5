"""The ``history-service`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final, TextIO

import anyio

from codec import CodecError, encode, read_session_log
from persistence import DEFAULT_OWNER, HistoryStore, StoreError, open_store

__all__ = ["main"]

DEFAULT_STORE: Final = "sqlite:///history.db"
IMPORT_BATCH: Final = 512
EXPORT_WINDOW: Final = 10_000

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


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        anyio.run(_run, args, out or sys.stdout)
    except (StoreError, OSError) as exc:
        print(f"history-service: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

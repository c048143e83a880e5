"""The store commands of ``history-service``: import, export, list, close, delete, purge, vacuum, reindex and page.

Each opens the store of the settings, does its one thing and closes it; only ``import``
may create the store. The import itself is `history_service.cli.importer`'s.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Final, TextIO

from codec import CodecError, check_session_id, encode, written
from history_service.bodies import Closed, ListedSession
from history_service.cli.importer import import_logs
from history_service.cli.log_files import LogFiles, find_logs
from history_service.cli.naming import ImportOptions
from history_service.durable.expiry import StreamExpiry
from history_service.errors import CommandError, ThroughBeyondHead
from history_service.pages import PageQuery, PageReader
from history_service.params import MAX_MESSAGES
from history_service.service import HistoryService
from history_service.settings import Settings
from persistence import HistoryStore, SearchUnsupportedError, open_store

__all__ = ["EXPORT_WINDOW", "run"]

EXPORT_WINDOW: Final = 10_000


# Import.


def _logs(args: argparse.Namespace) -> LogFiles:
    try:
        files = find_logs(args.paths)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    if args.id is not None:
        try:
            check_session_id(args.id, where="--id")
        except CodecError as exc:
            raise CommandError(str(exc)) from exc
        logs = files.logs
        if len(logs) != 1:
            raise CommandError(f"--id names one log, and {len(logs)} were given: {', '.join(map(str, logs[:3]))}...")
    return files


async def _import(store: HistoryStore, files: LogFiles, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
    options = ImportOptions(
        owner=args.owner, new_id=args.id, rename_shared=args.rename_templated, skip_existing=args.skip_existing
    )
    outcomes = await import_logs(store, files, options, out, err)
    failed = sum(outcome.status == "failed" for outcome in outcomes)
    if failed:
        logs = len(files.logs)
        raise CommandError(f"{failed} of {logs} log{'' if logs == 1 else 's'} not imported")


# Export.


async def _write_log(store: HistoryStore, session_id: str, out: TextIO) -> int:
    """Write the header line and every stored record; returns the number of logical events."""
    info = await store.get_session(session_id)
    out.write(encode(written(info.header)).decode() + "\n")
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
            out.write(encode(ListedSession.of(summary)).decode() + "\n")
        if len(batch) < min(500, left or 500):
            return
        before = batch[-1].key
        left = None if left is None else left - len(batch)


# Close.


async def _close(store: HistoryStore, args: argparse.Namespace, out: TextIO) -> None:
    info = await store.close_session(args.session_id, closed_at=time.time_ns() // 1_000_000)
    out.write(encode(Closed.of(info)).decode() + "\n")


# Delete, purge and vacuum.


async def _delete(store: HistoryStore, args: argparse.Namespace, err: TextIO, out: TextIO) -> None:
    # The life asked about is the one deleted: one created again meanwhile is not (404).
    asked = await store.get_session(args.session_id)
    if not args.yes:
        err.write(f"delete session {args.session_id!r} and every subagent session below it? [y/N] ")
        err.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise CommandError("not deleted: the answer was not yes (pass --yes to delete without asking)")
    deleted = await store.delete_session(args.session_id, life=asked.life)
    out.write(encode({"deleted": deleted}).decode() + "\n")


async def _purge(store: HistoryStore, args: argparse.Namespace, settings: Settings, out: TextIO) -> None:
    # The service's own sweep, so a session kept by a live one below it stays here too (§6.5).
    service = HistoryService(settings, store)
    retention = args.older_than if args.older_than is not None else settings.retention_ms
    if args.dry_run:
        out.write(encode({"expired": await service.expired_now(retention)}).decode() + "\n")
        return
    swept = await service.sweep(retention)
    if swept is None:
        raise CommandError("another process is sweeping this store now: nothing was deleted; try again later")
    if store.streams is not None:
        # The server's sweep expires Durable Streams too (docs/protocol.md §13.5), in the same turn.
        changed = service.notices.stream_changed
        await StreamExpiry(store.streams, batch=settings.sweep_batch, turn=service.sweeping, changed=changed).expire()
    out.write(encode({"deleted": swept.deleted}).decode() + "\n")
    if swept.failed:
        raise CommandError(
            f"could not delete {len(swept.failed)} expired sessions: {', '.join(map(repr, swept.failed))}"
        )


async def _vacuum(store: HistoryStore, out: TextIO) -> None:
    before = await store.size()
    await store.vacuum()
    out.write(encode({"before": before, "after": await store.size()}).decode() + "\n")


# Reindex.


async def _reindex(store: HistoryStore, out: TextIO) -> None:
    try:
        passages = await store.reindex()
    except SearchUnsupportedError as exc:
        raise CommandError(f"{exc}: search needs a SQLite or PostgreSQL store (docs/protocol.md §14.3)") from None
    out.write(encode({"passages": passages}).decode() + "\n")


# Page.


async def _page(store: HistoryStore, args: argparse.Namespace, settings: Settings, out: TextIO) -> None:
    if not 1 <= args.max_messages <= MAX_MESSAGES:
        raise CommandError(f"--max-messages must be from 1 to {MAX_MESSAGES}")
    query = PageQuery(
        through=args.through,
        before=args.before,
        max_messages=args.max_messages,
        max_bytes=args.max_bytes or settings.default_max_bytes,
    )
    try:
        page = await PageReader(store).page(args.session_id, query)
    except ThroughBeyondHead as exc:
        raise CommandError(f"--through {exc.through} is beyond the head {exc.head}") from None
    out.write(page.body.join().decode() + "\n")


async def run(args: argparse.Namespace, settings: Settings, out: TextIO, err: TextIO) -> None:
    """Run the store command ``args.command`` (import, export, list, close, delete, purge, vacuum, reindex or page)."""
    # The inputs are found before the store is opened, so a typo creates no empty store.
    files = _logs(args) if args.command == "import" else LogFiles([], [])
    store = await open_store(settings.store_url, create=args.command == "import", timeout=settings.store_timeout)
    try:
        if args.command == "import":
            await _import(store, files, args, out, err)
        elif args.command == "export":
            await _export(store, args, out, err)
        elif args.command == "list":
            await _list(store, args, out)
        elif args.command == "close":
            await _close(store, args, out)
        elif args.command == "delete":
            await _delete(store, args, err, out)
        elif args.command == "purge":
            await _purge(store, args, settings, out)
        elif args.command == "vacuum":
            await _vacuum(store, out)
        elif args.command == "reindex":
            await _reindex(store, out)
        else:
            await _page(store, args, settings, out)
    finally:
        await store.close()

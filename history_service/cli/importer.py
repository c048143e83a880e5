"""Importing session logs: finding them, naming them, and storing each one whole or not at all.

A log is read and checked in full before anything of it is written; then its session is
created and its events are written as one append, which every store commits whole. The
stores have no delete, so the one step that can leave a remnant is an append that fails
after its create: the session then exists with no events, and a later import of the same
log sees exactly that (same header, same owner, no events) and completes it.

Naming (`plan_ids`): a log keeps its header's id unless ``--id`` gives one, or
``--rename-templated`` finds the id unusable: a template placeholder (``{{sessionId}}``),
not a session id, or the id of another log of the same import. Such a log is named for
its folder (``session.N.jsonl`` adds ``.N``), which the same tree gives on every run; a
child whose ``parentSession`` names a log of its own folder follows that log's new id.
An id taken in the store is not renamed: it is the same log imported before, or a
real clash, and ``--skip-existing`` or a failure says which the user meant.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal, TextIO

import msgspec

from codec import (
    MAX_SESSION_ID,
    CodecError,
    SessionHeader,
    SessionIdError,
    check_session_id,
    incarnation_of,
    read_header,
    read_session_log,
)
from history_service.cli import PROG
from persistence import HistoryStore, SessionExistsError, SessionNotFoundError, StoreError, subagent_parent

__all__ = ["ImportOptions", "Outcome", "derived_id", "find_logs", "import_logs", "is_templated", "plan_ids"]

_CHILD: Final = re.compile(r"session\.(\d+)\.jsonl")
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._:@~-]")


class ImportOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The owner, and the ``--id``, ``--rename-templated`` and ``--skip-existing`` flags."""

    owner: str
    new_id: str | None = None
    rename: bool = False
    skip_existing: bool = False


class Outcome(msgspec.Struct, frozen=True):
    """What became of one log: its session id (if known), and why it was skipped or failed."""

    path: Path
    status: Literal["imported", "skipped", "failed"]
    session_id: str | None = None
    reason: str = ""


def find_logs(paths: Sequence[Path]) -> list[Path]:
    """Every log under ``paths``, each folder's ``session.jsonl`` before its ``session.N.jsonl`` in N order.

    A folder is walked recursively, so a folder of session folders (or deeper) is one
    import. Raises `ValueError` for a missing path or a folder with no log under it.
    """
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            logs = [log for folder in _folders(path) for log in _session_logs(folder)]
            if not logs:
                raise ValueError(f"{path} holds no session.jsonl or session.N.jsonl, in it or in any folder under it")
            found.extend(logs)
        elif path.exists():
            found.append(path)
        else:
            raise ValueError(f"{path}: no such file or directory")
    unique: dict[Path, Path] = {}
    for log in found:
        unique.setdefault(log.resolve(), log)
    return list(unique.values())


def _folders(root: Path) -> list[Path]:
    folders = []
    for folder, subfolders, _ in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        folders.append(Path(folder))
    return folders


def _session_logs(folder: Path) -> list[Path]:
    children = sorted(
        ((int(match[1]), p) for p in folder.glob("session.*.jsonl") if (match := _CHILD.fullmatch(p.name))),
        key=lambda item: item[0],
    )
    parent = folder / "session.jsonl"
    return ([parent] if parent.is_file() else []) + [p for _, p in children if p.is_file()]


def is_templated(session_id: str) -> bool:
    """Whether an id is a recorded template placeholder such as ``{{sessionId}}``."""
    return "{{" in session_id or "}}" in session_id


def derived_id(path: Path) -> str:
    """The id ``--rename-templated`` gives a log: its folder's name, with ``.N`` for ``session.N.jsonl``.

    Characters an id may not hold become ``_``; a name too long keeps its start and a hash
    of the whole, so the id stays the same on every run.
    """
    folder = path.resolve().parent.name or "session"
    name = path.name.removesuffix(".jsonl")
    if name == "session":
        raw = folder
    elif (match := _CHILD.fullmatch(path.name)) is not None:
        raw = f"{folder}.{match[1]}"
    else:
        raw = f"{folder}.{name}"
    safe = _UNSAFE.sub("_", raw).strip(".") or "session"
    if len(safe) > MAX_SESSION_ID:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
        safe = f"{safe[: MAX_SESSION_ID - 13]}-{digest}"
    return safe


def _usable(session_id: str) -> bool:
    try:
        check_session_id(session_id)
    except SessionIdError:
        return False
    return not is_templated(session_id)


def plan_ids(headers: dict[Path, SessionHeader], options: ImportOptions) -> dict[Path, SessionHeader]:
    """Each readable log's header as it will be stored: its id, and a child's ``parentSession``, renamed."""
    if options.new_id is not None:
        return {path: msgspec.structs.replace(h, id=options.new_id) for path, h in headers.items()}
    if not options.rename:
        return dict(headers)
    shared = Counter(header.id for header in headers.values())
    new_ids = {path: derived_id(path) if shared[h.id] > 1 or not _usable(h.id) else h.id for path, h in headers.items()}
    by_folder: dict[tuple[Path, str], str] = {}
    for path, header in headers.items():
        by_folder.setdefault((path.resolve().parent, header.id), new_ids[path])
    planned = {}
    for path, header in headers.items():
        parent = header.parentSession
        if isinstance(parent, str):
            parent = by_folder.get((path.resolve().parent, parent), parent)
        planned[path] = msgspec.structs.replace(header, id=new_ids[path], parentSession=parent)
    return planned


async def import_logs(
    store: HistoryStore, logs: Sequence[Path], options: ImportOptions, out: TextIO, err: TextIO
) -> list[Outcome]:
    """Import each log whole or not at all, report each on ``out`` (failures on ``err``), then a summary."""
    headers: dict[Path, SessionHeader] = {}
    unread: dict[Path, str] = {}
    for path in logs:
        try:
            with open(path, "rb") as log:
                headers[path] = read_header(log.readline().rstrip(b"\n"))
        except (CodecError, OSError) as exc:
            unread[path] = _reason(path, exc)
    planned = plan_ids(headers, options)
    outcomes: list[Outcome] = []
    failed_ids: set[str] = set()
    for path in logs:
        if path in unread:
            outcome = Outcome(path, "failed", reason=unread[path])
        else:
            outcome = await _import_one(store, path, headers[path], planned[path], options, failed_ids, err)
        if outcome.status == "failed":
            if path in planned:
                failed_ids.add(planned[path].id)
            print(f"{PROG}: error: {path}: {outcome.reason}", file=err)
        elif outcome.status == "skipped":
            print(f"skipped {outcome.session_id} from {path}: {outcome.reason}", file=out)
        else:
            print(f"imported {outcome.session_id} {outcome.reason} from {path}", file=out)
        outcomes.append(outcome)
    _summary(outcomes, out)
    return outcomes


async def _import_one(
    store: HistoryStore,
    path: Path,
    recorded: SessionHeader,
    header: SessionHeader,
    options: ImportOptions,
    failed_ids: set[str],
    err: TextIO,
) -> Outcome:
    def failed(reason: str) -> Outcome:
        return Outcome(path, "failed", header.id, reason)

    # A log that names no incarnation keeps the derived one (§2.5), so an export gives back this log.
    header = msgspec.structs.replace(header, incarnation=incarnation_of(header))

    try:
        log = read_session_log(path.read_bytes())
        check_session_id(header.id, where="the header's id" if header.id == recorded.id else "the new id")
        if isinstance(header.parentSession, str):
            check_session_id(header.parentSession, where="the header's parentSession")
    except (CodecError, OSError) as exc:
        return failed(_reason(path, exc))
    parent = subagent_parent(header)
    if parent is not None and parent in failed_ids:
        return failed(f"its parent {parent!r} was not imported (see above), so neither is this subagent child")
    try:
        existing = await store.get_session(header.id)
    except SessionNotFoundError:
        existing = None
    if existing is not None:
        if options.skip_existing:
            return Outcome(path, "skipped", header.id, f"session {header.id!r} already exists")
        remnant = existing.head_seq == -1 and existing.header == header and existing.owner == options.owner
        if not (remnant and log.events):
            return failed(f"session {header.id!r} already exists{_exists_hint(recorded, header, options)}")
    if parent is not None:
        await _warn_orphan(store, path, header, parent, options.owner, err)
    try:
        if existing is None:
            existing = await store.create_session(header, owner=options.owner)
    except SessionExistsError:
        return failed(f"session {header.id!r} already exists{_exists_hint(recorded, header, options)}")
    except StoreError as exc:
        return failed(f"the store refused session {header.id!r}: {exc}")
    try:
        if log.events:
            # Into the life just made (or the empty remnant found): never one created since by another.
            await store.append(header.id, log.events, life=existing.life)
    except StoreError as exc:
        return failed(
            f"session {header.id!r} was created but its events were not written ({exc}); "
            "importing this log again completes it"
        )
    count = len(log.events)
    renamed = "" if header.id == recorded.id else f", renamed from {recorded.id!r}"
    return Outcome(path, "imported", header.id, f"({count} event{'' if count == 1 else 's'}{renamed})")


async def _warn_orphan(
    store: HistoryStore, path: Path, header: SessionHeader, parent: str, owner: str, err: TextIO
) -> None:
    # Recorded logs may hold a child without its parent; say what that means rather than refuse it.
    try:
        found = await store.get_session(parent)
    except StoreError:
        found = None
    if found is None or found.owner != owner:
        print(
            f"{PROG}: warning: {path}: the parent {parent!r} of subagent {header.id!r} is not in the "
            f"store for {owner!r}; the child is read through its parent, so import the parent too",
            file=err,
        )


def _exists_hint(recorded: SessionHeader, header: SessionHeader, options: ImportOptions) -> str:
    if options.new_id is not None or options.rename:
        return " (--skip-existing skips it; --id NEW imports one log under another id)"
    if is_templated(recorded.id):
        return " (its id is a template placeholder: --rename-templated names it for its folder, or --id NEW)"
    return " (--skip-existing skips it; --rename-templated renames ids shared by logs of one import)"


def _reason(path: Path, exc: Exception) -> str:
    if isinstance(exc, OSError):
        return f"cannot read it: {exc.strerror or exc}"
    return f"{exc}{_hint(path)}"


def _hint(path: Path) -> str:
    try:
        with open(path, "rb") as log:
            first = log.readline()
    except OSError:
        return ""
    if first.startswith(b"{") and b'"type":"session"' not in first.replace(b" ", b""):
        return (
            " (a log starts with its session header line; history-client export writes events only, "
            "history-service export writes a log that import reads back)"
        )
    return ""


def _summary(outcomes: Sequence[Outcome], out: TextIO) -> None:
    counts = Counter(outcome.status for outcome in outcomes)
    print(
        f"import: {counts['imported']} imported, {counts['skipped']} skipped, {counts['failed']} failed",
        file=out,
    )
    for outcome in outcomes:
        if outcome.status != "imported":
            print(f"  {outcome.status} {outcome.path}: {outcome.reason}", file=out)

"""Importing session logs: storing each one whole or not at all, and saying what became of each.

A log is read and checked in full before anything of it is written (its id, its parent's
and every reference its events make to a renamed id follow `history_service.cli.naming`;
a missing time is derived, as `codec.session_log` says); then its session is created and
its events are written as one append, which every store commits whole.

What a log already in the store means:

* the same log, stored whole (same header, owner and events): ``unchanged``, and nothing is
  written, so importing a folder again succeeds and changes nothing;
* the same header and owner with no events: the remnant of an import whose append failed
  after its create (the stores have no delete), which this import completes;
* anything else is a clash: ``failed``, or with ``--skip-existing``, ``skipped``.

Files that are not read (`history_service.cli.log_files`) are reported as ``skipped``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TextIO

import msgspec

from codec import CodecError, Event, SessionHeader, check_session_id, incarnation_of, read_header, read_session_log
from history_service.cli import PROG
from history_service.cli.log_files import LogFiles
from history_service.cli.naming import ImportOptions, plan_names
from history_service.cli.references import References
from persistence import HistoryStore, SessionExistsError, SessionInfo, SessionNotFoundError, StoreError, subagent_parent

__all__ = ["Outcome", "import_logs"]

Status = Literal["imported", "unchanged", "skipped", "failed"]


class Outcome(msgspec.Struct, frozen=True):
    """What became of one file: its session id (if known), and why it was skipped or failed."""

    path: Path
    status: Status
    session_id: str | None = None
    reason: str = ""


async def import_logs(
    store: HistoryStore, files: LogFiles, options: ImportOptions, out: TextIO, err: TextIO
) -> list[Outcome]:
    """Import each log whole or not at all, report each on ``out`` (failures on ``err``), then a summary."""
    headers: dict[Path, SessionHeader] = {}
    unread: dict[Path, str] = {}
    for path in files.logs:
        try:
            with open(path, "rb") as log:
                headers[path] = read_header(log.readline().rstrip(b"\n"))
        except (CodecError, OSError) as exc:
            unread[path] = _reason(path, exc)
    naming = plan_names(headers, options)
    outcomes: list[Outcome] = []
    for path in files.passed_over:
        outcomes.append(_report(Outcome(path, "skipped", reason=_PASSED_OVER), out, err))
    failed_ids: set[str] = set()
    holders: dict[str, Path] = {}
    for path in files.logs:
        if path in unread:
            outcome = Outcome(path, "failed", reason=unread[path])
        else:
            planned = naming.headers[path]
            holder = holders.setdefault(planned.id, path)
            shared_with = None if holder == path else holder
            references = References(naming.renames[path])
            outcome = await _import_one(
                store, path, headers[path], planned, references, options, failed_ids, shared_with, err
            )
            if outcome.status == "failed":
                failed_ids.add(planned.id)
        outcomes.append(_report(outcome, out, err))
    _summary(outcomes, out)
    return outcomes


_PASSED_OVER = "not read: an import reads session.jsonl and session.N.jsonl (give the file itself to read it)"


async def _import_one(
    store: HistoryStore,
    path: Path,
    recorded: SessionHeader,
    header: SessionHeader,
    references: References,
    options: ImportOptions,
    failed_ids: set[str],
    shared_with: Path | None,
    err: TextIO,
) -> Outcome:
    def failed(reason: str) -> Outcome:
        return Outcome(path, "failed", header.id, reason)

    # A log that names no incarnation keeps the derived one (§2.5), so an export gives back this log.
    header = references.header(msgspec.structs.replace(header, incarnation=incarnation_of(header)))

    try:
        log = read_session_log(path.read_bytes())
        check_session_id(header.id, where="the header's id" if header.id == recorded.id else "the new id")
        if isinstance(header.parentSession, str):
            check_session_id(header.parentSession, where="the header's parentSession")
    except (CodecError, OSError) as exc:
        return failed(_reason(path, exc))
    events = references.events(log.events)
    parent = subagent_parent(header)
    if parent is not None and parent in failed_ids:
        return failed(f"its parent {parent!r} was not imported (see above), so neither is this subagent child")
    try:
        existing = await store.get_session(header.id)
    except SessionNotFoundError:
        existing = None
    if existing is not None:
        if await _same(store, existing, header, events, options.owner):
            return Outcome(path, "unchanged", header.id, f"({_events(len(events))}, already stored)")
        remnant = existing.head_seq == -1 and existing.header == header and existing.owner == options.owner
        if not (remnant and events):
            if options.skip_existing:
                return Outcome(path, "skipped", header.id, f"session {header.id!r} already exists")
            return failed(f"session {header.id!r} already exists{_exists_hint(existing, options, shared_with)}")
    if parent is not None:
        await _warn_orphan(store, path, header, parent, options.owner, err)
    try:
        if existing is None:
            existing = await store.create_session(header, owner=options.owner)
    except SessionExistsError:
        return failed(f"session {header.id!r} already exists (created meanwhile by another process)")
    except StoreError as exc:
        return failed(f"the store refused session {header.id!r}: {exc}")
    try:
        if events:
            # Into the life just made (or the empty remnant found): never one created since by another.
            await store.append(header.id, events, life=existing.life)
    except StoreError as exc:
        return failed(
            f"session {header.id!r} was created but its events were not written ({exc}); "
            "importing this log again completes it"
        )
    renamed = "" if header.id == recorded.id else f", renamed from {recorded.id!r}"
    return Outcome(path, "imported", header.id, f"({_events(len(events))}{renamed})")


def _events(count: int) -> str:
    return f"{count} event{'' if count == 1 else 's'}"


async def _same(
    store: HistoryStore, existing: SessionInfo, header: SessionHeader, events: list[Event], owner: str
) -> bool:
    """Whether the stored session is this log, stored whole: same owner, header and events."""
    if existing.owner != owner or existing.header != header or existing.head_seq != len(events) - 1:
        return False
    return not events or await store.read_events(header.id, 0, len(events)) == events


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


def _exists_hint(existing: SessionInfo, options: ImportOptions, shared_with: Path | None) -> str:
    differs = " and differs from this log" if existing.owner == options.owner else f", owned by {existing.owner!r}"
    if shared_with is not None and not options.rename_shared:
        return f"{differs}: {shared_with} of this import has that id too (--rename-templated names each for its folder)"
    return f"{differs} (--skip-existing skips it; --id NEW imports one log under another id)"


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


def _report(outcome: Outcome, out: TextIO, err: TextIO) -> Outcome:
    if outcome.status == "failed":
        print(f"{PROG}: error: {outcome.path}: {outcome.reason}", file=err)
    elif outcome.status == "skipped":
        subject = f"{outcome.session_id} from {outcome.path}" if outcome.session_id else str(outcome.path)
        print(f"skipped {subject}: {outcome.reason}", file=out)
    else:
        print(f"{outcome.status} {outcome.session_id} {outcome.reason} from {outcome.path}", file=out)
    return outcome


def _summary(outcomes: Sequence[Outcome], out: TextIO) -> None:
    counts = Counter(outcome.status for outcome in outcomes)
    print(
        f"import: {counts['imported']} imported, {counts['unchanged']} unchanged, {counts['skipped']} skipped, "
        f"{counts['failed']} failed",
        file=out,
    )
    for outcome in outcomes:
        if outcome.status in ("skipped", "failed"):
            print(f"  {outcome.status} {outcome.path}: {outcome.reason}", file=out)

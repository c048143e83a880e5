"""Naming imported logs: the id each one is stored under, and the renames its events must follow.

A log keeps its header's id, except:

* ``--id NEW`` names the one log given;
* a template placeholder (``{{sessionId}}``), which recorded logs hold where the harness
  wrote its session id, is never kept: it is no session's id, and keeping it would store
  the first such log under the literal placeholder and fail every later one. It is renamed
  by default;
* with ``--rename-templated``, so is an id that is not a valid session id, or that another
  log of the same import holds too (recorded fixtures reuse fixed UUIDs).

A renamed log is named for its folder (``session.N.jsonl`` adds ``.N``), which the same
tree gives on every run, so importing it again finds the same ids. Within a folder (a
parent and its children), every reference to a renamed id follows it: a child's
``parentSession``, and what the folder's events say of it (`history_service.cli.references`).
An id taken in the store is not renamed: it is the same log imported before, or a real
clash, and the import says which.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Final

import msgspec

from codec import MAX_SESSION_ID, SessionHeader, SessionIdError, check_session_id
from history_service.cli.log_files import child_number

__all__ = ["ImportOptions", "Naming", "derived_id", "is_templated", "plan_names"]

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._:@~-]")


class ImportOptions(msgspec.Struct, frozen=True, kw_only=True):
    """The owner, and the ``--id``, ``--rename-templated`` and ``--skip-existing`` flags."""

    owner: str
    new_id: str | None = None
    rename_shared: bool = False
    skip_existing: bool = False


class Naming(msgspec.Struct, frozen=True):
    """Each log's header as it will be stored, and the ``{old id: new id}`` its folder's events follow."""

    headers: dict[Path, SessionHeader]
    renames: dict[Path, dict[str, str]]


def is_templated(session_id: str) -> bool:
    """Whether an id is a recorded template placeholder such as ``{{sessionId}}``."""
    return "{{" in session_id or "}}" in session_id


def derived_id(path: Path) -> str:
    """The id a renamed log gets: its folder's name, with ``.N`` for ``session.N.jsonl``.

    Characters an id may not hold become ``_``; a name too long keeps its start and a hash
    of the whole, so the id stays the same on every run.
    """
    folder = path.resolve().parent.name or "session"
    name = path.name.removesuffix(".jsonl")
    if name == "session":
        raw = folder
    elif (number := child_number(path)) is not None:
        raw = f"{folder}.{number}"
    else:
        raw = f"{folder}.{name}"
    safe = _UNSAFE.sub("_", raw).strip(".") or "session"
    if len(safe) > MAX_SESSION_ID:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
        safe = f"{safe[: MAX_SESSION_ID - 13]}-{digest}"
    return safe


def plan_names(headers: dict[Path, SessionHeader], options: ImportOptions) -> Naming:
    """The stored header of each readable log, and the renames of its folder."""
    if options.new_id is not None:
        new_id = options.new_id
        return Naming(
            {path: msgspec.structs.replace(h, id=new_id) for path, h in headers.items()},
            {path: {h.id: new_id} if h.id != new_id else {} for path, h in headers.items()},
        )
    shared = Counter(header.id for header in headers.values())

    def renamed(header: SessionHeader) -> bool:
        if is_templated(header.id):
            return True
        return options.rename_shared and (shared[header.id] > 1 or not _valid(header.id))

    new_ids = {path: derived_id(path) if renamed(h) else h.id for path, h in headers.items()}
    by_folder: dict[Path, dict[str, str]] = {}
    for path, header in headers.items():
        by_folder.setdefault(path.resolve().parent, {}).setdefault(header.id, new_ids[path])
    planned = {}
    renames = {}
    for path, header in headers.items():
        folder = by_folder[path.resolve().parent]
        parent = header.parentSession
        if isinstance(parent, str):
            parent = folder.get(parent, parent)
        planned[path] = msgspec.structs.replace(header, id=new_ids[path], parentSession=parent)
        renames[path] = {old: new for old, new in folder.items() if old != new}
    return Naming(planned, renames)


def _valid(session_id: str) -> bool:
    try:
        check_session_id(session_id)
    except SessionIdError:
        return False
    return True

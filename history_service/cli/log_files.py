"""Finding the session logs an import reads, and naming the files it passes over.

A log is ``session.jsonl`` or ``session.N.jsonl`` (a subagent child of the first), as the
harness and ``export --with-children`` write them. A folder is walked recursively (hidden
folders aside), each folder's ``session.jsonl`` first, then its children in N order. Any
other ``.jsonl`` file met on the way (``session.expected.jsonl``, ``events.jsonl``) is not
read, but it is named, since it may well be a log by another name: given by its own path,
a file is always read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

__all__ = ["LogFiles", "child_number", "find_logs"]

_CHILD: Final = re.compile(r"session\.(\d+)\.jsonl")


class LogFiles(msgspec.Struct, frozen=True):
    """The logs to read, in import order, and the other ``.jsonl`` files of the folders walked."""

    logs: list[Path]
    passed_over: list[Path]


def child_number(path: Path) -> int | None:
    """N for ``session.N.jsonl``, else ``None``."""
    match = _CHILD.fullmatch(path.name)
    return None if match is None else int(match[1])


def find_logs(paths: Sequence[Path]) -> LogFiles:
    """Every log under ``paths``, each folder's ``session.jsonl`` before its ``session.N.jsonl`` in N order.

    Raises `ValueError` for a missing path or a folder with no log under it.
    """
    found: list[Path] = []
    passed_over: list[Path] = []
    for path in paths:
        if path.is_dir():
            logs: list[Path] = []
            for folder in _folders(path):
                logs.extend(_session_logs(folder))
                passed_over.extend(_others(folder))
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
    read = set(unique)
    others = {other.resolve(): other for other in passed_over if other.resolve() not in read}
    return LogFiles(list(unique.values()), list(others.values()))


def _folders(root: Path) -> list[Path]:
    folders = []
    for folder, subfolders, _ in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        folders.append(Path(folder))
    return folders


def _session_logs(folder: Path) -> list[Path]:
    children = sorted(
        ((number, p) for p in folder.glob("session.*.jsonl") if (number := child_number(p)) is not None),
        key=lambda item: item[0],
    )
    parent = folder / "session.jsonl"
    return ([parent] if parent.is_file() else []) + [p for _, p in children if p.is_file()]


def _others(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.glob("*.jsonl") if p.is_file() and p.name != "session.jsonl" and child_number(p) is None
    )

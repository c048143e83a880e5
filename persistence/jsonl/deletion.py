"""A delete on the JSONL store (docs/protocol.md §7.2): session directories renamed out of the root, under an intent.

A delete first writes an intent file into the root, durably: the directories to remove,
each with its session's incarnation. Then it renames each directory to a hidden trash
name, fsyncs the root, and removes the intent; only then are the trash directories
removed. A rename is atomic, so a crash leaves each session whole or gone, and a reopen
(`finish_deletes`) finishes what an intent names: it renames what is still there, and
removes what is in the trash. A directory whose header names another incarnation (the
id was created again since) is left alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from persistence.jsonl.files import fsync_dir, write_atomic

__all__ = ["INTENT_PREFIX", "TRASH_PREFIX", "Doomed", "delete_directories", "finish_deletes", "tree_size"]

INTENT_PREFIX: Final = ".deleting-"
TRASH_PREFIX: Final = ".deleted-"


class Doomed(msgspec.Struct, frozen=True, array_like=True):
    """One directory an intent removes, and the incarnation of the session it holds."""

    name: str
    incarnation: str


_INTENT: Final = msgspec.json.Decoder(list[Doomed])


def delete_directories(root: Path, doomed: list[Doomed]) -> None:
    """Remove the directories, all of them or (after a crash, once reopened) none: durable when it returns."""
    token = uuid.uuid4().hex
    write_atomic(root / f"{INTENT_PREFIX}{token}", msgspec.json.encode(doomed))
    _carry_out(root, token, list(enumerate(doomed)))


def finish_deletes(root: Path, incarnation_of: Callable[[Path], str | None]) -> int:
    """Finish the deletes a crash interrupted, and clear the trash; how many intents were finished.

    ``incarnation_of(directory)`` is the incarnation a directory's header names, ``None`` when it has none.
    Another process may be carrying out the same intent meanwhile: whichever renames a directory first wins.
    """
    finished = 0
    for path in sorted(root.glob(f"{INTENT_PREFIX}*")):
        try:
            doomed = _INTENT.decode(path.read_bytes())
        except FileNotFoundError:
            continue
        except msgspec.DecodeError:
            # Written atomically, so never torn: a file of another tool's. Leave it.
            continue
        left = [(i, entry) for i, entry in enumerate(doomed) if incarnation_of(root / entry.name) == entry.incarnation]
        _carry_out(root, path.name[len(INTENT_PREFIX) :], left)
        finished += 1
    for trash in root.glob(f"{TRASH_PREFIX}*"):
        shutil.rmtree(trash, ignore_errors=True)
    return finished


def _carry_out(root: Path, token: str, doomed: list[tuple[int, Doomed]]) -> None:
    for i, entry in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.rename(root / entry.name, root / f"{TRASH_PREFIX}{token}-{i}")
    fsync_dir(root)
    # From here the delete is complete: the trash is hidden, and a reopen clears what is left of it.
    with contextlib.suppress(FileNotFoundError):
        (root / f"{INTENT_PREFIX}{token}").unlink()
    fsync_dir(root)
    for i, _ in doomed:
        shutil.rmtree(root / f"{TRASH_PREFIX}{token}-{i}", ignore_errors=True)


def tree_size(root: Path) -> int:
    """The bytes of every file under ``root``: what a root takes on disk, for `history-service vacuum`."""
    return sum(os.path.getsize(os.path.join(top, name)) for top, _, names in os.walk(root) for name in names)

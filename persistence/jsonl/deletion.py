"""A delete on the JSONL store (docs/protocol.md §7.2): session directories renamed out of the root, under an intent.

A delete first writes an intent file into the root, durably: the directories to remove,
each with its session's id and incarnation. Then it renames each directory to a hidden
trash name, fsyncs the root, tells the other processes (`persistence.jsonl.notices`), and
removes the intent; only then are the trash directories removed. A rename is atomic, so a
crash leaves each session whole or gone, and a reopen (`finish_deletes`) finishes what an
intent names: it renames what is still there, removes what is in the trash, and tells
every session the intent names once more. So a crash between the telling and the intent's
removal tells a delete twice; it names its incarnation, so the second changes nothing. A
directory whose header names another incarnation (the id was created again since) is left
alone. The deleting process holds a lock on its intent while it carries it out, so no
other process's reopen carries out the same intent at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import msgspec

from codec import SessionHeader, incarnation_of
from persistence.base import subagent_parent
from persistence.errors import SessionNotFoundError
from persistence.jsonl.files import fsync_path, locked, write_atomic
from persistence.jsonl.layout import encode_segment, owner_of
from persistence.rules import Life, check_life

__all__ = [
    "INTENT_PREFIX",
    "TRASH_PREFIX",
    "Doomed",
    "delete_directories",
    "delete_tree",
    "finish_deletes",
    "tree_size",
]

INTENT_PREFIX: Final = ".deleting-"
TRASH_PREFIX: Final = ".deleted-"


class Doomed(msgspec.Struct, frozen=True, array_like=True):
    """One directory an intent removes, and the incarnation and id of the session it holds.

    ``session_id`` is empty in an intent of a build before notices: that delete is finished untold.
    """

    name: str
    incarnation: str
    session_id: str = ""


Told = Callable[[list[Doomed]], object]
"""Tells the other processes that the sessions of these entries are deleted (`persistence.jsonl.notices`)."""


def _untold(doomed: list[Doomed]) -> None:
    """The `Told` of a caller with no other process to tell."""


_INTENT: Final = msgspec.json.Decoder(list[Doomed])


def delete_tree(
    root: Path,
    session_id: str,
    tree: Callable[[str], list[str]],
    peek: Callable[[Path], SessionHeader | None],
    stale: Callable[[str], object],
    life: Life | None = None,
    *,
    tell: Told = _untold,
) -> list[str]:
    """Delete ``session_id`` and the sessions below it (``tree``), under their locks; the ids deleted.

    The locks are taken in directory-name order (§7.2), as every deleter takes them. Under its
    lock each session below must still be a subagent in the tree: one made again elsewhere
    since ``tree`` looked, in another tree, is ``stale(id)`` (its kept header dropped), and the
    tree is looked up again. ``tell(doomed)`` runs once the tree is gone, under its locks.
    Under its lock ``session_id`` must be ``life`` (`persistence.rules.check_life`),
    by its header and owner file alone, so that a session whose log is corrupt can be deleted too.
    """
    while True:
        members = tree(session_id)
        with contextlib.ExitStack() as held:
            doomed = []
            for gone in sorted(members, key=encode_segment):
                directory = root / encode_segment(gone)
                held.enter_context(locked(directory, gone))
                header = peek(directory)
                if gone == session_id:
                    if life is not None:
                        if header is None:
                            raise SessionNotFoundError(session_id)
                        check_life(session_id, life, header, owner_of(directory))
                elif header is None or subagent_parent(header) not in members:
                    stale(gone)
                    break
                incarnation = "" if header is None else incarnation_of(header)
                doomed.append(Doomed(directory.name, incarnation, gone))
            else:
                delete_directories(root, doomed, tell)
                return members


def delete_directories(root: Path, doomed: list[Doomed], tell: Told = _untold) -> None:
    """Remove the directories, all of them or (after a crash, once reopened) none: durable when it returns.

    ``tell(doomed)`` runs once they are gone for good and before the intent is removed, so a crash
    before it leaves the telling to `finish_deletes`.
    """
    token = uuid.uuid4().hex
    intent = root / f"{INTENT_PREFIX}{token}"
    write_atomic(intent, msgspec.json.encode(doomed))
    with _carrying_out(intent) as mine:
        if mine:
            _carry_out(root, token, list(enumerate(doomed)), lambda: tell(doomed))


def finish_deletes(
    root: Path,
    incarnation_of: Callable[[Path], str | None],
    tell: Told = _untold,
) -> int:
    """Finish the deletes a crash interrupted, and clear the trash; how many intents were finished.

    ``incarnation_of(directory)`` is the incarnation a directory's header names, ``None`` when it has none.
    An intent that another process is carrying out (it holds the intent's lock) is left to it. Each intent
    finished is told whole (``tell``): the crash may have come before its telling.
    """
    finished = 0
    for path in sorted(root.glob(f"{INTENT_PREFIX}*")):
        with _carrying_out(path, wait=False) as mine:
            if not mine:
                continue
            try:
                doomed = _INTENT.decode(path.read_bytes())
            except msgspec.DecodeError:
                # Written atomically, so never torn: a file of another tool's. Leave it.
                continue
            left = [(i, d) for i, d in enumerate(doomed) if incarnation_of(root / d.name) == d.incarnation]
            _carry_out(root, path.name[len(INTENT_PREFIX) :], left, functools.partial(tell, doomed))
            finished += 1
    for trash in root.glob(f"{TRASH_PREFIX}*"):
        shutil.rmtree(trash, ignore_errors=True)
    # The staging file of an intent whose writer died before it was in place: it never took effect.
    for staged in root.glob(f".{INTENT_PREFIX}*"):
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
    return finished


@contextlib.contextmanager
def _carrying_out(intent: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the intent's lock; yields whether this process is to carry it out (it is still there, and ours)."""
    try:
        fd = os.open(intent, os.O_RDONLY)
    except FileNotFoundError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        # Carried out and removed by another process while this one waited for the lock.
        yield intent.exists()
    finally:
        os.close(fd)


def _carry_out(root: Path, token: str, doomed: list[tuple[int, Doomed]], told: Callable[[], object]) -> None:
    for i, entry in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.rename(root / entry.name, root / f"{TRASH_PREFIX}{token}-{i}")
    fsync_path(root)
    # From here the delete is complete: the trash is hidden, and a reopen clears what is left of it.
    # Told before the intent goes: a crash in between tells it again at the next finish_deletes.
    told()
    with contextlib.suppress(FileNotFoundError):
        (root / f"{INTENT_PREFIX}{token}").unlink()
    fsync_path(root)
    for i, _ in doomed:
        shutil.rmtree(root / f"{TRASH_PREFIX}{token}-{i}", ignore_errors=True)


def tree_size(root: Path) -> int:
    """The bytes of every file under ``root``: what a root takes on disk, for `history-service vacuum`."""
    total = 0
    for top, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile: it takes nothing
                total += os.path.getsize(os.path.join(top, name))
    return total

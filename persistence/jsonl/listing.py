"""Listings of a JSONL root: its sessions' headers and owners, read once each, and a head seq that costs one read.

A header and an owner never change once a session's directory appears, so both are cached
by directory name; only ``closedAt`` (the `CLOSED_NAME` file) is read afresh. Which
session each directory is a subagent of is kept apart, for many more directories, with
the directory's inode and change time: a directory made again under the same name (by
another process) gets a new change time, even where the file system reuses the inode, and
is read again. So a delete finds its tree in a scan of the root that reads only the headers
of directories that changed (§6.5).

A session's synopsis is its `persistence.jsonl.synopses` file's when that is at the listed
head (one small read); otherwise it is found as a read finds it, under the session's lock.
A filter reads it for every session of the owner whose id does not match already.
"""

from __future__ import annotations

import logging
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from codec import SessionHeader
from persistence.base import (
    SessionKey,
    SessionSummary,
    closed_at_of,
    expires_at_of,
    in_listing,
    newest_first,
    subagent_parent,
    subtree,
)
from persistence.errors import CorruptLogError, SessionNotFoundError
from persistence.jsonl.index import IndexedSession, index_fresh, last_seq, read_last_entry
from persistence.jsonl.layout import (
    INDEX_NAME,
    closed_at,
    encode_segment,
    named_for,
    owner_of,
    touched_at,
    with_closed,
)
from persistence.jsonl.recovery import Loader
from persistence.jsonl.synopses import read_kept
from persistence.rules import alive, expiry
from persistence.state import Lru
from persistence.synopsis import EMPTY, Synopsis, matches

__all__ = ["Listing"]

logger = logging.getLogger(__name__)

# Directories whose parent is kept: about 500 bytes each, so some 64 MB at most.
PARENTS_KEPT: Final = 1 << 17


class Listing:
    """The listing reads of one root. ``state`` loads a session as the store does (it recovers one that needs it);
    ``synopsis`` finds a session's synopsis as a read does."""

    def __init__(
        self,
        root: Path,
        loader: Loader,
        *,
        states: Lru[str, IndexedSession],
        state: Callable[[str], IndexedSession],
        synopsis: Callable[[str], Synopsis],
        headers: Lru[str, tuple[SessionHeader | None]],
        owners: Lru[str, str],
    ) -> None:
        self._root = root
        self._synopsis_read = synopsis
        self._loader = loader
        self._states = states
        self._state = state
        self._zstd = loader.zstd
        self._headers = headers
        self._owners = owners
        self._parents: Lru[str, tuple[tuple[int, int], str | None, str | None]] = Lru(PARENTS_KEPT)

    def children(self, parent_id: str) -> list[SessionHeader]:
        found = []
        for name, _, parent in self._parented():
            if parent == parent_id:
                header = self._header(name, self._root / name)
                if header is not None and subagent_parent(header) == parent_id:
                    found.append(with_closed(header, closed_at(self._root / name)))
        return sorted(found, key=lambda header: header.id)

    def tree(self, session_id: str) -> list[str]:
        """``session_id`` and every session below it, parents first (`subtree`), from one scan of the root."""
        below: defaultdict[str, list[str]] = defaultdict(list)
        for _, child, parent in self._parented():
            if parent is not None and child is not None:
                below[parent].append(child)
        return subtree(session_id, lambda parent: sorted(below.get(parent, ())))

    def clear(self) -> None:
        self._headers.clear()
        self._owners.clear()
        self._parents.clear()

    def forget(self, name: str) -> None:
        """Drop what is kept of a directory (this process removed it, or it may have changed)."""
        self._headers.pop(name)
        self._owners.pop(name)
        self._parents.pop(name)

    def _parented(self) -> Iterator[tuple[str, str | None, str | None]]:
        """Each session directory's name, its session's id, and the id it is a subagent of (or ``None``)."""
        with os.scandir(self._root) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_dir():
                    continue
                try:
                    stat = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # deleted meanwhile
                made = (stat.st_ino, stat.st_ctime_ns)
                known = self._parents.get(entry.name)
                if known is None or known[0] != made:
                    # Perhaps made again, or not seen for long: its header and owner may differ.
                    self.forget(entry.name)
                    header = self._header(entry.name, Path(entry.path))
                    known = (made, None, None) if header is None else (made, header.id, subagent_parent(header))
                    self._parents.put(entry.name, known)
                yield entry.name, known[1], known[2]

    def _header(self, name: str, path: Path) -> SessionHeader | None:
        known = self._headers.get(name)
        if known is None:
            known = (self._loader.peek_header(path),)
            self._headers.put(name, known)
        return known[0]

    def _mine(self, owner: str, closed: bool | None) -> tuple[list[SessionHeader], Counter[str]]:
        """The owner's top-level sessions that a listing of ``closed`` holds, and every session's child count."""
        child_counts: Counter[str] = Counter()
        mine: list[SessionHeader] = []
        for name, header in self._peeked():
            parent = subagent_parent(header)
            if parent is not None:
                child_counts[parent] += 1
            elif self._owner(name) == owner and named_for(name, header):
                header = with_closed(header, closed_at(self._root / name))
                if in_listing(header, closed):
                    mine.append(header)
        return mine, child_counts

    def sessions(
        self, owner: str, limit: int, before: SessionKey | None, closed: bool | None, match: str | None
    ) -> list[SessionSummary]:
        mine, child_counts = self._mine(owner, closed)
        found: list[SessionSummary] = []
        if limit < 1:
            return found
        for header in newest_first(mine, limit=len(mine), before=before):
            try:
                head = self._listed_head(header.id)
                touched = touched_at(self._root / encode_segment(header.id))
                synopsis = self._synopsis(header.id, head)
            except (CorruptLogError, SessionNotFoundError, FileNotFoundError) as exc:
                # One unreadable log must not hide the owner's other sessions; reads of it still fail.
                # An OS failure is the store's, not the log's: the listing fails with it (503).
                logger.error("listing skips session %r: %s", header.id, exc)
                continue
            if not matches(header.id, synopsis.title, match):
                continue
            children = child_counts[header.id]
            found.append(
                SessionSummary(
                    header.id,
                    header.createdAt,
                    head,
                    children,
                    closed_at_of(header),
                    expires_at_of(header),
                    touched,
                    synopsis,
                )
            )
            if len(found) == limit:
                break
        return found

    def count(self, owner: str, now: int, retention_ms: int | None, closed: bool | None, match: str | None) -> int:
        """`HistoryStore.count_sessions`: what `sessions` would list, less the sessions expired at ``now``."""
        counted = 0
        for header in self._mine(owner, closed)[0]:
            try:
                if not alive(
                    expires_at_of(header), touched_at(self._root / encode_segment(header.id)), retention_ms, now
                ):
                    continue
                if not matches(header.id, None, match):
                    title = self._synopsis(header.id, self._listed_head(header.id)).title
                    if not matches(header.id, title, match):
                        continue
            except (CorruptLogError, SessionNotFoundError, FileNotFoundError):
                continue  # left out of the listing too (and logged there)
            counted += 1
        return counted

    def _synopsis(self, session_id: str, head: int) -> Synopsis:
        """The session's synopsis: its file's when that is at ``head``, else as a read finds it."""
        if head == -1:
            return EMPTY
        kept = read_kept(self._root / encode_segment(session_id))
        if kept is not None and kept.seq == head:
            return kept.synopsis
        return self._synopsis_read(session_id)

    def expired(self, now: int, retention_ms: int | None, limit: int | None, skip: frozenset[str]) -> list[str]:
        """`HistoryStore.expired`: each directory's header (cached) and file times, never its log."""
        found: list[str] = []
        for name, header in self._peeked():
            if len(found) == limit:
                break
            try:
                at = expiry(expires_at_of(header), touched_at(self._root / name), retention_ms)
            except FileNotFoundError:
                continue  # deleted meanwhile
            if at is not None and at <= now and named_for(name, header) and header.id not in skip:
                found.append(header.id)
        return found

    def _peeked(self) -> Iterator[tuple[str, SessionHeader]]:
        """Each session directory's name and header: peeked once, then kept while the directory is the same."""
        for name, session_id, _ in self._parented():
            header = self._header(name, self._root / name) if session_id is not None else None
            if header is not None:
                yield name, header

    def _owner(self, name: str) -> str:
        owner = self._owners.get(name)
        if owner is None:
            # Written before the session's directory appears, and never rewritten: cache it.
            owner = owner_of(self._root / name)
            self._owners.put(name, owner)
        return owner

    def _listed_head(self, session_id: str) -> int:
        # Only the listed page's sessions need a head seq, and the index's last entry holds it:
        # loading each one's state would read and decode its whole index (megabytes for a long
        # session) and keep it in memory, all for that one number. The tail is trusted only when
        # its last entry ends exactly where the log ends; anything else (a torn batch, bytes past
        # the last entry, an older index) loads the state, which recovers it as any read does.
        directory = self._root / encode_segment(session_id)
        found = read_last_entry(directory / INDEX_NAME)
        if found is not None:
            head, entry, index_size = found
            state = self._states.get(session_id)
            # The inode too: a session deleted and made again at the same index size is not the one kept.
            if state is not None and state.index_size == index_size and index_fresh(state):
                return state.head
            try:
                log_size = self._loader.log_path(directory).stat().st_size
            except FileNotFoundError:
                log_size = -1
            last = -1 if entry is None else last_seq(entry)
            end = head.headerEnd if entry is None else entry.end
            if last is not None and end == log_size and head.compression == ("zstd" if self._zstd else "none"):
                return last
        return self._state(session_id).head

"""The JSONL store's reads: stored records and pages, from a session's loaded index.

A read holds the session's lock shared, so no append rewrites the log under it, and checks
that the index has not grown since the state was loaded. A loaded session's small page is
read on the event loop (`Reads.page_inline`); any other read runs in a worker thread.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from codec import StoredRecord, decode_json, encode, record_from_value
from persistence._zstd import ZstdContexts
from persistence.base import PageRead
from persistence.errors import SessionNotFoundError
from persistence.jsonl.files import locked, pread, reading
from persistence.jsonl.index import IndexedSession, block_ranges, index_fresh, position, windows
from persistence.jsonl.rewrite import bounded, span
from persistence.off_loop import OFF_LOOP_BYTES
from persistence.rules import page_span
from persistence.state import Lru

__all__ = ["Reads"]


class Reads:
    """Record and page reads over the store's loaded states.

    ``state`` loads (or reloads) a session's state; ``directory`` names a session's directory.
    """

    def __init__(
        self,
        *,
        zstd: bool,
        contexts: ZstdContexts,
        log_name: str,
        states: Lru[str, IndexedSession],
        state: Callable[[str], IndexedSession],
        directory: Callable[[str], Path],
    ) -> None:
        self._zstd = zstd
        self._contexts = contexts
        self._log_name = log_name
        self._states = states
        self._state = state
        self._directory = directory

    def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        with self.reading(session_id) as state:
            return self.stored(state, from_seq, to_seq)

    @contextlib.contextmanager
    def reading(self, session_id: str) -> Iterator[IndexedSession]:
        """The session's current state, with the lock shared: no append rewrites the log meanwhile."""
        directory = self._directory(session_id)
        while True:
            state = self._state(session_id)
            with locked(directory, session_id, shared=True):
                # The index only grows, except when a crash is undone, which restores an earlier state.
                if index_fresh(state):
                    yield state
                    return

    def stored(self, state: IndexedSession, from_seq: int, to_seq: int) -> list[StoredRecord]:
        """The records of ``[from_seq, to_seq)`` from a state the caller holds the lock on."""
        first = max(0, bisect.bisect_right(state.starts, from_seq) - 1)
        last = bisect.bisect_left(state.starts, to_seq)
        out: list[StoredRecord] = []
        if first >= last:
            return out
        with reading(state.directory / self._log_name) as log:
            ranges = block_ranges(state, first, last) if self._zstd else windows(state, first, last)
            for start, lo, hi in ranges:
                if self._zstd:
                    entry = state.entries[start]
                    content = (
                        self._contexts.decompressor().decompressobj().decompress(pread(log, entry.start, entry.end))
                    )
                    base = 0
                else:
                    content = pread(log, start, position(state, hi - 1) + state.lengths[hi - 1])
                    base = start
                for i in range(lo, hi):
                    offset = (state.offsets[i] if self._zstd else position(state, i)) - base
                    line = content[offset : offset + state.lengths[i]]
                    if not state.canonical[i]:
                        line = encode(record_from_value(decode_json(line), state.starts[i]))
                    out.append(state.record(i, line))
        return out

    def page_inline(
        self, session_id: str, through: int | None, before: int | None, max_messages: int, max_bytes: int | None
    ) -> PageRead | None:
        """The page, read on the event loop when that is cheap; ``None`` sends it to `page`, in a worker thread."""
        state = self._states.get(session_id)
        if state is None or self._zstd:
            # A zstd frame may decompress to any size: those reads go to a worker thread.
            return None
        try:
            # Never wait on the event loop: a writer holding the lock sends the read to a worker thread.
            with locked(state.directory, session_id, shared=True, wait=False):
                if not index_fresh(state):
                    return None
                return self._page_of(state, through, before, max_messages, max_bytes, OFF_LOOP_BYTES)
        except (BlockingIOError, SessionNotFoundError):
            return None

    def page(
        self, session_id: str, through: int | None, before: int | None, max_messages: int, max_bytes: int | None
    ) -> PageRead:
        with self.reading(session_id) as state:
            read = self._page_of(state, through, before, max_messages, max_bytes, None)
        assert read is not None
        return read

    def _page_of(
        self,
        state: IndexedSession,
        through: int | None,
        before: int | None,
        max_messages: int,
        max_bytes: int | None,
        limit: int | None,
    ) -> PageRead | None:
        """The page's read from a state the caller holds the lock on; ``None`` if its records pass ``limit`` bytes."""
        info = state.info()
        window = page_span(state.head, through, before)
        if not window.reads:
            return PageRead.unread(info, window)
        to_seq = window.to_seq
        cuts = state.messages.cuts(to_seq, max_messages)
        if max_bytes is not None and len(cuts) > 1:
            cuts = bounded(state, cuts, to_seq, max_bytes)
        if limit is not None and span(state, cuts[-1], to_seq) > limit:
            return None
        return PageRead(info, to_seq, cuts, self.stored(state, cuts[-1], to_seq))

    def cuts(self, session_id: str, to_seq: int, max_messages: int) -> list[int]:
        with self.reading(session_id) as state:
            return state.messages.cuts(to_seq, max_messages)

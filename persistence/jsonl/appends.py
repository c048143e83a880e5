"""The JSONL store's append unit, run in the writer thread, and what a failed append leaves behind.

The unit checks an append against the session's loaded state and stages its writes for the
group's barriers, in the order `persistence.jsonl.store` describes: the index entry before
the log bytes, and a sealing rewrite's rollback journal before either. A failed append is
undone; a failed rewrite is undone from its journal, and when that cannot be trusted the
store fails closed: no append is taken until it is reopened.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from codec import Event, StoredRecord
from codec.stored import OTHER
from persistence.base import AppendResult, events_in
from persistence.batch import PreparedBatch
from persistence.errors import StoreError
from persistence.jsonl.file_groups import FileGroup, Staged, Step
from persistence.jsonl.files import SessionLock, acquire, truncate, write_unsynced
from persistence.jsonl.index import Entry, IndexedSession, index_frame
from persistence.jsonl.journal import Clearing, journal_size, pending, ready, undo, written
from persistence.jsonl.layout import INDEX_NAME
from persistence.jsonl.recovery import Loader
from persistence.jsonl.rewrite import write_plan
from persistence.jsonl.synopses import Kept, of_state, write_kept
from persistence.notify import notice
from persistence.rules import Life, check_life, confirm_resend, plan_batch
from persistence.state import Lru
from persistence.synopsis import Synopsis, applied

__all__ = ["Appends"]

logger = logging.getLogger(__name__)


class Appends:
    """Appends staged into the writer's file groups, and the store's fail-closed state.

    ``state`` loads a session's state under its held lock; ``stored`` reads records from a
    state; ``distrusted`` are the sessions whose journals are undone whenever they load;
    ``origin`` names the store in its appends' notices (none are told without one).
    """

    def __init__(
        self,
        *,
        root: Path,
        loader: Loader,
        log_name: str,
        states: Lru[str, IndexedSession],
        state: Callable[[str], IndexedSession],
        stored: Callable[[IndexedSession, int, int], list[StoredRecord]],
        directory: Callable[[str], Path],
        distrusted: set[str],
        origin: str | None = None,
    ) -> None:
        self._root = root
        self._loader = loader
        self._log_name = log_name
        self._states = states
        self._state = state
        self._stored = stored
        self._directory = directory
        self._distrusted = distrusted
        self._origin = origin
        # Set when a failed rewrite may not be undone from its journal: appends stop until the store is reopened.
        self._broken: str | None = None

    def check_writable(self) -> None:
        if self._broken is not None:
            raise StoreError(f"store unavailable: {self._broken}")

    def unit(
        self,
        group: FileGroup,
        *,
        lock: SessionLock | None,
        session_id: str,
        events: Sequence[Event],
        batch: PreparedBatch | None,
        life: Life | None,
    ) -> AppendResult | None:
        """One append, in the writer thread: checked now, staged for the group's barriers.

        Without ``lock`` it tries the session's lock itself, and is ``None`` when that is busy:
        the caller waits for it outside the writer, which serves every session, and comes back with it.
        """
        directory = self._directory(session_id)
        if lock is None:
            try:
                lock = acquire(directory, session_id, wait=False)
            except BlockingIOError:
                return None
        # Held until the group is durable: no reader or other process sees the session mid-append.
        group.hold(lock)
        self.check_writable()
        journaled = journal_size(directory)
        if journaled:
            # A writer died after its journal and before its index entry, so the index
            # looks unchanged; settle before appending, or a later settle would undo this.
            self._states.pop(session_id)
        state = self._state(session_id)
        check_life(session_id, life, state.header, state.owner)
        closed = state.header.closedAt is not msgspec.UNSET
        plan = plan_batch(session_id, [event.seq for event in events], state.head, closed=closed)
        if plan.resend:
            stored = events_in(self._stored(state, plan.first_seq, plan.to_seq), plan.first_seq, plan.to_seq)
            confirm_resend(session_id, events, stored, state.head, closed=closed)
        if not plan.writes or batch is None:
            return AppendResult.of(plan)
        entries, start, block, journal = write_plan(state, batch, self._loader, self._stored)
        line = b"".join(map(index_frame, entries))
        index_at = state.index_size
        index_path, log_path = directory / INDEX_NAME, directory / self._log_name
        write_index = functools.partial(write_unsynced, index_path, index_at, line, size=index_at)
        write_log = functools.partial(write_unsynced, log_path, start, block)
        synopsis, first = self._synopsis(state, batch, plan.head_seq)
        if journal is None:
            # The index entry before the log bytes: if the log write tears, the entry marks the batch as torn.
            steps: tuple[tuple[Step, ...], ...] = ((write_index, *first), (write_log,))
            failed = functools.partial(self._undo, state, start, index_at)
        else:
            # A sealing rewrite: its journal is durable before anything is overwritten, and can undo any part
            # of the entries and bytes after it, so those share the second barrier; it is cleared in a third.
            if journaled is None:
                ready(directory)
            journal = msgspec.structs.replace(journal, entries=line)
            clearing = Clearing(directory)
            steps = (
                (functools.partial(written, directory, journal), *first),
                (write_index, write_log),
                (clearing,),
            )
            failed = functools.partial(self._settle_failed, state, clearing)
        durable = functools.partial(_applied, state, entries, len(line), synopsis)
        told = None if self._origin is None else notice(session_id, plan.head_seq, self._origin)
        group.stage(Staged(steps, log_path, durable, failed, told))
        return AppendResult.of(plan)

    def _synopsis(
        self, state: IndexedSession, batch: PreparedBatch, head: int
    ) -> tuple[Synopsis | None, tuple[Step, ...]]:
        """The session's synopsis once the batch is appended (``None`` while unknown), and what writes it first.

        A batch with a record that never joins writes the file in its first barrier
        (`persistence.jsonl.synopses`), so its synopsis must be known: it is found now, under the
        lock. A batch of deltas alone writes nothing, and moves a known synopsis only.
        """
        if all(record.kind != OTHER for record in batch.records):
            return (None if state.synopsis is None else applied(state.synopsis, batch.synopsis)), ()
        after = applied(of_state(state, self._stored), batch.synopsis)
        return after, (functools.partial(write_kept, state.directory, Kept(head, after)),)

    def _settle_failed(self, state: IndexedSession, clearing: Clearing) -> None:
        """Undo a failed rewrite from its journal, or stop appends when that fails or its journal may not be clear.

        Undone whatever the files now hold: a write whose fsync failed may look whole in the
        page cache and still be lost. A journal whose clearing was not made durable can come
        back after a power loss, after later appends; were the index lost too, settling it
        then would cut them. So when the failure came at the clearing, or the undoing fails,
        the store fails closed: no append is taken, and `check_ready` fails, until a reopen
        settles the session again. Until then its reads undo a journal still pending, too.
        """
        session_id = state.header.id
        self._states.pop(session_id)
        try:
            # Still pending: the failure came before the clearing's write, and undoing clears it durably.
            was_pending = pending(state.directory)
            undo(state.directory, state.directory / self._log_name, state.directory / INDEX_NAME)
        except OSError as exc:
            self._fail_closed(session_id, f"undoing its failed rewrite failed: {exc}")
            return
        if clearing.started and not was_pending:
            self._fail_closed(session_id, "the journal of its rewrite could not be cleared durably")

    def _fail_closed(self, session_id: str, why: str) -> None:
        self._distrusted.add(session_id)
        self._broken = f"session {session_id!r}: {why}; appends are refused until the store is reopened"
        logger.error("JSONL store %s fails closed: %s", self._root, self._broken)

    def _undo(self, state: IndexedSession, start: int, index_size: int) -> None:
        """Put a failed append's files back as they were, as far as they let us; the state is read again."""
        self._states.pop(state.header.id)
        with contextlib.suppress(OSError):
            truncate(state.directory / self._log_name, start)
            truncate(state.directory / INDEX_NAME, index_size)


def _applied(state: IndexedSession, entries: list[Entry], size: int, synopsis: Synopsis | None) -> None:
    state.add_all(entries)
    state.index_size += size
    state.synopsis = synopsis

"""The in-memory reference store: the contract with nothing in the way."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Sequence

import anyio.to_thread
import msgspec

from codec import Event, SessionHeader, StoredRecord
from persistence.base import (
    DEFAULT_OWNER,
    AppendResult,
    HistoryStore,
    SessionInfo,
    SessionKey,
    SessionSummary,
    closed_at_of,
    events_in,
    expires_at_of,
    in_listing,
    incarnated,
    newest_first,
    subagent_parent,
    subtree,
)
from persistence.batch import prepare_batch
from persistence.clock import now_ms
from persistence.errors import SessionExistsError, SessionNotFoundError
from persistence.message_index import HiddenRange, MessageEntry, MessageIndex
from persistence.rules import Life, alive, check_life, confirm_resend, expiry, plan_batch
from persistence.sealing import next_open_run, plan_append
from persistence.search import Passage, SearchPage, SearchRequest, hit, joined
from persistence.search.matching import marks
from persistence.streams.memory import MemoryStreams
from persistence.synopsis import EMPTY, Synopsis, applied, matches

__all__ = ["MemoryStore", "RecordIndex"]


class RecordIndex:
    """A session's stored records and message index, in seq order."""

    def __init__(self) -> None:
        self.records: list[StoredRecord] = []
        self.starts: list[int] = []
        self.messages = MessageIndex()
        self.head = -1
        # The session's open run (`persistence.sealing.open_run` of ``records``), kept as appends change it.
        self.open: list[StoredRecord] = []

    def add(
        self,
        at: int,
        records: Sequence[StoredRecord],
        messages: Sequence[MessageEntry],
        hidden: Sequence[HiddenRange],
    ) -> None:
        """Replace the records from index ``at`` on with ``records`` (a sealed tail, then the batch)."""
        del self.records[at:], self.starts[at:]
        for record in records:
            self.records.append(record)
            self.starts.append(record.seq)
            self.head = record.end - 1
        self.messages.add(messages, hidden)

    def covering(self, from_seq: int, to_seq: int) -> tuple[int, int]:
        """The index range of records that overlap ``[from_seq, to_seq)``."""
        first = max(0, bisect.bisect_right(self.starts, from_seq) - 1)
        last = bisect.bisect_left(self.starts, to_seq)
        return first, last


class _Session:
    def __init__(self, header: SessionHeader, owner: str) -> None:
        self.header = header
        self.owner = owner
        self.index = RecordIndex()
        self.touched = now_ms()
        self.synopsis: Synopsis = EMPTY
        # Each passage with the number of its first write: a search reads the latest written first, as the SQL
        # stores do by their rows' ids.
        self.passages: list[tuple[int, Passage]] = []

    @property
    def info(self) -> SessionInfo:
        return SessionInfo(self.header, self.owner, self.index.head, self.touched)

    @property
    def closed(self) -> bool:
        return self.header.closedAt is not msgspec.UNSET


class MemoryStore(HistoryStore):
    """Keeps every session in process memory; nothing survives a restart."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._written = 0
        self.streams = MemoryStreams()

    def _session(self, session_id: str, life: Life | None = None) -> _Session:
        try:
            session = self._sessions[session_id]
        except KeyError:
            raise SessionNotFoundError(session_id) from None
        check_life(session_id, life, session.header, session.owner)
        return session

    async def create_session(self, header: SessionHeader, *, owner: str = DEFAULT_OWNER) -> SessionInfo:
        if header.id in self._sessions:
            raise SessionExistsError(header.id)
        header = incarnated(header)
        session = self._sessions[header.id] = _Session(header, owner)
        return session.info

    async def get_session(self, session_id: str) -> SessionInfo:
        return self._session(session_id).info

    async def append(self, session_id: str, events: Sequence[Event], *, life: Life | None = None) -> AppendResult:
        session = self._session(session_id, life)
        index = session.index
        plan = plan_batch(session_id, [event.seq for event in events], index.head, closed=session.closed)
        if plan.resend:
            first, last = index.covering(plan.first_seq, plan.to_seq)
            stored = events_in(index.records[first:last], plan.first_seq, plan.to_seq)
            confirm_resend(session_id, events, stored, index.head, closed=session.closed)
        if plan.writes:
            batch = prepare_batch(events)
            tail = index.open
            keep, records = plan_append(tail, batch.records, list)
            index.add(len(index.records) - len(tail) + keep, records, batch.messages, batch.hidden)
            index.open = next_open_run(tail[:keep], records)
            session.synopsis = applied(session.synopsis, batch.synopsis)
            rewritten, new = joined(session.passages[-1][1] if session.passages else None, batch.passages)
            if rewritten is not None:
                session.passages[-1] = (session.passages[-1][0], rewritten)
            for passage in new:
                self._written += 1
                session.passages.append((self._written, passage))
            session.touched = now_ms()
        return AppendResult.of(plan)

    async def close_session(self, session_id: str, *, closed_at: int, life: Life | None = None) -> SessionInfo:
        session = self._session(session_id, life)
        if not session.closed:
            session.header = msgspec.structs.replace(session.header, closedAt=closed_at)
            session.touched = now_ms()
        return session.info

    async def delete_session(self, session_id: str, *, life: Life | None = None) -> list[str]:
        self._session(session_id, life)
        children: dict[str, list[str]] = {}
        for session in self._sessions.values():
            parent = subagent_parent(session.header)
            if parent is not None:
                children.setdefault(parent, []).append(session.header.id)
        deleted = subtree(session_id, lambda parent: children.get(parent, ()))
        for gone in deleted:
            del self._sessions[gone]
        return deleted

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        index = self._session(session_id).index
        first, last = index.covering(from_seq, to_seq)
        return index.records[first:last]

    async def page_cuts(self, session_id: str, *, to_seq: int, max_messages: int) -> list[int]:
        return self._session(session_id).index.messages.cuts(to_seq, max_messages)

    async def children(self, parent_id: str) -> list[SessionHeader]:
        return sorted(
            (
                s.header
                for s in self._sessions.values()
                if s.header.parentSession == parent_id and s.header.origin == "subagent"
            ),
            key=lambda header: header.id,
        )

    def _listed(self, owner: str, closed: bool | None, match: str | None) -> list[_Session]:
        return [
            s
            for s in self._sessions.values()
            if s.owner == owner
            and subagent_parent(s.header) is None
            and in_listing(s.header, closed)
            and matches(s.header.id, s.synopsis.title, match)
        ]

    async def list_sessions(
        self,
        owner: str,
        *,
        limit: int,
        before: SessionKey | None = None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> list[SessionSummary]:
        parents = Counter(subagent_parent(s.header) for s in self._sessions.values())
        mine = (s.header for s in self._listed(owner, closed, match))
        return [
            SessionSummary(
                header.id,
                header.createdAt,
                (session := self._sessions[header.id]).index.head,
                parents[header.id],
                closed_at_of(header),
                expires_at_of(header),
                session.touched,
                session.synopsis,
            )
            for header in newest_first(mine, limit=limit, before=before)
        ]

    async def count_sessions(
        self,
        owner: str,
        *,
        now: int,
        retention_ms: int | None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> int:
        listed = self._listed(owner, closed, match)
        return sum(alive(expires_at_of(s.header), s.touched, retention_ms, now) for s in listed)

    async def synopsis(self, session_id: str) -> Synopsis:
        return self._session(session_id).synopsis

    async def search(self, request: SearchRequest) -> SearchPage:
        """A scan of every passage of the owner's live sessions, newest first, in a worker thread."""
        mine = [
            (session.header.id, subagent_parent(session.header), session.synopsis.title, list(session.passages))
            for session in self._sessions.values()
            if session.owner == request.owner
            and in_listing(session.header, request.closed)
            and alive(expires_at_of(session.header), session.touched, request.retention_ms, request.now)
        ]
        return await anyio.to_thread.run_sync(_scan, request, mine)

    async def reindex(self) -> int:
        """Memory keeps its passages beside its records, never apart from them: nothing to rebuild."""
        return sum(len(session.passages) for session in self._sessions.values())

    async def expired(
        self, *, now: int, retention_ms: int | None, limit: int | None, skip: Collection[str] = ()
    ) -> list[str]:
        found: list[str] = []
        for session in self._sessions.values():
            if len(found) == limit:
                break
            at = expiry(expires_at_of(session.header), session.touched, retention_ms)
            if at is not None and at <= now and session.header.id not in skip:
                found.append(session.header.id)
        return found

    async def check_ready(self) -> None:
        # Memory is there for as long as the process is.
        return None

    async def close(self) -> None:
        self._sessions.clear()


def _scan(
    request: SearchRequest, sessions: list[tuple[str, str | None, str | None, list[tuple[int, Passage]]]]
) -> SearchPage:
    """The page of `MemoryStore.search` from a copy of the owner's sessions: the latest written first."""
    matched = []
    for session_id, parent, title, passages in sessions:
        for written, passage in passages:
            if request.since is not None and passage.time < request.since:
                continue
            if request.until is not None and passage.time >= request.until:
                continue
            if marks(request.query, passage.text):
                matched.append((-written, (session_id, parent, title, passage)))
    matched.sort(key=lambda entry: entry[0])
    end = request.offset + request.limit
    hits = [
        hit(request, session_id, parent, title, passage.seq, passage.kind, passage.time, passage.text)
        for _, (session_id, parent, title, passage) in matched[request.offset : end]
    ]
    return SearchPage(hits, len(matched) > end)

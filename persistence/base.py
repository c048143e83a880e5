"""The store contract (docs/protocol.md §6-§7), shared by every backend.

A backend implements a few primitives over *stored records* (`codec.StoredRecord`: each
record's canonical JSON line and its join columns); the service splices pages from them
(`codec.splice`), the same way for every backend, so that the same session gives
byte-identical pages from any store. Appends seal runs as they close (`persistence.sealing`).
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Final

import msgspec
from msgspec import UNSET, Struct

from codec import Event, SessionHeader, StoredRecord, decode_event, event_lines, incarnation_of, new_incarnation
from persistence.errors import SearchUnsupportedError
from persistence.notify import HeadListener
from persistence.page_bound import bounded_cuts, floor_sizes, within
from persistence.rules import BatchPlan, Life, PageSpan, page_span
from persistence.search import SearchPage, SearchRequest
from persistence.synopsis import EMPTY, Synopsis

if TYPE_CHECKING:
    from persistence.streams.base import StreamStore

__all__ = [
    "DEFAULT_OWNER",
    "DEFAULT_SESSION_CACHE",
    "DEFAULT_STORE_TIMEOUT",
    "TOUCH_MS",
    "AppendResult",
    "HistoryStore",
    "PageRead",
    "SessionInfo",
    "SessionKey",
    "SessionSummary",
    "bound_read",
    "closed_at_of",
    "events_in",
    "expires_at_of",
    "subtree",
    "in_listing",
    "incarnated",
    "newest_first",
    "sole_sweeper",
    "subagent_parent",
]

DEFAULT_OWNER: Final = "local"
# How many idle sessions' state a store or service keeps by default (see `persistence.state.Lru`).
DEFAULT_SESSION_CACHE: Final = 10_000
# How far ``touched_at`` may lag a session's last write, in ms: a store may skip rewriting it
# sooner (PostgreSQL then updates an appended row in place, without touching its indexes).
TOUCH_MS: Final = 1000
# Seconds a store call may take by default before it fails with `StoreError` (the SQL store's bound).
DEFAULT_STORE_TIMEOUT: Final = 5.0


class SessionInfo(Struct, frozen=True):
    """A session's header, owner principal and head seq (-1 when empty).

    A closed session's header holds its ``closedAt`` (`HistoryStore.close_session`).
    ``touched_at`` is when it was last written, in epoch ms by the writing process's clock:
    created, appended to, or closed, at most `TOUCH_MS` before the last append (0 where the
    reader did not ask the store).
    """

    header: SessionHeader
    owner: str
    head_seq: int
    touched_at: int = 0

    @property
    def closed(self) -> bool:
        return self.header.closedAt is not UNSET

    @property
    def incarnation(self) -> str:
        """The session's incarnation (docs/protocol.md §2.5): its header's, or the one derived for it."""
        return incarnation_of(self.header)

    @property
    def life(self) -> Life:
        """The life of the id this session is: what a write checked against it names (`persistence.rules.Life`)."""
        return Life(self.incarnation, self.owner)


class SessionKey(Struct, frozen=True, order=True):
    """A session's place in a listing: keys compare as ``(created_at, id)`` tuples do."""

    created_at: int
    id: str


class SessionSummary(Struct, frozen=True):
    """One entry of `HistoryStore.list_sessions`.

    ``created_at`` is the header's ``createdAt``; ``head_seq`` is -1 for an empty session;
    ``child_count`` counts the direct subagent children (see `subagent_parent`), whoever owns them;
    ``closed_at`` is the header's ``closedAt``, ``None`` while the session is open;
    ``expires_at`` the header's ``expiresAt``, and ``touched_at`` as `SessionInfo`'s;
    ``synopsis`` its title, last event's time and tokens (`persistence.synopsis`).
    """

    id: str
    created_at: int
    head_seq: int
    child_count: int
    closed_at: int | None = None
    expires_at: int | None = None
    touched_at: int = 0
    synopsis: Synopsis = EMPTY

    @property
    def key(self) -> SessionKey:
        """The ``before`` that continues a listing after this session."""
        return SessionKey(self.created_at, self.id)


class AppendResult(Struct, frozen=True):
    """The outcome of an append: the head after it, and whether it was an exact re-send."""

    first_seq: int
    head_seq: int
    idempotent: bool = False

    @classmethod
    def of(cls, plan: BatchPlan) -> AppendResult:
        """The outcome of carrying out ``plan`` (`persistence.rules.plan_batch`)."""
        return cls(plan.first_seq, plan.head_seq, idempotent=plan.resend)


class PageRead(Struct, frozen=True):
    """What a page needs from the store, read at once: the session, the page's end, its candidate starts and records.

    ``to_seq`` is the exclusive end (`persistence.rules.page_span`). ``cuts`` are the
    candidate starts, newest first, and ``stored`` covers the oldest of them; both are empty
    when the page is empty (``to_seq <= 0``) or when ``through`` is beyond the head, which
    the page reader refuses: ``beyond_head`` (`persistence.rules.PageSpan.beyond_head`), so
    that the span the store computed is the one the reader judges.
    """

    info: SessionInfo
    to_seq: int
    cuts: list[int]
    stored: list[StoredRecord]
    beyond_head: bool = False

    @classmethod
    def unread(cls, info: SessionInfo, span: PageSpan) -> PageRead:
        """The read of a page whose span has nothing to read (``not span.reads``)."""
        return cls(info, span.to_seq, [], [], span.beyond_head)


def closed_at_of(header: SessionHeader) -> int | None:
    """The header's ``closedAt``, or ``None`` while the session is open."""
    return None if header.closedAt is UNSET else header.closedAt


def expires_at_of(header: SessionHeader) -> int | None:
    """The header's ``expiresAt``, or ``None`` when its creator set none."""
    return None if header.expiresAt is UNSET else header.expiresAt


def incarnated(header: SessionHeader) -> SessionHeader:
    """``header`` as a store creates it: with a fresh incarnation unless it names one (an imported log's)."""
    if header.incarnation is not UNSET:
        return header
    return msgspec.structs.replace(header, incarnation=new_incarnation())


def in_listing(header: SessionHeader, closed: bool | None) -> bool:
    """Whether a listing that keeps only closed (``True``) or open (``False``) sessions, or all (``None``), keeps it."""
    return closed is None or (header.closedAt is not UNSET) == closed


def subtree(root: str, children: Callable[[str], Iterable[str]]) -> list[str]:
    """``root`` and every session below it (``children(id)`` gives an id's direct children), parents before children."""
    found, seen, at = [root], {root}, 0
    while at < len(found):
        for child in children(found[at]):
            if child not in seen:
                seen.add(child)
                found.append(child)
        at += 1
    return found


def subagent_parent(header: SessionHeader) -> str | None:
    """The parent's id for a subagent child (``origin == "subagent"`` and a ``parentSession``), else ``None``."""
    if header.origin == "subagent" and isinstance(header.parentSession, str):
        return header.parentSession
    return None


def newest_first(headers: Iterable[SessionHeader], *, limit: int, before: SessionKey | None) -> list[SessionHeader]:
    """At most ``limit`` of ``headers``, by ``(createdAt, id)`` descending, keeping only keys below ``before``.

    The listing order of `HistoryStore.list_sessions`, for stores that order in Python.
    """
    if before is not None:
        bound = (before.created_at, before.id)
        headers = (header for header in headers if (header.createdAt, header.id) < bound)
    return heapq.nlargest(limit, headers, key=lambda header: (header.createdAt, header.id))


def bound_read(
    cuts: list[int], to_seq: int, stored: list[StoredRecord], sizes: Sequence[int], max_bytes: int
) -> tuple[list[int], list[StoredRecord]]:
    """The cuts whose pages may fit ``max_bytes``, and the records of ``stored`` (covering every cut) they need."""
    if within(sizes, max_bytes):
        return cuts, stored
    kept = bounded_cuts(cuts, to_seq, stored, floor_sizes(stored, sizes), max_bytes)
    if len(kept) == len(cuts):
        return cuts, stored
    first = max(0, bisect.bisect_right([record.seq for record in stored], kept[-1]) - 1)
    return kept, stored[first:]


def events_in(stored: Sequence[StoredRecord], from_seq: int, to_seq: int) -> list[Event]:
    """The logical events in ``[from_seq, to_seq)`` from stored records that cover it."""
    return [decode_event(line) for _, lines in event_lines(stored, from_seq, to_seq) for line in lines]


class HistoryStore(ABC):
    """An async session store. Every method may raise `persistence.errors.StoreError` subclasses.

    ``streams`` are the generic Durable Streams the store keeps beside its sessions
    (docs/protocol.md §13), or ``None`` where it keeps none.
    """

    streams: StreamStore | None = None

    @abstractmethod
    async def create_session(self, header: SessionHeader, *, owner: str = DEFAULT_OWNER) -> SessionInfo:
        """Create an empty session; raise `SessionExistsError` if the id is taken.

        The session gets a fresh incarnation (`incarnated`) unless the header names one.
        """

    @abstractmethod
    async def get_session(self, session_id: str) -> SessionInfo:
        """The header, owner and head seq; raise `SessionNotFoundError` for an unknown id."""

    @abstractmethod
    async def append(self, session_id: str, events: Sequence[Event], *, life: Life | None = None) -> AppendResult:
        """Append a dense batch atomically: all of it is stored, or none.

        The first seq must be ``head + 1``; a batch already stored byte for byte in its
        logical events is an idempotent re-send; anything else raises `SeqConflictError`
        carrying the head. The batch is packed into chunk rows before it is stored.

        With ``life``, as every write takes it, the write acts on that life of the id alone:
        checked in the write's own transaction, or under its lock, in whatever process, so
        that an id deleted since (and perhaps created again, by anyone) raises
        `SessionNotFoundError` and changes nothing (`persistence.rules.check_life`).
        ``None`` acts on whichever life holds the id (the CLI's writes by id).
        """

    @abstractmethod
    async def close_session(self, session_id: str, *, closed_at: int, life: Life | None = None) -> SessionInfo:
        """Close the session (docs/protocol.md §6.3): its header gains ``closedAt``, and it takes no more appends.

        Idempotent: closing a closed session changes nothing, and its ``closedAt`` stays the
        first close's. Raises `SessionNotFoundError` for an unknown id, or another life than
        ``life`` (as `append`). A close and an append to the same session are ordered: the
        append either lands before the close or is refused with `SessionClosedError`.
        """

    @abstractmethod
    async def delete_session(self, session_id: str, *, life: Life | None = None) -> list[str]:
        """Delete the session and its whole subagent tree (docs/protocol.md §6.4); the ids deleted, its own first.

        Durable when it returns, and atomic per session on a crash: each session of the tree
        is afterwards whole or gone. The ids may then be created again, as new incarnations.
        Raises `SessionNotFoundError` for an unknown id, or another life than ``life`` (as
        `append`): a second delete of a life never deletes the next one.
        """

    @abstractmethod
    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> list[StoredRecord]:
        """The stored records covering ``[from_seq, to_seq)`` in seq order, including a row that starts before it.

        Reads touch only those records, never the whole session; an unknown session raises
        `SessionNotFoundError`.
        """

    @abstractmethod
    async def page_cuts(self, session_id: str, *, to_seq: int, max_messages: int) -> list[int]:
        """Candidate page starts for a page ending at ``to_seq``, newest first (see `select_cuts`)."""

    @abstractmethod
    async def children(self, parent_id: str) -> list[SessionHeader]:
        """Headers of the direct subagent children of ``parent_id`` (``origin == "subagent"``), by id."""

    @abstractmethod
    async def list_sessions(
        self,
        owner: str,
        *,
        limit: int,
        before: SessionKey | None = None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> list[SessionSummary]:
        """A page of ``owner``'s sessions, newest first; only its closed (or open) ones when ``closed`` is set.

        Returns at most ``limit`` sessions (none when ``limit < 1``) owned by ``owner`` that are
        not subagent children (see `subagent_parent`), ordered by ``(createdAt, id)`` descending.
        ``before`` is exclusive: pass the `SessionSummary.key` of the previous page's last
        session, and successive pages list every session exactly once, even when ``createdAt``
        values tie. ``child_count`` counts every direct subagent child whatever its owner: the
        parent's owner creates children through the API, so the count is the parent's business.
        Ids compare by code point, as Python compares ``str``, in every backend. With ``match``,
        only the sessions `persistence.synopsis.matches` keeps: its id or title holds it, case-folded.
        Each session's ``synopsis`` is the one its appends kept.
        """

    @abstractmethod
    async def count_sessions(
        self,
        owner: str,
        *,
        now: int,
        retention_ms: int | None,
        closed: bool | None = None,
        match: str | None = None,
    ) -> int:
        """How many sessions `list_sessions` lists with ``closed`` and ``match``, less those expired at ``now``.

        A session counts unless its own expiry time (`persistence.rules.expiry`, under
        ``retention_ms``) is at or before ``now``: the rule of `expired`, read from the same rows.
        """

    @abstractmethod
    async def synopsis(self, session_id: str) -> Synopsis:
        """The session's synopsis (`persistence.synopsis`); `SessionNotFoundError` for an unknown id."""

    @abstractmethod
    async def expired(
        self, *, now: int, retention_ms: int | None, limit: int | None, skip: Collection[str] = ()
    ) -> list[str]:
        """Up to ``limit`` (``None``: all) ids of sessions expired at ``now`` (`persistence.rules.expiry`).

        None of ``skip``, in no particular order; a child may be listed apart from its parent.
        Reads only the sessions' rows, headers or file times, never their records.
        """

    async def search(self, request: SearchRequest) -> SearchPage:
        """A page of the passages (`persistence.search.passages`) of ``request.owner``'s live sessions that match
        ``request.query``, best first (docs/protocol.md §14).

        A session's passages are written with the append they come from, and answer for no
        other incarnation of its id: a deleted or expired session's never answer again. A store
        that keeps no index raises `SearchUnsupportedError`.
        """
        raise SearchUnsupportedError(f"{type(self).__name__} keeps no search index")

    async def reindex(self) -> int:
        """Rebuild the search index from every session's stored events; how many passages it holds then.

        A store that keeps no index raises `SearchUnsupportedError`.
        """
        raise SearchUnsupportedError(f"{type(self).__name__} keeps no search index")

    def sweeping(self) -> AbstractAsyncContextManager[bool]:
        """Whether this process may sweep expired sessions now: ``True`` unless another sweeps (`expired`).

        A store that several processes share holds a lock for as long as the context is open.
        """
        return sole_sweeper()

    async def recover(self) -> None:
        """Finish, in the sweep's turn, what a process that died left half done; here, nothing."""
        return None

    async def read_page(
        self,
        session_id: str,
        *,
        through: int | None,
        before: int | None,
        max_messages: int,
        max_bytes: int | None = None,
    ) -> PageRead:
        """The session and, unless the page is empty or ``through`` is beyond the head, its cuts and records.

        With ``max_bytes``, the cuts stop at the first whose page cannot fit it
        (`persistence.page_bound`), and only their records are read. Raises
        `SessionNotFoundError` for an unknown id. Backends override this to read it all in
        one round trip, and to size records before reading them; this composition of the
        primitives is the reference.
        """
        info = await self.get_session(session_id)
        span = page_span(info.head_seq, through, before)
        if not span.reads:
            return PageRead.unread(info, span)
        to_seq = span.to_seq
        cuts = await self.page_cuts(session_id, to_seq=to_seq, max_messages=max_messages)
        stored = await self.read_stored(session_id, cuts[-1], to_seq)
        if max_bytes is not None:
            cuts, stored = bound_read(cuts, to_seq, stored, [len(record.line) for record in stored], max_bytes)
        return PageRead(info, to_seq, cuts, stored)

    @abstractmethod
    async def check_ready(self) -> None:
        """A readiness probe: read from the store as a request would, cheaply; raise `StoreError` saying why not.

        It must reach the store itself (its files through their paths, the database through a
        connection that works now), not only what this process keeps, so a store that has gone
        away is found out even while connections opened before it went still read.
        """

    async def size(self) -> int | None:
        """The bytes the store takes on disk, where it can tell (``None`` for memory)."""
        return None

    async def vacuum(self) -> None:
        """Give the space that deleted sessions freed back to the file system, where the store keeps it."""
        return None

    def listener(self) -> HeadListener | None:
        """Head notices from other processes that append to this store, or ``None`` when no other process can.

        A store that several processes share must offer one, or their followers miss each other's appends.
        """
        return None

    @abstractmethod
    async def close(self) -> None:
        """Release the store's resources. The store is unusable afterwards."""

    async def head_seq(self, session_id: str) -> int:
        """The last stored seq, or -1 for an empty session."""
        return (await self.get_session(session_id)).head_seq

    async def read_events(self, session_id: str, from_seq: int, to_seq: int) -> list[Event]:
        """The exact logical events ``from_seq .. to_seq - 1`` (clipped to the head)."""
        if to_seq <= from_seq:
            await self.get_session(session_id)
            return []
        return events_in(await self.read_stored(session_id, from_seq, to_seq), from_seq, to_seq)


@contextlib.asynccontextmanager
async def sole_sweeper() -> AsyncIterator[bool]:
    """`HistoryStore.sweeping` of a store that one process writes: it may always sweep."""
    yield True

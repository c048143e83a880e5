"""The JSON bodies of the HTTP API that the codec has no Struct for, as msgspec Structs (docs/protocol.md §6, §11, §12).

The endpoints build these bodies as plain values, or splice them from stored bytes, so
nothing decodes them on the server; these Structs state their shape once, for the OpenAPI
document (`history_service.openapi`) and for tests that decode real responses with them.
Requests, pages and snapshots keep the codec's own Structs (`codec.SessionHeader`,
`codec.Page`, `codec.FollowSnapshot`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

import persistence
from codec import INCARNATION_PATTERN, MAX_SAFE_INTEGER, MAX_SESSION_ID, SESSION_ID_CHARS, SessionHeader
from persistence import MAX_TITLE, SessionInfo, SessionSummary, Synopsis

__all__ = [
    "AppendBody",
    "Appended",
    "ErrorBody",
    "ErrorDetail",
    "FollowError",
    "Health",
    "Head",
    "ListedSession",
    "Readiness",
    "SessionCreated",
    "SessionId",
    "SessionList",
    "SearchHit",
    "SearchHits",
    "SessionState",
    "Usage",
]

# docs/protocol.md §2.4; the ids "." and ".." match this too, and are refused all the same.
SessionId = Annotated[str, Meta(min_length=1, max_length=MAX_SESSION_ID, pattern=rf"^[{SESSION_ID_CHARS}]+$")]
Head = Annotated[int, Meta(ge=-1, le=MAX_SAFE_INTEGER)]
Seq = Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)]
Count = Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)]
# When a session expires (§6.5), in epoch ms: the sooner of its own expiresAt and the store's retention.
Expiry = Annotated[
    int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER, description="When it expires (§6.5), epoch ms.")
]
Title = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_TITLE,
        description="Its last `session/title`, else its first user message, on one line (§12.1).",
    ),
]
EventTime = Annotated[
    int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER, description="Its last event's `time` (§12.1).")
]


class Usage(Struct, frozen=True, forbid_unknown_fields=True):
    """The tokens a session's events report, summed (§12.1)."""

    inputTokens: Count
    outputTokens: Count


def _synopsis(synopsis: Synopsis) -> tuple[str | UnsetType, int | UnsetType, Usage | UnsetType]:
    """A synopsis as a body's ``title``, ``lastEventAt`` and ``usage``, each left out when it has none."""
    tokens = (synopsis.input_tokens, synopsis.output_tokens)
    return (
        UNSET if synopsis.title is None else synopsis.title,
        UNSET if synopsis.last_event_at is None else synopsis.last_event_at,
        Usage(*tokens) if any(tokens) else UNSET,
    )


class AppendBody(Struct, frozen=True, forbid_unknown_fields=True):
    """An append body: storage records, each a logical event or a chunk row, told apart by ``type``."""

    events: Annotated[list[msgspec.Raw], Meta(min_length=1)]


class SessionCreated(Struct, frozen=True, forbid_unknown_fields=True):
    """``201`` to a create: the new session's id, its head (-1 while it has no event), and its incarnation (§2.5)."""

    id: SessionId
    headSeq: Literal[-1]
    incarnation: Annotated[str, Meta(pattern=INCARNATION_PATTERN)]


class Appended(Struct, frozen=True, forbid_unknown_fields=True):
    """An append's answer: the batch's first seq and the new head; ``idempotent`` marks an exact re-send (``200``)."""

    firstSeq: Seq
    headSeq: Seq
    idempotent: Literal[True] | UnsetType = UNSET


class Closed(Struct, frozen=True, forbid_unknown_fields=True):
    """A close's answer: the final head (-1 when empty) and when the session was first closed (ms)."""

    headSeq: Head
    closedAt: int

    @classmethod
    def of(cls, info: SessionInfo) -> Closed:
        """The answer for a session `HistoryStore.close_session` returned."""
        assert isinstance(info.header.closedAt, int), "a closed session's header holds closedAt"
        return cls(info.head_seq, info.header.closedAt)


class FollowEnd(Struct, frozen=True, forbid_unknown_fields=True):
    """The data of the ``end`` frame, the last of a closed session's follow stream, after its last event."""

    code: Literal["session_closed"]
    headSeq: Head


class ListedSession(Struct, frozen=True, forbid_unknown_fields=True):
    """One session of a listing: its id, creation time, head, number of direct subagent children, close time,
    when it expires, and its synopsis (title, last event's time, tokens)."""

    id: SessionId
    createdAt: Annotated[int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
    headSeq: Head
    childCount: Count
    closedAt: Annotated[int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)] | UnsetType = UNSET
    expiresAt: Expiry | UnsetType = UNSET
    title: Title | UnsetType = UNSET
    lastEventAt: EventTime | UnsetType = UNSET
    usage: Usage | UnsetType = UNSET

    @classmethod
    def of(cls, summary: SessionSummary) -> ListedSession:
        """The entry of a summary whose ``expires_at`` is when it expires (`Listing.sessions`)."""
        closed = UNSET if summary.closed_at is None else summary.closed_at
        expires = UNSET if summary.expires_at is None else summary.expires_at
        return cls(
            summary.id,
            summary.created_at,
            summary.head_seq,
            summary.child_count,
            closed,
            expires,
            *_synopsis(summary.synopsis),
        )


class SessionList(Struct, frozen=True, forbid_unknown_fields=True):
    """A page of a listing, newest first: the caller's top-level sessions, or one session's subagent children.

    ``nextCursor`` continues the listing (``null``: no more); ``total`` is how many sessions
    the whole listing holds, under the same ``state`` and ``q``.
    """

    sessions: list[ListedSession]
    nextCursor: str | None
    total: Count


class SessionState(Struct, frozen=True, forbid_unknown_fields=True):
    """A session's header and head (``headSeq``, -1 while it has no event), when it expires (§6.5), and its
    synopsis, as a listing gives it (§12.1)."""

    header: SessionHeader
    headSeq: Head
    expiresAt: Expiry | UnsetType = UNSET
    title: Title | UnsetType = UNSET
    lastEventAt: EventTime | UnsetType = UNSET
    usage: Usage | UnsetType = UNSET

    @classmethod
    def of(cls, info: SessionInfo, expires_at: int | None, synopsis: Synopsis) -> SessionState:
        return cls(info.header, info.head_seq, UNSET if expires_at is None else expires_at, *_synopsis(synopsis))


class Health(Struct, frozen=True, forbid_unknown_fields=True):
    """``GET /healthz``: the process serves requests."""

    status: Literal["ok"]


class Readiness(Struct, frozen=True, forbid_unknown_fields=True):
    """``GET /readyz``: ready when the store answers and follow hears every append (``in-process`` or ``listening``).

    ``reason`` says, for people, why not.
    """

    status: Literal["ready", "not_ready"]
    store: Literal["ok", "unavailable"]
    notifier: Literal["in-process", "listening", "connecting", "reconnecting"]
    reason: str | UnsetType = UNSET


class ErrorDetail(Struct, frozen=True, forbid_unknown_fields=True):
    """``code`` is stable and clients branch on it; ``message`` is for people.

    ``headSeq`` comes with ``seq_conflict``, ``index`` (the item of ``events`` at fault) with ``invalid_event``.
    """

    code: str
    message: str
    headSeq: Head | UnsetType = UNSET
    index: Count | UnsetType = UNSET


class ErrorBody(Struct, frozen=True, forbid_unknown_fields=True):
    """Every error response: ``{"error": {"code", "message", ...}}``."""

    error: ErrorDetail


class FollowError(Struct, frozen=True, forbid_unknown_fields=True):
    """The data of the ``error`` frame that ends a follow stream.

    ``cursor_ahead`` with ``headSeq``: the resume cursor is past the head. ``session_deleted``:
    the session is gone (§6.4); do not retry. Any other code is an error of §11
    (``store_unavailable``) that broke the stream after it opened; retry later.
    """

    code: str
    headSeq: Head | UnsetType = UNSET


class SearchHit(Struct, frozen=True, forbid_unknown_fields=True):
    """A passage that matched a search (§14.1): its session (and the session's parent, for a subagent child), the
    session's title, the seq of its first event (a page opens at it with ``through=``), its kind and time, its
    snippet (even positions plain text, odd ones matched) and its rank (higher first; only its order means
    anything)."""

    session: SessionId
    seq: Seq
    kind: Literal["user", "assistant", "reasoning", "tool_call", "tool_result", "title"]
    time: Annotated[int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
    snippet: list[str]
    rank: float
    parent: SessionId | UnsetType = UNSET
    title: Title | UnsetType = UNSET

    @classmethod
    def of(cls, found: persistence.SearchHit) -> SearchHit:
        parent = UNSET if found.parent_id is None else found.parent_id
        title = UNSET if found.title is None else found.title
        return cls(found.session_id, found.seq, found.kind, found.time, found.snippet, found.rank, parent, title)  # type: ignore[arg-type]


class SearchHits(Struct, frozen=True, forbid_unknown_fields=True):
    """A page of a search's hits, the latest written first; ``nextCursor`` continues it (``null``: no more)."""

    hits: list[SearchHit]
    nextCursor: str | None

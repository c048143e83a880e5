"""A search as a store answers it (docs/protocol.md §14.1): the request, its hits and the page of them."""

from __future__ import annotations

from typing import Final

from msgspec import Struct

from persistence.search.matching import marks
from persistence.search.query import Query
from persistence.search.snippets import snippet

__all__ = ["MAX_LIMIT", "MAX_OFFSET", "SearchHit", "SearchPage", "SearchRequest", "hit"]

# The most hits a page holds, and how deep into the ranking pages may go.
MAX_LIMIT: Final = 100
MAX_OFFSET: Final = 1000


class SearchRequest(Struct, frozen=True, kw_only=True):
    """A page of the hits of ``query`` in ``owner``'s live sessions, children included, latest written first.

    ``closed`` keeps only closed (or open) sessions; ``since`` and ``until`` keep passages whose
    first event's time is in ``[since, until)``. ``now`` and ``retention_ms`` say which sessions
    have expired (`persistence.rules.alive`): those answer no more.
    """

    owner: str
    query: Query
    limit: int
    offset: int = 0
    closed: bool | None = None
    since: int | None = None
    until: int | None = None
    now: int
    retention_ms: int | None = None


class SearchHit(Struct, frozen=True):
    """A passage that matched: its session (and that session's parent, for a child), the session's title, the
    seq of its first event, its kind and time, its snippet (`persistence.search.snippets`), and its rank: how
    many times the query matched in the passage (a store orders hits latest written first, not by rank)."""

    session_id: str
    parent_id: str | None
    title: str | None
    seq: int
    kind: str
    time: int
    snippet: list[str]
    rank: float


class SearchPage(Struct, frozen=True):
    """The hits of a page, latest written first, and whether more follow."""

    hits: list[SearchHit]
    more: bool


def hit(
    request: SearchRequest,
    session_id: str,
    parent_id: str | None,
    title: str | None,
    seq: int,
    kind: str,
    time: int,
    text: str,
) -> SearchHit:
    """A hit on a passage whose ``text`` a store matched: its snippet marked, and ranked by how many times the
    query matched in it, by the one rule (`found`)."""
    found = marks(request.query, text) or []
    return SearchHit(session_id, parent_id, title, seq, kind, time, snippet(text, found), float(len(found)))

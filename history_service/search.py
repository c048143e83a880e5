"""Search across a caller's sessions (docs/protocol.md §14): the query read, its cursor, and the store asked.

A search reads the caller's live sessions only, children included: the store joins every
passage to its session's row under the caller's principal, so another principal's
sessions never answer, nor count. A cursor names how far down the ranking the next page
starts, and the query it belongs to: given with another query, it is refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

import msgspec

from history_service import bodies
from history_service.errors import InvalidParameter
from history_service.expiry import Expiry
from history_service.params import SearchParams
from persistence import MAX_SEARCH_OFFSET, HistoryStore, SearchQueryError, SearchRequest, now_ms, parse_query

__all__ = ["Search"]


class Search:
    """The searches of one store, under its expiry rules."""

    def __init__(self, store: HistoryStore, expiry: Expiry) -> None:
        self.store = store
        self.expiry = expiry

    async def search(self, principal: str, params: SearchParams) -> bodies.SearchHits:
        """A page of the hits of ``params.q`` in ``principal``'s sessions; `InvalidParameter` for a bad query or cursor,
        `persistence.SearchUnsupportedError` from a store that keeps no index."""
        try:
            query = parse_query(params.q)
        except SearchQueryError as exc:
            raise InvalidParameter(str(exc)) from exc
        key = _fingerprint(params)
        offset = _offset(params.cursor, key)
        request = SearchRequest(
            owner=principal,
            query=query,
            limit=min(params.limit, MAX_SEARCH_OFFSET - offset),
            offset=offset,
            closed=None if params.state is None else params.state == "closed",
            since=params.since,
            until=params.until,
            now=now_ms(),
            retention_ms=self.expiry.retention_ms,
        )
        found = await self.store.search(request)
        end = offset + len(found.hits)
        more = found.more and end < MAX_SEARCH_OFFSET
        return bodies.SearchHits([bodies.SearchHit.of(hit) for hit in found.hits], _cursor(end, key) if more else None)


def _fingerprint(params: SearchParams) -> str:
    """What a cursor must be used with: the query and its filters, hashed."""
    said = msgspec.json.encode([params.q, params.state, params.since, params.until])
    return hashlib.blake2b(said, digest_size=6).hexdigest()


def _cursor(offset: int, key: str) -> str:
    return base64.urlsafe_b64encode(msgspec.json.encode([offset, key])).rstrip(b"=").decode()


def _offset(cursor: str | None, key: str) -> int:
    """How many hits a cursor says came before; `InvalidParameter` for one this query was not given."""
    if cursor is None:
        return 0
    forged = InvalidParameter("cursor is not a cursor this service returned for this query")
    try:
        decoded = msgspec.json.decode(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise forged from exc
    if not (type(decoded) is list and len(decoded) == 2 and type(decoded[0]) is int and decoded[1] == key):
        raise forged
    if not 0 < decoded[0] < MAX_SEARCH_OFFSET:
        raise forged
    return int(decoded[0])

"""Full-text search across sessions (docs/protocol.md §14): what is indexed, how a query reads, and its hits.

Pure rules; each store keeps the passages with the append they come from and matches a
query against them in its own way (`persistence.sql.search`, the memory store's scan).
"""

from persistence.search.hits import MAX_LIMIT, MAX_OFFSET, SearchHit, SearchPage, SearchRequest, hit
from persistence.search.passages import KINDS, MAX_EVENT_TEXT, MAX_PASSAGE, Passage, joined, of_batch, of_events
from persistence.search.query import MAX_QUERY, Clause, Query, fts5, parse, tsquery

__all__ = [
    "KINDS",
    "MAX_EVENT_TEXT",
    "MAX_LIMIT",
    "MAX_OFFSET",
    "MAX_PASSAGE",
    "MAX_QUERY",
    "Clause",
    "Passage",
    "Query",
    "SearchHit",
    "SearchPage",
    "SearchRequest",
    "fts5",
    "hit",
    "joined",
    "of_batch",
    "of_events",
    "parse",
    "tsquery",
]

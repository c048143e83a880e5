"""Matching (docs/protocol.md §14.2): what the memory store's scan finds, and where a snippet's marks go."""

from __future__ import annotations

from persistence.search.matching import found, tokens
from persistence.search.query import parse


def test_every_clause_must_match_and_marks_merge_where_they_touch() -> None:
    text = "Rate limit: the retry-after header"
    assert found(parse("limit retr*"), tokens(text)) == [(5, 10), (16, 21)]
    assert found(parse("limit absent"), tokens(text)) is None
    assert found(parse('"rate limit" limit'), tokens(text)) == [(0, 10)]
    assert found(parse("北京"), tokens("我在北京大学")) == [(2, 4)]
    assert found(parse("京北"), tokens("我在北京大学")) is None

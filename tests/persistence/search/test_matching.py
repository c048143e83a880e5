"""Matching (docs/protocol.md §14.2): what the memory store's scan finds, and where a snippet's marks go."""

from __future__ import annotations

from hypothesis import given, strategies as st

from persistence.search.matching import found, marks, tokens
from persistence.search.query import parse


def test_every_clause_must_match_and_marks_merge_where_they_touch() -> None:
    text = "Rate limit: the retry-after header"
    assert found(parse("limit retr*"), tokens(text)) == [(5, 10), (16, 21)]
    assert found(parse("limit absent"), tokens(text)) is None
    assert found(parse('"rate limit" limit'), tokens(text)) == [(0, 10)]
    assert found(parse("北京"), tokens("我在北京大学")) == [(2, 4)]
    assert found(parse("京北"), tokens("我在北京大学")) is None


@given(
    st.text(st.sampled_from("ab AB_-.é9 "), max_size=80),
    st.lists(st.text(st.sampled_from("abAB9é"), min_size=1, max_size=3), min_size=1, max_size=3),
    st.booleans(),
    st.booleans(),
)
def test_marks_on_ascii_text_are_the_marks_of_its_tokens(
    text: str, words: list[str], phrase: bool, prefix: bool
) -> None:
    q = (f'"{" ".join(words)}"' if phrase else " ".join(words)) + ("*" if prefix and not phrase else "")
    query = parse(q)
    assert marks(query, text) == found(query, tokens(text))
    long = "x" * 100
    assert marks(parse("x" * 70), long) == found(parse("x" * 70), tokens(long)) == [(0, 100)]

"""Queries (docs/protocol.md §14.1): plain words, phrases and prefixes, never a store's syntax."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from persistence.errors import SearchQueryError
from persistence.search.query import MAX_QUERY, Clause, Query, fts5, parse, tsquery
from persistence.search.terms import folded_tokens


def test_words_phrases_and_prefixes() -> None:
    assert parse('Rate "retry after" back*') == Query(
        (Clause(("rate",)), Clause(("retry", "after")), Clause(("back",), prefix=True))
    )
    assert parse("retry.py 北京") == Query((Clause(("retry", "py")), Clause(("北", "京"))))
    # A prefix of one character, or of a single unspaced character, is a whole word.
    assert parse("a* 北*") == Query((Clause(("a",)), Clause(("北",))))
    # A quote with no partner runs to the end.
    assert parse('"rate lim') == Query((Clause(("rate", "lim")),))


def test_store_syntax_is_plain_text() -> None:
    query = parse('NEAR(a b) OR "x" AND -y^ col:z * () " ')
    assert all(token.isalnum() for clause in query.clauses for token in clause.tokens)
    assert fts5(query) == '"near a" AND "b" AND "or" AND "x" AND "and" AND "y" AND "col z"'
    assert tsquery(parse("rate lim*")) == "('rate') & ('lim':*)"
    assert tsquery(parse('"rate limit"')) == "('rate' <-> 'limit')"


@pytest.mark.parametrize(
    ("q", "message"),
    [
        ("", "no word"),
        ('*** "" ( ) \x00\x1f', "no word"),
        ("x" * (MAX_QUERY + 1), "at most 1000"),
        (" ".join(f"w{n}" for n in range(17)), "too many words"),
        ('"' + " ".join(f"w{n}" for n in range(65)) + '"', "too many words"),
    ],
)
def test_a_query_with_nothing_to_search_or_too_much_is_refused(q: str, message: str) -> None:
    with pytest.raises(SearchQueryError, match=message):
        parse(q)


@given(st.text(max_size=200))
def test_any_query_parses_to_tokens_or_is_refused_and_renders_safely(q: str) -> None:
    try:
        query = parse(q)
    except SearchQueryError:
        assert not folded_tokens(q) or len(q.split()) > 16 or len(folded_tokens(q)) > 64
        return
    rendered = fts5(query)
    for clause in query.clauses:
        assert all(token and token == folded_tokens(token)[0] for token in clause.tokens)
    # Each clause is a quoted phrase of tokens: nothing else reaches FTS5.
    assert rendered.count('"') == 2 * len(query.clauses)

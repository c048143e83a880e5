"""A search query (docs/protocol.md §14.1): what a person types, read as plain words, never as a store's syntax.

``q`` holds words, ``"quoted phrases"`` and ``prefix*`` terms; a passage matches when it
holds every one of them. A word is its tokens (`persistence.search.terms`): ``retry.py``
is the phrase ``retry py``, and a Chinese word is the phrase of its characters, so it
is found wherever those characters stand together. Anything else (FTS5 or ``tsquery``
operators, parentheses, a lone quote, control characters) separates words and means
nothing more: a query is rendered for each store from its tokens alone, which hold only
letters and digits.
"""

from __future__ import annotations

import re
from typing import Final

from msgspec import Struct

from persistence.errors import SearchQueryError
from persistence.search.terms import folded_tokens, lexeme

__all__ = ["MAX_CLAUSES", "MAX_QUERY", "MAX_TOKENS", "Clause", "Query", "fts5", "parse", "tsquery"]

# The longest ``q``, in characters, and the most clauses and tokens it may hold.
MAX_QUERY: Final = 1000
MAX_CLAUSES: Final = 16
MAX_TOKENS: Final = 64
# A prefix shorter than this matches too much to be worth an index scan; it is matched as a whole word.
_MIN_PREFIX: Final = 2
_PARTS: Final = re.compile(r'"([^"]*)"?|(\S+)')


class Clause(Struct, frozen=True):
    """A phrase of folded tokens (one token: a word); with ``prefix``, its last token is a prefix."""

    tokens: tuple[str, ...]
    prefix: bool = False


class Query(Struct, frozen=True):
    """A parsed query: passages that match every clause."""

    clauses: tuple[Clause, ...]


def parse(q: str) -> Query:
    """``q`` as a query; `SearchQueryError` when it is too long or holds no word to search for."""
    if len(q) > MAX_QUERY:
        raise SearchQueryError(f"q is {len(q)} characters long; at most {MAX_QUERY} are searched")
    clauses: list[Clause] = []
    for quoted, word in _PARTS.findall(q):
        tokens = tuple(folded_tokens(quoted or word))
        if not tokens:
            continue
        prefix = not quoted and word.endswith("*") and len(tokens[-1]) >= _MIN_PREFIX and not _unspaced(tokens[-1])
        clause = Clause(tokens, prefix)
        if clause not in clauses:
            clauses.append(clause)
    if not clauses:
        raise SearchQueryError("q holds no word to search for: give letters or digits")
    if len(clauses) > MAX_CLAUSES or sum(len(clause.tokens) for clause in clauses) > MAX_TOKENS:
        raise SearchQueryError(f"q holds too many words: at most {MAX_CLAUSES} terms of {MAX_TOKENS} words in all")
    return Query(tuple(clauses))


def fts5(query: Query) -> str:
    """The query as an FTS5 ``MATCH`` string: each clause a quoted phrase (a prefix phrase ends in ``*``), all
    required."""
    return " AND ".join(f'"{" ".join(clause.tokens)}"' + ("*" if clause.prefix else "") for clause in query.clauses)


def tsquery(query: Query) -> str:
    """The query as a PostgreSQL ``tsquery`` literal: each clause a phrase (``<->``), all required."""
    return " & ".join(
        "("
        + " <-> ".join(
            lexeme(token) + (":*" if clause.prefix and at == len(clause.tokens) - 1 else "")
            for at, token in enumerate(clause.tokens)
        )
        + ")"
        for clause in query.clauses
    )


def _unspaced(token: str) -> bool:
    """Whether a token is one character of a script without spaces, where a prefix means nothing."""
    return len(token) == 1 and not token.isascii()

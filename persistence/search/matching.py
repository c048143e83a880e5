"""Where a query matches a passage's text, as token spans (docs/protocol.md §14.2).

The memory store searches by this scan, and every store marks a hit's snippet with it.
"""

from __future__ import annotations

from persistence.search.query import Clause, Query
from persistence.search.terms import fold, spans

__all__ = ["Tokens", "found", "tokens"]

# A text's tokens: each folded token, with the span of the text it came from.
Tokens = list[tuple[str, int, int]]


def tokens(text: str) -> Tokens:
    """``text``'s folded tokens, each with where it stands in ``text``."""
    out: Tokens = []
    for start, end in spans(text):
        for token in fold(text[start:end]):
            out.append((token, start, end))
    return out


def found(query: Query, tokens: Tokens) -> list[tuple[int, int]] | None:
    """The spans every clause matches, in order and merged where they touch, or ``None`` when some clause matches
    nowhere."""
    marks: list[tuple[int, int]] = []
    for clause in query.clauses:
        at = _occurrences(clause, tokens)
        if not at:
            return None
        marks.extend(at)
    merged: list[tuple[int, int]] = []
    for start, end in sorted(marks):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _occurrences(clause: Clause, tokens: Tokens) -> list[tuple[int, int]]:
    words = clause.tokens
    n = len(words)
    names = [token[0] for token in tokens]
    last = n - 1
    out = []
    first = words[0]
    for i, name in enumerate(names[: len(names) - last]):
        if n == 1:
            if name == first or (clause.prefix and name.startswith(first)):
                out.append((tokens[i][1], tokens[i][2]))
            continue
        if name != first or names[i + 1 : i + last] != list(words[1:last]):
            continue
        end = names[i + last]
        if end == words[last] or (clause.prefix and end.startswith(words[last])):
            out.append((tokens[i][1], tokens[i + last][2]))
    return out

"""Where a query matches a passage's text, as token spans (docs/protocol.md §14.2).

The memory store searches by this scan, and every store marks a hit's snippet with it.
"""

from __future__ import annotations

import functools
import re
from typing import Final

from persistence.search.query import Clause, Query
from persistence.search.terms import MAX_TOKEN, fold, spans

__all__ = ["Tokens", "found", "marks", "tokens"]

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
    return _merged(marks)


def _merged(marks: list[tuple[int, int]]) -> list[tuple[int, int]]:
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


def marks(query: Query, text: str) -> list[tuple[int, int]] | None:
    """`found` on ``text``'s tokens; for ASCII text, by a regular expression a clause, in a twentieth of the time."""
    if not text.isascii():
        return found(query, tokens(text))
    spans_found: list[tuple[int, int]] = []
    for clause in query.clauses:
        pattern = _ascii_pattern(clause)
        at = [] if pattern is None else [match.span() for match in pattern.finditer(text)]
        if not at:
            return None
        spans_found.extend(at)
    return _merged(spans_found)


_WORD: Final = "A-Za-z0-9"


@functools.lru_cache(maxsize=256)
def _ascii_pattern(clause: Clause) -> re.Pattern[str] | None:
    """A clause over ASCII text: its tokens whole (a cut one, or the last of a prefix, as a token's start), with
    only separators between; ``None`` when a token is not ASCII, so matches no ASCII text."""
    if not all(token.isascii() for token in clause.tokens):
        return None
    parts = []
    for at, token in enumerate(clause.tokens):
        open_end = len(token) >= MAX_TOKEN or (clause.prefix and at == len(clause.tokens) - 1)
        parts.append(re.escape(token) + (f"[{_WORD}]*" if open_end else f"(?![{_WORD}])"))
    return re.compile(f"(?<![{_WORD}])" + f"[^{_WORD}]+".join(parts), re.IGNORECASE)

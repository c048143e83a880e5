"""Snippets (docs/protocol.md §14.1): the text around the first match, marks at odd positions."""

from __future__ import annotations

from persistence.search.matching import found, tokens
from persistence.search.query import parse
from persistence.search.snippets import SNIPPET_CHARS, snippet


def marks(q: str, text: str) -> list[tuple[int, int]]:
    return found(parse(q), tokens(text)) or []


def test_marks_alternate_with_plain_text_and_whitespace_reads_as_one_space() -> None:
    text = "The  rate\nlimit is hit; the RATE again"
    assert snippet(text, marks("rate", text)) == ["The ", "rate", " limit is hit; the ", "RATE", " again"]
    assert snippet(text, marks('"rate limit"', text)) == ["The ", "rate limit", " is hit; the RATE again"]


def test_a_long_passage_shows_its_first_match_with_ellipses() -> None:
    text = "lead " * 100 + "needle " + "tail " * 100
    parts = snippet(text, marks("needle", text))
    assert parts[1] == "needle" and parts[0].startswith("…") and parts[-1].endswith("…")
    assert len("".join(parts)) <= SNIPPET_CHARS + 20


def test_no_mark_shows_the_start() -> None:
    assert snippet("short text", []) == ["short text"]

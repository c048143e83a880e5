"""A hit's snippet (docs/protocol.md §14.1): the text around its first match, the matched words marked.

A snippet is a list of strings: those at even positions are plain text and those at odd
positions matched, so a client shows the marks without parsing markup (and a viewer
never puts a passage's text into HTML). Whitespace runs read as one space, and an ``…``
stands where the passage goes on.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["SNIPPET_CHARS", "snippet"]

# About how many characters of a passage a snippet shows, and how many of them come before its first match.
SNIPPET_CHARS: Final = 240
_BEFORE: Final = 60
_SPACE: Final = re.compile(r"\s+")


def snippet(text: str, marks: list[tuple[int, int]]) -> list[str]:
    """The snippet of ``text`` whose matches are ``marks`` (sorted, disjoint spans); its start when none."""
    first = marks[0][0] if marks else 0
    start = max(0, first - _BEFORE)
    if start > 0:
        # Begin at a word: after the last space before the window, when there is one near.
        space = text.rfind(" ", max(0, start - 20), first)
        start = space + 1 if space >= 0 else start
    end = max(min(len(text), start + SNIPPET_CHARS), marks[0][1] if marks else 0)
    parts = ["…" if start > 0 else ""]
    at = start
    for mark_start, mark_end in marks:
        if mark_start >= end:
            break
        parts[-1] += _plain(text[at:mark_start])
        parts.append(_plain(text[mark_start:mark_end]))
        parts.append("")
        at = mark_end
    if at < end:
        parts[-1] += _plain(text[at:end])
    if end < len(text):
        parts[-1] += "…"
    return parts


def _plain(text: str) -> str:
    return _SPACE.sub(" ", text)

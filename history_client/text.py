"""A joined-text view of a chunk row, for UIs that render accumulated text.

The view keeps what a renderer needs from a run of deltas, with no per-delta objects:
the joined text, the member where the first non-empty token arrived, and the member at
which the accumulated text first stops being blank. Both boundaries are found in one
forward pass over the members, so a row of 40,000 spaces then ``x`` costs O(characters),
not O(members²).
"""

from __future__ import annotations

import re
from itertools import accumulate, islice
from typing import Final

from codec import ChunkRow, ToolCallRowData

__all__ = ["RowText", "has_visible", "joined_text"]

# ECMAScript's WhiteSpace and LineTerminator, which String.prototype.trim removes; the
# seed's clients define "visible" with trim(), so we use the same set, not str.isspace.
_NOT_BLANK: Final = re.compile("[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]")


class RowText:
    """The joined text of a row and its two boundaries, each as a member index, seq and time.

    ``token_start`` is the first member with a non-empty text (0 if none); a tool-call row
    with a name anchors at member 0. ``visible_start`` is the first member at which the
    accumulated text contains a non-blank character, or ``None`` if it never does; for a
    tool-call row it equals ``token_start``.
    """

    __slots__ = ("text", "token_seq", "token_start", "token_time", "visible_seq", "visible_start", "visible_time")

    def __init__(self, row: ChunkRow) -> None:
        data = row.data
        pieces = data.args if isinstance(data, ToolCallRowData) else data.texts
        self.text = "".join(pieces)
        visible: int | None
        if isinstance(data, ToolCallRowData):
            token = 0 if isinstance(data.name, str) else _first_nonempty(pieces)
            visible = token
        else:
            token = _first_nonempty(pieces)
            visible = _first_visible(pieces)
        times = list(islice(accumulate(data.dt, initial=row.time0), max(token, visible or 0) + 1))
        self.token_start = token
        self.token_seq = row.seq0 + token
        self.token_time = times[token]
        self.visible_start = visible
        self.visible_seq = None if visible is None else row.seq0 + visible
        self.visible_time = None if visible is None else times[visible]

    def __repr__(self) -> str:
        return f"RowText(token_start={self.token_start}, visible_start={self.visible_start}, text={self.text[:40]!r})"


def _first_nonempty(pieces: list[str]) -> int:
    return next((i for i, piece in enumerate(pieces) if piece), 0)


def _first_visible(pieces: list[str]) -> int | None:
    search = _NOT_BLANK.search
    return next((i for i, piece in enumerate(pieces) if search(piece)), None)


def has_visible(text: str) -> bool:
    """Whether ``text`` has a character that ECMAScript ``trim()`` would keep."""
    return _NOT_BLANK.search(text) is not None


def joined_text(row: ChunkRow) -> RowText:
    """The joined-text view of a row (see `RowText`)."""
    return RowText(row)

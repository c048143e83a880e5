"""PostgreSQL's page read on an async cursor: two statements when the newest 256 messages hold the cut.

The first statement (`PAGE_HEAD`) brings the session row, its hidden ranges and its newest
messages below the page's bound, as arrays, in one round trip; the second the records (after
their sizes, for a page bounded by bytes). Each statement reads its own snapshot. A cut that
needs more of the message index comes back without cuts, for `persistence.sql.pages.page_walked`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final, NamedTuple

import psycopg

from persistence.base import PageRead, SessionInfo
from persistence.errors import SessionNotFoundError
from persistence.message_index import HiddenRange, MessageEntry, select_cuts
from persistence.off_loop import OFF_LOOP_BYTES
from persistence.rules import page_span
from persistence.sql.dialect import MESSAGE_PAGE, LongWalk
from persistence.sql.schema import bounded_rows, stored_header
from persistence.sql.statements import Statements

__all__ = ["PAGE_HEAD", "PageRows", "inline", "page_rows"]

# The page's head read: the session row, its hidden ranges and its newest
# messages (a page of them) below the page's bound, as arrays, in one round trip.
PAGE_HEAD: Final = """
SELECT s.header, s.owner, s.head_seq, s.touched_at,
    ARRAY(
        SELECT ARRAY[h.seq, h.start, h."end"] FROM history_hidden h
        WHERE h.session_id = s.id AND h.seq < %(bound)s ORDER BY h.seq
    ),
    ARRAY(
        SELECT ARRAY[m.seq, m.group_start] FROM history_messages m
        WHERE m.session_id = s.id AND m.seq < %(bound)s ORDER BY m.seq DESC LIMIT %(messages)s
    )
FROM history_sessions s WHERE s.id = %(id)s
"""
_NO_BOUND: Final = 1 << 62


class PageRows(NamedTuple):
    """A page read but for its records' lines: the session, the page's end, its cuts (none: a long walk), its rows."""

    info: SessionInfo
    to_seq: int
    cuts: list[int]
    rows: list[Any]


async def page_rows(
    cursor: psycopg.AsyncCursor[Any],
    sql: Statements,
    session_id: str,
    through: int | None,
    before: int | None,
    max_messages: int,
    max_bytes: int | None,
) -> PageRead | PageRows:
    """The page's read; a `PageRead` when it has nothing to read."""
    await cursor.execute(PAGE_HEAD, _head_params(session_id, through, before))
    head = _head(await cursor.fetchone(), session_id, through, before)
    if isinstance(head, PageRead):
        return head
    info, to_seq, hidden, first, more = head
    try:
        cuts = select_cuts(_newest(first, more), hidden, to_seq=to_seq, max_messages=max_messages)
    except LongWalk:
        cuts = []
    if len(cuts) > 1 and max_bytes is not None:
        values = {"id": session_id, "from_seq": cuts[-1], "to_seq": to_seq}
        await cursor.execute(sql.sizes.sql, sql.sizes.params(values))
        cuts = bounded_rows(cuts, to_seq, await cursor.fetchall(), max_bytes)
    rows: list[Any] = []
    if cuts:
        values = {"id": session_id, "from_seq": cuts[-1], "to_seq": to_seq}
        await cursor.execute(sql.stored.sql, sql.stored.params(values))
        rows = await cursor.fetchall()
    return PageRows(info, to_seq, cuts, rows)


def inline(rows: Sequence[Any]) -> bool:
    """Whether the records' rows may be unpacked on the event loop: few stored bytes, none to decompress."""
    return sum(len(row[3]) for row in rows) < OFF_LOOP_BYTES and not any(row[2] for row in rows)


def _head_params(session_id: str, through: int | None, before: int | None) -> dict[str, Any]:
    bound = min(_NO_BOUND if through is None else through + 1, _NO_BOUND if before is None else before)
    return {"id": session_id, "bound": bound, "messages": MESSAGE_PAGE}


def _newest(first: Sequence[MessageEntry], more: bool) -> Iterator[MessageEntry]:
    """``first``, then `LongWalk` if the index holds more messages than it and the cut needs them."""
    yield from first
    if more:
        raise LongWalk


def _head(
    row: Any, session_id: str, through: int | None, before: int | None
) -> PageRead | tuple[SessionInfo, int, list[HiddenRange], list[MessageEntry], bool]:
    """A `PAGE_HEAD` row as the session, the page's end, hidden ranges, newest messages, and if more exist."""
    if row is None:
        raise SessionNotFoundError(session_id)
    header, owner, head, touched, hidden_rows, message_rows = row
    info = SessionInfo(stored_header(header, session_id), owner, head, touched)
    span = page_span(head, through, before)
    if not span.reads:
        return PageRead.unread(info, span)
    to_seq = span.to_seq
    # Each statement reads its own snapshot: what a later append added past the head is left out.
    hidden = [HiddenRange(*entry) for entry in hidden_rows if entry[0] < to_seq]
    first = [MessageEntry(*entry) for entry in message_rows if entry[0] < to_seq]
    return info, to_seq, hidden, first, len(message_rows) == MESSAGE_PAGE

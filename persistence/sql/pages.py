"""The SQL of a read: a session, a page's cut, its records, as units over a DBAPI cursor and the statements.

Each unit is a free function ``unit(cursor, sql, ...)`` that a backend runs where its reads
run (`Backend.read`): SQLite's on the event loop, or in a worker thread when it would wait or
its records are large; PostgreSQL's in a worker thread. A page reads its session, its cut
(`persistence.message_index.select_cuts`) and its records in one transaction. An unknown
session raises `SessionNotFoundError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from codec import SessionHeader, StoredRecord
from persistence.base import PageRead, SessionInfo
from persistence.errors import SessionNotFoundError
from persistence.message_index import HiddenRange, MessageEntry, select_cuts
from persistence.off_loop import OFF_LOOP_BYTES
from persistence.rules import page_span
from persistence.sql.dialect import MESSAGE_PAGE, LongWalk
from persistence.sql.lines import Lines
from persistence.sql.schema import bounded_rows, stored_header
from persistence.sql.statements import Statements
from persistence.synopsis import Synopsis

__all__ = [
    "Head",
    "children",
    "cuts",
    "cuts_checked",
    "info",
    "page_inline",
    "page_walked",
    "require",
    "stored",
    "stored_checked",
    "synopsis",
]


class Head(NamedTuple):
    """A page's session, end and cuts, once its head is read."""

    info: SessionInfo
    to_seq: int
    cuts: list[int]


def info(cursor: Any, sql: Statements, session_id: str) -> SessionInfo:
    """The session's row."""
    row = sql.session.run(cursor, id=session_id).fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    return SessionInfo(stored_header(row[0], session_id), row[1], row[2], row[3])


def synopsis(cursor: Any, sql: Statements, session_id: str) -> Synopsis:
    """The session's synopsis (`persistence.synopsis`)."""
    row = sql.synopsis.run(cursor, id=session_id).fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    return Synopsis(*row)


def require(cursor: Any, sql: Statements, session_id: str) -> None:
    """Raise `SessionNotFoundError` unless the session has a row."""
    if sql.exists.run(cursor, id=session_id).fetchone() is None:
        raise SessionNotFoundError(session_id)


def page_inline(
    cursor: Any,
    sql: Statements,
    lines: Lines,
    session_id: str,
    through: int | None,
    before: int | None,
    max_messages: int,
    max_bytes: int | None,
    pages: int,
) -> tuple[PageRead, bool]:
    """A page's read in one transaction, walking at most ``pages`` message pages to its cut.

    ``False`` when the cut needs a longer walk (the read then has no cuts) or the records are
    too large to read on the event loop (it then has no records).
    """
    session = info(cursor, sql, session_id)
    span = page_span(session.head_seq, through, before)
    if not span.reads:
        return PageRead.unread(session, span), True
    try:
        found = cuts(cursor, sql, session_id, span.to_seq, max_messages, pages)
    except LongWalk:
        return PageRead(session, span.to_seq, [], []), False
    return _page_of(cursor, sql, lines, session_id, Head(session, span.to_seq, found), max_bytes, True)


def page_walked(
    cursor: Any,
    sql: Statements,
    lines: Lines,
    session_id: str,
    session: SessionInfo,
    to_seq: int,
    max_messages: int,
    max_bytes: int | None,
) -> PageRead:
    """The rest of a read whose cut needs a long walk, after its head (the index below ``to_seq`` never changes)."""
    found = cuts(cursor, sql, session_id, to_seq, max_messages)
    return _page_of(cursor, sql, lines, session_id, Head(session, to_seq, found), max_bytes, False)[0]


def _page_of(
    cursor: Any, sql: Statements, lines: Lines, session_id: str, head: Head, max_bytes: int | None, inline: bool
) -> tuple[PageRead, bool]:
    session, to_seq, found = head
    sized = None
    if max_bytes is not None and len(found) > 1:
        found, sized = _bounded(cursor, sql, session_id, found, to_seq, max_bytes)
    if inline and not _inline(cursor, sql, session_id, found[-1], to_seq, sized):
        return PageRead(session, to_seq, found, []), False
    return PageRead(session, to_seq, found, stored(cursor, sql, lines, session_id, found[-1], to_seq)), True


def stored_checked(
    cursor: Any, sql: Statements, lines: Lines, session_id: str, from_seq: int, to_seq: int, inline: bool
) -> list[StoredRecord] | None:
    """The records, or ``None`` when they are too large to read ``inline``; an unknown session raises."""
    if inline and not _inline(cursor, sql, session_id, from_seq, to_seq):
        return None
    found = stored(cursor, sql, lines, session_id, from_seq, to_seq)
    if not found:
        require(cursor, sql, session_id)
    return found


def _bounded(
    cursor: Any, sql: Statements, session_id: str, found: list[int], to_seq: int, max_bytes: int
) -> tuple[list[int], tuple[int, bool] | None]:
    """The cuts whose pages may fit ``max_bytes``, from the records' columns and stored sizes alone.

    A compressed line's stored size is below its own (it is kept compressed only when
    smaller), so it is a floor too. A read that surely fits is not sized row by row; it
    comes back with its stored bytes and whether any is compressed, which `_inline` needs.
    """
    values = {"id": session_id, "from_seq": found[-1], "to_seq": to_seq}
    size, compressed = sql.stored_bytes.run(cursor, **values).fetchone()
    if int(size) <= max_bytes and not compressed:
        return found, (int(size), bool(compressed))
    return bounded_rows(found, to_seq, sql.sizes.run(cursor, **values).fetchall(), max_bytes), None


def _inline(
    cursor: Any, sql: Statements, session_id: str, from_seq: int, to_seq: int, sized: tuple[int, bool] | None = None
) -> bool:
    """Whether the records may be read on the event loop: few stored bytes, none of them to decompress.

    A compressed line may decompress to any size, so a read holding one goes to a worker thread.
    ``sized`` is the range's stored bytes and compression when already read.
    """
    if sized is None:
        found = sql.stored_bytes.run(cursor, id=session_id, from_seq=from_seq, to_seq=to_seq).fetchone()
        sized = (int(found[0]), bool(found[1]))
    size, compressed = sized
    return size <= OFF_LOOP_BYTES and not compressed


def stored(
    cursor: Any, sql: Statements, lines: Lines, session_id: str, from_seq: int, to_seq: int
) -> list[StoredRecord]:
    """The records covering ``[from_seq, to_seq)``."""
    rows = sql.stored.run(cursor, id=session_id, from_seq=from_seq, to_seq=to_seq).fetchall()
    return lines.records(rows)


def cuts_checked(cursor: Any, sql: Statements, session_id: str, to_seq: int, max_messages: int) -> list[int]:
    """`cuts`, for a session that must exist."""
    require(cursor, sql, session_id)
    return cuts(cursor, sql, session_id, to_seq, max_messages)


def cuts(
    cursor: Any, sql: Statements, session_id: str, to_seq: int, max_messages: int, pages: int | None = None
) -> list[int]:
    """The candidate cuts; with ``pages``, raise `LongWalk` rather than read more message pages than that."""
    hidden = [HiddenRange(*row) for row in sql.hidden.run(cursor, id=session_id, to_seq=to_seq).fetchall()]
    messages = _messages_desc(cursor, sql, session_id, to_seq, pages)
    return select_cuts(messages, hidden, to_seq=to_seq, max_messages=max_messages)


def _messages_desc(
    cursor: Any, sql: Statements, session_id: str, to_seq: int, pages: int | None
) -> Iterator[MessageEntry]:
    """Counted messages below ``to_seq``, newest first, read a page at a time.

    With ``pages``, reading more message pages than that raises `LongWalk`.
    """
    below = to_seq
    while True:
        if pages is not None:
            if pages == 0:
                raise LongWalk
            pages -= 1
        rows = sql.messages.run(cursor, id=session_id, below=below).fetchall()
        for seq, group_start in rows:
            yield MessageEntry(seq, group_start)
        if len(rows) < MESSAGE_PAGE:
            return
        below = rows[-1][0]


def children(cursor: Any, sql: Statements, parent_id: str) -> list[SessionHeader]:
    """The headers of the sessions whose parent is ``parent_id``, by id."""
    return [stored_header(data, child_id) for child_id, data in sql.children.run(cursor, id=parent_id).fetchall()]

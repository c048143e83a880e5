"""The SQL store's hot-path statements, compiled once for the engine's dialect (`persistence.sql.prepared`)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect as SaDialect
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import ClauseElement

from codec import MAX_SAFE_INTEGER
from persistence.base import TOUCH_MS, SessionKey
from persistence.sealing import MAX_TAIL
from persistence.sql.dialect import MESSAGE_PAGE, Dialect
from persistence.sql.prepared import Prepared
from persistence.sql.schema import (
    FRAME_HEADER,
    JOIN_COLUMNS,
    SYNOPSIS_COLUMNS,
    CodePointOrder,
    hidden_table,
    messages_table,
    of_life,
    records_table,
    sessions_table,
)
from persistence.synopsis import BatchSynopsis, folded

__all__ = ["Statements", "alive", "counting", "expired", "listed", "listing", "synopsis_moved", "synopsis_params"]


def listed(owner: str, closed: bool | None, match: str | None) -> list[sa.ColumnElement[bool]]:
    """Which rows a listing of ``owner``'s top-level sessions holds (`HistoryStore.list_sessions`).

    The filter is `persistence.synopsis.matches` in SQL: the folded needle in the id (ASCII,
    so SQL's ``lower`` folds it as Python does) or in ``title_folded`` (folded by Python when
    written), as a ``LIKE`` with its wildcards escaped. It scans the owner's sessions.
    """
    s = sessions_table.c
    where = [s.owner == owner, s.parent_id.is_(None)]
    if closed is not None:
        where.append(s.closed_at.is_not(None) if closed else s.closed_at.is_(None))
    if match is not None:
        needle = folded(match)
        in_id = sa.func.lower(s.id).contains(needle, autoescape=True)
        where.append(sa.or_(in_id, s.title_folded.contains(needle, autoescape=True)))
    return where


def listing(
    owner: str, limit: int, before: SessionKey | None, closed: bool | None = None, match: str | None = None
) -> Select[Any]:
    """A page of ``owner``'s top-level sessions, newest first, with child counts (`HistoryStore.list_sessions`)."""
    s, child = sessions_table.c, sessions_table.alias("child").c
    order_id = CodePointOrder(s.id)
    # Counted per listed row through the parent_id index, never by reading headers.
    child_count = sa.select(sa.func.count()).where(child.parent_id == s.id).scalar_subquery()
    query = (
        sa.select(
            s.id,
            s.created_at,
            s.head_seq,
            child_count.label("child_count"),
            s.closed_at,
            s.expires_at,
            s.touched_at,
            *(s[name] for name in SYNOPSIS_COLUMNS),
        )
        .where(*listed(owner, closed, match))
        .order_by(s.created_at.desc(), order_id.desc())
        .limit(limit)
    )
    if before is not None:
        bound = sa.tuple_(before.created_at, before.id, types=[s.created_at.type, s.id.type])
        query = query.where(sa.tuple_(s.created_at, order_id) < bound)
    return query


def counting(
    owner: str, now: int, retention_ms: int | None, closed: bool | None = None, match: str | None = None
) -> Select[Any]:
    """How many rows `listing` lists, less those expired at ``now`` (`HistoryStore.count_sessions`)."""
    return sa.select(sa.func.count()).where(*listed(owner, closed, match), alive(now, retention_ms))


def alive(now: int, retention_ms: int | None) -> sa.ColumnElement[bool]:
    """The sessions not expired at ``now``: `persistence.rules.alive` in SQL, the negation of `expired`'s
    condition, with NULL ``expires_at`` as never."""
    s = sessions_table.c
    kept = sa.or_(s.expires_at.is_(None), s.expires_at > now)
    if retention_ms is not None:
        kept = sa.and_(kept, s.touched_at > now - retention_ms)
    return kept


def expired(now: int, retention_ms: int | None, limit: int | None, skip: Collection[str] = ()) -> Select[Any]:
    """The ids of up to ``limit`` sessions expired at ``now`` (`HistoryStore.expired`), through the expiry indexes."""
    s = sessions_table.c
    gone = s.expires_at <= now
    if retention_ms is not None:
        gone = sa.or_(gone, s.touched_at <= now - retention_ms)
    query = sa.select(s.id).where(gone).limit(limit)
    return query.where(s.id.not_in(skip)) if skip else query


class Statements:
    """The hot path's statements, compiled once for the engine's dialect."""

    def __init__(self, dialect: SaDialect, ways: Dialect) -> None:
        s, r, m, h = sessions_table.c, records_table.c, messages_table.c, hidden_table.c
        b = sa.bindparam

        def prepared(statement: ClauseElement) -> Prepared:
            return Prepared(statement, dialect)

        self.session = prepared(sa.select(s.header, s.owner, s.head_seq, s.touched_at).where(s.id == b("id")))
        self.exists = prepared(sa.select(s.id).where(s.id == b("id")))
        self.children = prepared(sa.select(s.id, s.header).where(s.parent_id == b("id")).order_by(s.id))
        head = sa.select(s.head_seq, s.closed_at, s.header, s.owner).where(s.id == b("id"))
        self.head_for_update = prepared(ways.lock_head(head))
        self.session_for_update = prepared(
            ways.lock_head(sa.select(s.header, s.owner, s.head_seq, s.closed_at, s.touched_at).where(s.id == b("id")))
        )
        # A closed session's head never moves: an append to it is then refused under the row's lock. Nor does
        # another life's: an append checked against one life never lands in the next (`persistence.rules.Life`).
        advance = sa.update(sessions_table).where(
            s.id == b("id"), s.head_seq == b("expected"), s.closed_at.is_(None), of_life(s.owner, s.header)
        )
        # The time only once it is `TOUCH_MS` old: appends in between leave every indexed column as it was.
        touched = sa.case((s.touched_at < b("touched") - TOUCH_MS, b("touched")), else_=s.touched_at)
        self.advance = prepared(
            ways.advance(advance.values(head_seq=b("new_head"), touched_at=touched, **synopsis_moved(b)))
        )
        self.synopsis = prepared(sa.select(*(s[name] for name in SYNOPSIS_COLUMNS)).where(s.id == b("id")))
        close = sa.update(sessions_table).where(s.id == b("id"), s.closed_at.is_(None))
        closing = close.values(header=b("closed_header"), closed_at=b("at"), touched_at=b("at"))
        self.close = prepared(ways.advance(closing))
        self.create = prepared(sa.insert(sessions_table))
        self.tail = prepared(
            sa.select(r.seq, r.members, *(r[name] for name in JOIN_COLUMNS))
            .where(r.session_id == b("id"))
            .order_by(r.seq.desc())
            .limit(MAX_TAIL)
        )
        self.lines = prepared(
            sa.select(r.seq, r.compressed, r.data)
            .where(r.session_id == b("id"), r.seq >= b("lo"), r.seq <= b("hi"))
            .order_by(r.seq)
        )
        self.drop_from = prepared(sa.delete(records_table).where(r.session_id == b("id"), r.seq >= b("seq")))
        self.insert_record = prepared(sa.insert(records_table))
        self.insert_message = prepared(sa.insert(messages_table))
        self.insert_hidden = prepared(sa.insert(hidden_table))
        # From the record covering from_seq (the last one starting at or before it, one index
        # probe), in one statement: a seal that commits between two statements would move it.
        covering = sa.select(sa.func.max(r.seq)).where(r.session_id == b("id"), r.seq <= b("from_seq"))
        start = sa.func.coalesce(covering.scalar_subquery(), b("from_seq"))
        # Only a session row's records: a deleted session's wait to be purged (`persistence.sql.deletion`).
        alive = sa.exists().where(s.id == b("id"))
        where = (r.session_id == b("id"), r.seq >= start, r.seq < b("to_seq"), alive)
        self.stored = prepared(
            sa.select(r.seq, r.members, r.compressed, r.data, *(r[name] for name in JOIN_COLUMNS))
            .where(*where)
            .order_by(r.seq)
        )
        # Those records' columns and stored sizes, no line: what bounds a page read by bytes.
        self.sizes = prepared(
            sa.select(
                r.seq,
                r.members,
                sa.func.length(r.data),
                # A compressed line's frame header, which tells its size (zstd writes it by default).
                sa.case((r.compressed, sa.func.substr(r.data, 1, FRAME_HEADER)), else_=None),
                *(r[name] for name in JOIN_COLUMNS),
            )
            .where(*where)
            .order_by(r.seq)
        )
        # The stored size of those records, and whether any is compressed, from each row's header:
        # no record is read. (For reads on the event loop.)
        self.stored_bytes = prepared(
            sa.select(
                sa.func.coalesce(sa.func.sum(sa.func.length(r.data)), 0),
                # As a number: PostgreSQL has no max() of booleans.
                sa.func.coalesce(sa.func.max(sa.cast(r.compressed, sa.Integer)), 0),
            ).where(*where)
        )
        self.hidden = prepared(sa.select(h.seq, h.start, h.end).where(h.session_id == b("id"), h.seq < b("to_seq")))
        self.messages = prepared(
            sa.select(m.seq, m.group_start)
            .where(m.session_id == b("id"), m.seq < b("below"))
            .order_by(m.seq.desc())
            .limit(MESSAGE_PAGE)
        )


def synopsis_moved(b: Any) -> dict[str, sa.ColumnElement[Any]]:
    """The synopsis columns an append moves, from its batch's (`persistence.synopsis.applied`, in SQL).

    A ``session/title`` names the session (``named``); its first user message (``said``) only
    while it has no title; the tokens add up to at most `codec.MAX_SAFE_INTEGER`.
    """
    s = sessions_table.c
    cap = MAX_SAFE_INTEGER

    def added(column: sa.ColumnElement[int], name: str) -> sa.ColumnElement[int]:
        more = b(name, type_=sa.BigInteger)
        return sa.case((column > cap - more, cap), else_=column + more)

    text = sa.String
    return {
        "title": sa.func.coalesce(b("named", type_=text), s.title, b("said", type_=text)),
        "title_folded": sa.func.coalesce(b("named_folded", type_=text), s.title_folded, b("said_folded", type_=text)),
        "last_event_at": b("last_event_at", type_=sa.BigInteger),
        "input_tokens": added(s.input_tokens, "input_tokens"),
        "output_tokens": added(s.output_tokens, "output_tokens"),
    }


def synopsis_params(batch: BatchSynopsis) -> dict[str, Any]:
    """The parameters of `synopsis_moved` for a batch."""
    return {
        "named": batch.named,
        "named_folded": None if batch.named is None else folded(batch.named),
        "said": batch.said,
        "said_folded": None if batch.said is None else folded(batch.said),
        "last_event_at": batch.last_event_at,
        "input_tokens": batch.input_tokens,
        "output_tokens": batch.output_tokens,
    }

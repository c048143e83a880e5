"""The SQL of a write: a create, a close and an append, as units of the writer over a DBAPI cursor.

Each runs in the writer thread, in a savepoint of the group's transaction (`persistence.sql.groups`).
An append moves the head from the one it expects, in the life checked, then writes the batch,
sealing the session's open run (`persistence.sealing`); when the head was elsewhere, it reads
the head under the row's lock and plans again (`persistence.rules.plan_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

import persistence.sql.pages as pages
from codec import Event, SessionHeader, StoredRecord, encode
from persistence.base import AppendResult, SessionInfo, events_in, expires_at_of, subagent_parent
from persistence.batch import PreparedBatch
from persistence.clock import now_ms
from persistence.errors import SessionExistsError, SessionNotFoundError
from persistence.rules import BatchPlan, Life, check_life, confirm_resend, plan_batch
from persistence.sealing import open_run, plan_append
from persistence.sql.deletion import Deletion
from persistence.sql.dialect import Dialect
from persistence.sql.lines import Lines
from persistence.sql.schema import stored_header
from persistence.sql.search import SqlSearch
from persistence.sql.statements import Statements, synopsis_params
from persistence.sql.tails import Tails

__all__ = ["Append", "Writes", "append", "close", "create", "new_row"]


class Writes(NamedTuple):
    """What the writer's units write with: the statements, the lines' packing, the open runs kept, the dialect."""

    sql: Statements
    search: SqlSearch
    lines: Lines
    tails: Tails
    dialect: Dialect
    deletion: Deletion
    # The driver's, raised by an insert of a row that exists.
    integrity_error: type[Exception]


class Append:
    """An append as a unit of a group: what it writes, in which life, and the plan it hopes for (`next_plan`).

    Called with the cursor, it runs `append` (each unit alone); a backend's group writer may
    instead commit it beside others, from its fields.
    """

    __slots__ = ("batch", "events", "hoped", "life", "session_id", "writes")

    def __init__(
        self,
        writes: Writes,
        session_id: str,
        events: Sequence[Event],
        batch: PreparedBatch | None,
        hoped: BatchPlan | None,
        life: Life | None = None,
    ) -> None:
        self.writes = writes
        self.session_id = session_id
        self.events = events
        self.batch = batch
        self.hoped = hoped
        self.life = life

    def __call__(self, cursor: Any) -> AppendResult:
        return append(cursor, self.writes, self.session_id, self.events, self.batch, self.hoped, self.life)


def new_row(header: SessionHeader, owner: str, touched_at: int) -> dict[str, Any]:
    """A new session's row, empty: no head, no title, no event, no tokens."""
    return {
        "id": header.id,
        "header": encode(header),
        "owner": owner,
        "parent_id": subagent_parent(header),
        "head_seq": -1,
        "created_at": header.createdAt,
        "closed_at": None,
        "expires_at": expires_at_of(header),
        "touched_at": touched_at,
        "title": None,
        "title_folded": None,
        "last_event_at": None,
        "input_tokens": 0,
        "output_tokens": 0,
    }


def create(cursor: Any, w: Writes, row: dict[str, Any]) -> None:
    """Insert a session's row; `SessionExistsError` if the id is taken."""
    w.tails.forget(row["id"])  # what it kept of an earlier incarnation of the id
    w.deletion.before_create(cursor, row["id"])
    try:
        w.sql.create.run(cursor, **row)
    except w.integrity_error as exc:
        raise SessionExistsError(row["id"]) from exc


def close(cursor: Any, w: Writes, session_id: str, closed_at: int, life: Life | None) -> SessionInfo:
    """Close the session at ``closed_at`` unless it is closed already; the session as it is then."""
    row = w.sql.session_for_update.run(cursor, id=session_id).fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    header, owner, head, touched = stored_header(row[0], session_id), row[1], row[2], row[4]
    check_life(session_id, life, header, owner)
    if row[3] is None:
        header, touched = msgspec.structs.replace(header, closedAt=closed_at), closed_at
        extra = w.dialect.advance_params(session_id, head, closed=True)
        w.sql.close.run(cursor, id=session_id, closed_header=encode(header), at=closed_at, **extra)
        w.dialect.told(cursor, session_id, head, closed=True)
    return SessionInfo(header, owner, head, touched)


def append(
    cursor: Any,
    w: Writes,
    session_id: str,
    events: Sequence[Event],
    batch: PreparedBatch | None,
    hoped: BatchPlan | None,
    life: Life | None,
) -> AppendResult:
    """One append, in the writer thread, inside its own savepoint of the group's transaction."""
    if batch is not None and hoped is not None:
        # The usual case, tried first: the head is just before the batch, in the life checked.
        if _advance(cursor, w, session_id, hoped.first_seq - 1, hoped.head_seq, life, batch):
            # It was, and the row is now locked.
            _insert(cursor, w, session_id, batch, life)
            return AppendResult.of(hoped)
    row = w.sql.head_for_update.run(cursor, id=session_id).fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    check_life(session_id, life, stored_header(row[2], session_id), row[3])
    head = row[0]
    closed = row[1] is not None
    seqs = [event.seq for event in events]
    plan = plan_batch(session_id, seqs, head, closed=closed, dense=hoped is not None)
    if plan.resend:
        found = pages.stored(cursor, w.sql, w.lines, session_id, plan.first_seq, plan.to_seq)
        confirm_resend(session_id, events, events_in(found, plan.first_seq, plan.to_seq), head, closed=closed)
    if plan.writes and batch is not None:
        if not _advance(cursor, w, session_id, head, plan.head_seq, life, batch):
            raise AssertionError("the locked head moved")
        _insert(cursor, w, session_id, batch, life)
    return AppendResult.of(plan)


def _advance(
    cursor: Any, w: Writes, session_id: str, expected: int, new_head: int, life: Life | None, batch: PreparedBatch
) -> bool:
    """Move the head of ``life`` from ``expected`` to ``new_head``, and the synopsis by ``batch``'s; ``False``,
    changing nothing, if not there."""
    extra = w.dialect.advance_params(session_id, new_head)
    owner, incarnation = (None, None) if life is None else (life.owner, life.incarnation)
    w.sql.advance.run(
        cursor,
        id=session_id,
        expected=expected,
        new_head=new_head,
        touched=now_ms(),
        owner=owner,
        incarnation=incarnation,
        **synopsis_params(batch.synopsis),
        **extra,
    )
    if cursor.rowcount != 1:
        return False
    w.dialect.told(cursor, session_id, new_head)
    return True


def _insert(cursor: Any, w: Writes, session_id: str, batch: PreparedBatch, life: Life | None) -> None:
    """Write a batch after the stored head, sealing the open run (the head is locked already)."""
    tail = w.tails.kept(session_id, life, batch.records[0].seq - 1)
    # Else the head has moved since this writer last wrote it, and so may have the open run.
    if tail is None:
        trailing = w.sql.tail.run(cursor, id=session_id).fetchall()
        tail = open_run([StoredRecord(r[0], r[1], b"", r[2], bytes(r[3]), r[4], r[5]) for r in reversed(trailing)])
    keep, records = plan_append(tail, batch.records, lambda pieces: _lines(cursor, w, session_id, pieces))
    if keep < len(tail):
        w.sql.drop_from.run(cursor, id=session_id, seq=tail[keep].seq)
    w.sql.insert_record.run_many(cursor, [w.lines.row(session_id, record) for record in records])
    if batch.messages:
        w.sql.insert_message.run_many(
            cursor, [{"session_id": session_id, "seq": m.seq, "group_start": m.group_start} for m in batch.messages]
        )
    if batch.hidden:
        w.sql.insert_hidden.run_many(
            cursor,
            [{"session_id": session_id, "seq": h.at, "start": h.start, "end": h.end} for h in batch.hidden],
        )
    w.search.write(cursor, session_id, batch.passages, batch.records[0].seq, records[-1].end - 1)
    w.tails.remember(session_id, life, records[-1].end - 1, tail[:keep], records)


def _lines(cursor: Any, w: Writes, session_id: str, pieces: Sequence[StoredRecord]) -> list[StoredRecord]:
    """``pieces`` (trailing records, columns only) with their stored lines."""
    if not pieces:
        return []
    rows = w.sql.lines.run(cursor, id=session_id, lo=pieces[0].seq, hi=pieces[-1].seq).fetchall()
    lines = {row[0]: w.lines.unpack(row[0], row[1], row[2]) for row in rows}
    return [piece._replace(line=lines[piece.seq]) for piece in pieces]

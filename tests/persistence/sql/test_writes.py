"""The writer's units (persistence/sql/writes.py) on a cursor of their own: a create, a close, an append."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from codec import Event, SessionHeader
from persistence.base import AppendResult
from persistence.batch import prepare_batch
from persistence.errors import SeqConflictError, SessionClosedError, SessionExistsError, SessionNotFoundError
from persistence.notify import notice
from persistence.rules import Life, next_plan
from persistence.sql import pages, writes
from persistence.sql.sqlite import SqliteDialect
from tests.persistence.sql.conftest import Units

pytestmark = pytest.mark.anyio


def notes(first: int, count: int) -> list[Event]:
    return [Event("note", seq, seq, {"n": seq}) for seq in range(first, first + count)]


def create(units: Units, session_id: str, owner: str = "o", incarnation: str = "i1") -> None:
    header = SessionHeader(id=session_id, createdAt=1, incarnation=incarnation)
    row = writes.new_row(header, owner, 1)
    writes.create(units.cursor, units.writes, row)


def append(units: Units, session_id: str, events: Sequence[Event], life: Life | None = None) -> AppendResult:
    """As the store hands an append to its writer: packed, with the plan it hopes for."""
    batch = prepare_batch(events) if events else None
    hoped = next_plan([event.seq for event in events]) if batch is not None else None
    return writes.Append(units.writes, session_id, events, batch, hoped, life)(units.cursor)


async def test_a_create_of_a_taken_id_is_refused(units: Units) -> None:
    create(units, "s")
    with pytest.raises(SessionExistsError):
        create(units, "s")


async def test_an_append_moves_the_head_writes_the_records_and_keeps_the_open_run(units: Units) -> None:
    create(units, "s")
    assert append(units, "s", notes(0, 3)) == AppendResult(0, 2)
    assert pages.info(units.cursor, units.sql, "s").head_seq == 2
    stored = pages.stored(units.cursor, units.sql, units.lines, "s", 0, 3)
    assert [record.seq for record in stored] == [0, 1, 2]
    assert units.writes.tails.kept("s", None, 2) is not None
    assert append(units, "s", notes(3, 2)) == AppendResult(3, 4)


async def test_an_append_whose_head_moved_is_planned_again_under_the_lock(units: Units) -> None:
    create(units, "s")
    append(units, "s", notes(0, 3))
    # A re-send of what is stored: nothing written.
    assert append(units, "s", notes(1, 2)) == AppendResult(1, 2, idempotent=True)
    with pytest.raises(SeqConflictError):
        append(units, "s", notes(5, 1))
    with pytest.raises(SeqConflictError):
        append(units, "s", [*notes(3, 1), *notes(5, 1)])  # not dense: its hoped plan is none
    with pytest.raises(SessionNotFoundError):
        append(units, "nope", notes(0, 1))
    assert pages.info(units.cursor, units.sql, "s").head_seq == 2


async def test_an_append_is_checked_against_the_life_it_names(units: Units) -> None:
    create(units, "s", owner="alice", incarnation="i1")
    assert append(units, "s", notes(0, 1), Life("i1", "alice")) == AppendResult(0, 0)
    with pytest.raises(SessionNotFoundError):
        append(units, "s", notes(1, 1), Life("i2", "alice"))
    assert pages.info(units.cursor, units.sql, "s").head_seq == 0


async def test_a_close_is_once_and_a_closed_session_takes_only_a_resend(units: Units) -> None:
    create(units, "s")
    append(units, "s", notes(0, 2))
    closed = writes.close(units.cursor, units.writes, "s", 5, None)
    assert closed.header.closedAt == 5 and closed.head_seq == 1
    assert writes.close(units.cursor, units.writes, "s", 9, None).header.closedAt == 5
    with pytest.raises(SessionClosedError):
        append(units, "s", notes(2, 1))
    assert append(units, "s", notes(0, 2)) == AppendResult(0, 1, idempotent=True)
    with pytest.raises(SessionNotFoundError):
        writes.close(units.cursor, units.writes, "nope", 5, None)


async def test_only_a_head_that_moved_is_told_and_a_close_once(units: Units) -> None:
    dialect = units.writes.dialect
    if not isinstance(dialect, SqliteDialect):
        pytest.skip("PostgreSQL's notice rides the statement (pg_notify), not a told row")
    create(units, "s")
    assert dialect.pending == []  # a create tells nothing: a follower reads it itself
    append(units, "s", notes(0, 2))
    with pytest.raises(SeqConflictError):
        append(units, "s", notes(5, 1))
    append(units, "s", notes(0, 2))  # a re-send moves nothing
    writes.close(units.cursor, units.writes, "s", 9, None)
    writes.close(units.cursor, units.writes, "s", 10, None)  # closed already
    assert dialect.pending == [notice("s", 1, "units"), notice("s", 1, "units", closed=True)]

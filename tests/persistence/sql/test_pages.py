"""The units of a read (persistence/sql/pages.py) on a cursor of their own: a session, a page's cut, its records.

On SQLite, which reads a page with them on the event loop; PostgreSQL reads its pages in two
statements (test_pg_pages.py), and with these units only its long walks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codec import Event
from persistence.errors import SessionNotFoundError
from persistence.sql import pages
from testing.events import plain
from tests.persistence.sql.conftest import Units
from tests.persistence.sql.test_writes import append, create

pytestmark = pytest.mark.anyio


@pytest.fixture
def sql_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'h.db'}"


def turns(count: int) -> list[Event]:
    """``count`` user messages, each its own turn."""
    return [plain(seq, "user/message", {"text": f"q{seq}"}, surfaceOp="append") for seq in range(count)]


async def test_an_unknown_session_is_refused_by_every_read(units: Units) -> None:
    with pytest.raises(SessionNotFoundError):
        pages.info(units.cursor, units.sql, "nope")
    with pytest.raises(SessionNotFoundError):
        pages.cuts_checked(units.cursor, units.sql, "nope", 5, 2)
    with pytest.raises(SessionNotFoundError):
        pages.stored_checked(units.cursor, units.sql, units.lines, "nope", 0, 5, False)
    with pytest.raises(SessionNotFoundError):
        pages.page_inline(units.cursor, units.sql, units.lines, "nope", None, None, 2, None, 4)


async def test_a_page_reads_its_cut_and_the_records_from_it(units: Units) -> None:
    create(units, "s")
    append(units, "s", turns(10))
    read, complete = pages.page_inline(units.cursor, units.sql, units.lines, "s", None, None, 3, None, 4)
    assert complete and read.to_seq == 10 and read.info.head_seq == 9
    assert read.cuts == pages.cuts(units.cursor, units.sql, "s", 10, 3)
    assert read.stored == pages.stored(units.cursor, units.sql, units.lines, "s", read.cuts[-1], 10)
    assert read.stored[0].seq <= read.cuts[-1] and read.stored[-1].end == 10


async def test_a_cut_past_the_walk_allowed_is_finished_by_page_walked(units: Units) -> None:
    create(units, "s")
    append(units, "s", turns(10))
    short, complete = pages.page_inline(units.cursor, units.sql, units.lines, "s", None, None, 3, None, 0)
    assert not complete and (short.cuts, short.stored) == ([], [])
    walked = pages.page_walked(units.cursor, units.sql, units.lines, "s", short.info, short.to_seq, 3, None)
    whole, _ = pages.page_inline(units.cursor, units.sql, units.lines, "s", None, None, 3, None, 4)
    assert walked == whole


async def test_an_empty_or_refused_page_reads_nothing_and_says_which(units: Units) -> None:
    create(units, "s")
    empty, _ = pages.page_inline(units.cursor, units.sql, units.lines, "s", None, None, 3, None, 4)
    assert (empty.to_seq, empty.cuts, empty.stored, empty.beyond_head) == (0, [], [], False)
    append(units, "s", turns(2))
    beyond, _ = pages.page_inline(units.cursor, units.sql, units.lines, "s", 7, None, 3, None, 4)
    assert (beyond.cuts, beyond.stored, beyond.beyond_head) == ([], [], True)


async def test_records_too_large_for_the_loop_are_left_to_a_thread(units: Units) -> None:
    create(units, "s")
    append(units, "s", [Event("tool/result", 0, 0, {"text": "a" * 100_000})])
    assert pages.stored_checked(units.cursor, units.sql, units.lines, "s", 0, 1, True) is None
    found = pages.stored_checked(units.cursor, units.sql, units.lines, "s", 0, 1, False)
    assert found is not None and [record.seq for record in found] == [0]


async def test_children_are_the_sessions_whose_parent_it_is(units: Units) -> None:
    create(units, "s")
    assert pages.children(units.cursor, units.sql, "s") == []

"""PostgreSQL's page read (persistence/sql/pg_pages.py) on an async cursor of its own: the same page as the units'."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

import persistence.sql.pages as pages
import persistence.sql.pg_pages as pg_pages
from codec import Event
from persistence.errors import SessionNotFoundError
from persistence.sql import SqlStore
from persistence.sql.pg_pages import PageRows
from testing.events import plain
from testing.postgres import PG_URL, empty_postgres
from tests.persistence.sql.conftest import Units
from tests.persistence.sql.test_writes import append, create

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set")]


@pytest.fixture
async def sql_url() -> AsyncIterator[str]:
    """Only PostgreSQL: the page read here is its own."""
    assert PG_URL
    await empty_postgres(PG_URL)
    yield PG_URL


@pytest.fixture
async def cursor(units: Units) -> AsyncIterator[psycopg.AsyncCursor[Any]]:
    assert PG_URL
    conninfo = sa.make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as connection:
        yield connection.cursor()


def turns(count: int) -> list[Event]:
    return [plain(seq, "user/message", {"text": f"q{seq}"}, surfaceOp="append") for seq in range(count)]


async def test_a_page_in_two_statements_is_the_units_page(units: Units, cursor: psycopg.AsyncCursor[Any]) -> None:
    create(units, "s")
    append(units, "s", turns(10))
    read = await pg_pages.page_rows(cursor, units.sql, "s", None, None, 3, None)
    assert isinstance(read, PageRows) and pg_pages.inline(read.rows)
    walked = pages.page_walked(units.cursor, units.sql, units.lines, "s", read.info, read.to_seq, 3, None)
    assert (read.info, read.to_seq, read.cuts, units.lines.records(read.rows)) == (
        walked.info,
        walked.to_seq,
        walked.cuts,
        walked.stored,
    )


async def test_a_cut_past_the_newest_messages_comes_back_without_cuts(
    units: Units, cursor: psycopg.AsyncCursor[Any]
) -> None:
    create(units, "s")
    append(units, "s", turns(300))
    read = await pg_pages.page_rows(cursor, units.sql, "s", None, None, 280, None)
    assert isinstance(read, PageRows) and (read.cuts, read.rows) == ([], [])
    walked = pages.page_walked(units.cursor, units.sql, units.lines, "s", read.info, read.to_seq, 280, None)
    assert walked.cuts and walked.stored[-1].end == 300


async def test_an_unknown_empty_or_refused_page(units: Units, cursor: psycopg.AsyncCursor[Any]) -> None:
    with pytest.raises(SessionNotFoundError):
        await pg_pages.page_rows(cursor, units.sql, "nope", None, None, 3, None)
    create(units, "s")
    append(units, "s", turns(2))
    beyond = await pg_pages.page_rows(cursor, units.sql, "s", 7, None, 3, None)
    assert not isinstance(beyond, PageRows) and beyond.beyond_head and beyond.cuts == []


async def test_the_store_reads_a_page_through_it(units: Units) -> None:
    assert PG_URL
    create(units, "s")
    append(units, "s", turns(4))
    store = await SqlStore.open(PG_URL)
    try:
        read = await store.read_page("s", through=None, before=None, max_messages=2)
    finally:
        await store.close()
    assert read.to_seq == 4 and read.cuts and read.stored[-1].end == 4


async def test_a_long_walk_with_a_byte_target_sizes_its_cuts_on_postgresql(units: Units) -> None:
    """The walk's byte target reads the cuts' stored bytes in one statement, which PostgreSQL once refused."""
    create(units, "s")
    append(units, "s", turns(10))
    info = pages.info(units.cursor, units.sql, "s")
    walked = pages.page_walked(units.cursor, units.sql, units.lines, "s", info, 10, 5, 1)
    whole = pages.page_walked(units.cursor, units.sql, units.lines, "s", info, 10, 5, None)
    assert len(whole.cuts) > 1 and len(walked.stored) < len(whole.stored)
    assert [record.seq for record in walked.stored] == [record.seq for record in whole.stored][-len(walked.stored) :]

"""A SQL delete (persistence/sql/deletion.py): the session goes at once, its records a batch at a time after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from codec import Event, SessionHeader
from persistence.errors import SessionNotFoundError, StoreError
from persistence.sql import SqlStore, records_table
from persistence.sql.deletion import PURGE_ROWS, Deletion
from persistence.sql.schema import purges_table

pytestmark = pytest.mark.anyio


def notes(first: int, count: int) -> list[Event]:
    # Each one its own record: a note is no delta, so nothing packs them together.
    return [Event("note", seq, seq, {"n": seq}) for seq in range(first, first + count)]


def rows(url: str, table: sa.Table) -> list[Any]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        found = list(conn.execute(sa.select(table)).all())
    engine.dispose()
    return found


async def big(store: SqlStore, session_id: str, count: int) -> None:
    await store.create_session(SessionHeader(id=session_id, createdAt=1))
    for first in range(0, count, 200):
        await store.append(session_id, notes(first, min(200, count - first)))


async def test_a_delete_removes_the_records_in_batches_after_the_session(
    sql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await SqlStore.open(sql_url)
    count = PURGE_ROWS * 3 + 7
    await big(store, "big", count)
    await big(store, "other", 5)
    batches: list[bool] = []
    purge_some = Deletion.purge_some

    def counted(self: Deletion, cursor: Any, session_id: str) -> bool:
        batches.append(more := purge_some(self, cursor, session_id))
        return more

    monkeypatch.setattr(Deletion, "purge_some", counted)
    try:
        assert await store.delete_session("big") == ["big"]
        # A first batch in the delete's own unit, two more full ones, then the rest: each on its own.
        assert batches == [True, True, False]
        assert await store.read_events("other", 0, 5) == notes(0, 5)
    finally:
        await store.close()
    assert {row.session_id for row in rows(sql_url, records_table)} == {"other"}
    assert rows(sql_url, purges_table) == []


def cut_purges(sql_url: str) -> None:
    """As a crash between the deletes' units and the end of their purges leaves them: rows gone, records named."""
    engine = sa.create_engine(sql_url)
    with engine.begin() as conn:
        for session_id in ("cut", "again"):
            conn.execute(
                sa.delete(sa.table("history_messages", sa.column("session_id"))).where(
                    sa.column("session_id") == session_id
                )
            )
            conn.execute(sa.delete(sa.table("history_sessions", sa.column("id"))).where(sa.column("id") == session_id))
            conn.execute(sa.insert(purges_table).values(session_id=session_id))
    engine.dispose()


async def test_records_a_crash_left_behind_are_never_read_and_go_when_the_store_opens(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    await big(store, "cut", 300)
    await big(store, "again", 300)
    await store.close()
    cut_purges(sql_url)
    assert len(rows(sql_url, records_table)) == 600

    store = await SqlStore.open(sql_url)
    try:
        assert rows(sql_url, purges_table) == [] and rows(sql_url, records_table) == []
        with pytest.raises(SessionNotFoundError):
            await store.read_stored("cut", 0, 10)
    finally:
        await store.close()


async def test_a_store_opened_beside_another_leaves_cut_purges_to_recover(tmp_path: Path) -> None:
    """A worker restarted beside a running one must not stall it with a whole purge at open (SQLite)."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    store = await SqlStore.open(url)
    await big(store, "cut", 300)
    await big(store, "again", 300)
    await store.close()
    cut_purges(url)
    running = await SqlStore.open(url)  # alone: it finishes them at open
    try:
        assert rows(url, purges_table) == [] and rows(url, records_table) == []
        await big(running, "cut", 300)
        cut_purges(url)  # as a worker killed mid-purge leaves them, beside `running`
        restarted = await SqlStore.open(url)  # beside `running`: the purges wait for the sweep's turn
        try:
            assert sorted(rows(url, purges_table)) == [("again",), ("cut",)]
            assert len(rows(url, records_table)) == 300
            await restarted.recover()
            assert rows(url, purges_table) == [] and rows(url, records_table) == []
        finally:
            await restarted.close()
    finally:
        await running.close()


async def test_recover_with_nothing_cut_changes_nothing(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    try:
        await big(store, "kept", 10)
        await store.recover()
        assert len(rows(sql_url, records_table)) == 10
    finally:
        await store.close()


async def test_an_id_created_again_never_reads_the_records_its_last_incarnation_left(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    try:
        await big(store, "s", 300)
        # The delete's own unit alone, as if its purge were still to come (or another process ran it).
        tree = ["s"]
        await store._writer.run(lambda cursor: store._deletion.run(cursor, "s", store._tails.forget), "s")
        # Its unit removed the first batch of records; the rest wait for the purge.
        assert len(rows(sql_url, records_table)) == 300 - PURGE_ROWS and rows(sql_url, purges_table) == [("s",)]
        with pytest.raises(SessionNotFoundError):
            await store.read_stored("s", 0, 300)
        with pytest.raises(SessionNotFoundError):
            await store.read_page("s", through=None, before=None, max_messages=5)
        await store.create_session(SessionHeader(id="s", createdAt=2))
        assert await store.read_stored("s", 0, 300) == [] and rows(sql_url, purges_table) == []
        await store.append("s", notes(0, 3))
        assert await store.read_events("s", 0, 300) == notes(0, 3)
        # A purge that comes late, where this database runs it, finds the id no longer named and
        # leaves the new incarnation alone.
        assert not await store._backend.purge("s", lambda cursor: store._deletion.purge_some(cursor, "s"))
        assert await store.read_events("s", 0, 300) == notes(0, 3) and tree == ["s"]
    finally:
        await store.close()


async def test_a_purge_that_fails_leaves_the_delete_done_and_the_rest_named_for_the_next_open(
    sql_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = await SqlStore.open(sql_url)
    await big(store, "big", PURGE_ROWS * 3)
    await big(store, "other", 5)

    async def failing(*args: object) -> bool:
        raise StoreError("store unavailable: the connection was cut")

    monkeypatch.setattr(store._backend, "purge", failing)
    try:
        # Durable at the delete's own unit: the answer is the tree, whatever its purge meets after.
        assert await store.delete_session("big") == ["big"]
        with pytest.raises(SessionNotFoundError):
            await store.read_stored("big", 0, 10)
        assert "not purged yet" in caplog.text
    finally:
        await store.close()
    assert rows(sql_url, purges_table) == [("big",)]
    store = await SqlStore.open(sql_url)
    try:
        assert rows(sql_url, purges_table) == [] and {row.session_id for row in rows(sql_url, records_table)} == {
            "other"
        }
    finally:
        await store.close()

"""SQLite's notices, gate and turn: two stores on one file play two processes."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from codec import SessionHeader
from persistence.errors import SeqConflictError, StoreError
from persistence.notice_log import LogListener
from persistence.notify import STREAM_NOTICE, Notice
from persistence.sql import SqlStore
from persistence.sql.sqlite import SqliteGroups
from persistence.streams import CreateRequest
from testing.events import plain

pytestmark = pytest.mark.anyio


class Heard:
    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self.connects = 0

    def on_head(self, heard: Notice) -> None:
        self.notices.append(heard)

    async def on_connect(self) -> None:
        self.connects += 1


async def until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(30):
        while not condition():
            await anyio.sleep(0.001)


@contextlib.asynccontextmanager
async def two_stores(tmp_path: Path) -> AsyncIterator[tuple[SqlStore, SqlStore, Heard]]:
    """Store ``a`` listening, store ``b`` writing, on one file; what ``a`` heard."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    a, b = await SqlStore.open(url), await SqlStore.open(url)
    listener = a.listener()
    assert isinstance(listener, LogListener) and a.listener() is listener
    heard = Heard()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.run, heard.on_head, heard.on_connect)
            await until(lambda: heard.connects == 1)
            assert listener.state == "listening"
            yield a, b, heard
            tg.cancel_scope.cancel()
    finally:
        await b.close()
        await a.close()


def told(heard: Heard) -> list[tuple[Any, ...]]:
    return [(n.session_id, n.head, n.closed, n.deleted) for n in heard.notices]


async def test_appends_closes_and_deletes_of_another_store_are_heard_once_in_order(tmp_path: Path) -> None:
    async with two_stores(tmp_path) as (a, b, heard):
        await b.create_session(SessionHeader(id="s", createdAt=1))
        await b.append("s", [plain(0), plain(1)])
        with pytest.raises(SeqConflictError):
            await b.append("s", [plain(5)])  # rolled back to its savepoint: no notice
        await b.append("s", [plain(0), plain(1)])  # a re-send moves nothing: no notice
        await a.append("s", [plain(2)])  # a's own: a publishes it from memory
        await b.append("s", [plain(3)])
        await b.close_session("s", closed_at=5)
        await b.close_session("s", closed_at=6)  # closed already: no notice
        parent = await b.create_session(SessionHeader(id="t", createdAt=1))
        child = await b.create_session(SessionHeader(id="c", createdAt=1, origin="subagent", parentSession="t"))
        await b.delete_session("t")
        await until(lambda: len(heard.notices) == 5)
    assert told(heard) == [
        ("s", 1, False, False),
        ("s", 3, False, False),
        ("s", 3, True, False),
        ("c", -1, False, True),
        ("t", -1, False, True),
    ]
    assert [n.incarnation for n in heard.notices[3:]] == [child.header.incarnation, parent.header.incarnation]


async def test_a_group_whose_commit_fails_tells_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with two_stores(tmp_path) as (_, b, heard):
        await b.create_session(SessionHeader(id="s", createdAt=1))
        told_before = SqliteGroups._before_commit

        def failing(self: SqliteGroups, cursor: Any) -> None:
            told_before(self, cursor)  # the rows are written, then the transaction goes
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(SqliteGroups, "_before_commit", failing)
        with pytest.raises(StoreError):
            await b.append("s", [plain(0)])
        monkeypatch.undo()
        await b.append("s", [plain(0), plain(1)])
        await until(lambda: len(heard.notices) == 1)
    assert told(heard) == [("s", 1, False, False)]


async def test_a_durable_stream_write_tells_its_stream(tmp_path: Path) -> None:
    async with two_stores(tmp_path) as (_, b, heard):
        assert b.streams is not None
        await b.streams.create(CreateRequest(name="ds", owner="o", content_type="text/plain", body=b"a"))
        await until(lambda: len(heard.notices) == 1)
    assert heard.notices[0].session_id == STREAM_NOTICE + "ds"


async def test_one_store_of_a_file_sweeps_at_a_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    a, b = await SqlStore.open(url), await SqlStore.open(url)
    try:
        async with a.sweeping() as mine:
            assert mine
            async with b.sweeping() as theirs:
                assert not theirs
        async with b.sweeping() as theirs:
            assert theirs
    finally:
        await b.close()
        await a.close()
    assert not (tmp_path / "h.db-turn").exists() and not (tmp_path / "h.db-write").exists()


async def test_an_in_memory_database_has_no_listener_and_always_sweeps() -> None:
    store = await SqlStore.open("sqlite://")
    try:
        assert store.listener() is None
        async with store.sweeping() as mine:
            assert mine
    finally:
        await store.close()


async def test_a_unit_rolled_back_to_its_savepoint_takes_its_notices_with_it(tmp_path: Path) -> None:
    async with two_stores(tmp_path) as (_, b, heard):
        dialect = b._backend.dialect

        def fails(cursor: Any) -> None:
            dialect.told(cursor, "gone", 1)
            raise StoreError("refused after telling")

        def tells(cursor: Any) -> None:
            dialect.told(cursor, "kept", 2)

        async def submit(work: Callable[[Any], None]) -> None:
            with contextlib.suppress(StoreError):
                await b._writer.run(work, work.__name__)

        for _ in range(3):
            async with anyio.create_task_group() as tg:
                # Submitted together, they mostly share a group: the failed one's notice goes all the same.
                for work in (fails, tells):
                    tg.start_soon(submit, work)
        await until(lambda: len(heard.notices) == 3)
    assert told(heard) == [("kept", 2, False, False)] * 3

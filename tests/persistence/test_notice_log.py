"""The notices log: rows written in a writer's transaction, read by another connection's listener."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import anyio
import pytest

from persistence import notice_log
from persistence.notice_log import CREATE, JOINED, LogListener, tell
from persistence.notify import Notice, notice

pytestmark = pytest.mark.anyio


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "notices.db"
    sql(path, "PRAGMA journal_mode=WAL")
    sql(path, CREATE)
    yield path


def sql(path: Path, statement: str) -> list[tuple[object, ...]]:
    """One statement in a connection of its own, committed and closed."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        return conn.execute(statement).fetchall()


def write(path: Path, origin: str, *payloads: str, commit: bool = True) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        tell(conn.cursor(), origin, payloads)
        conn.execute("COMMIT" if commit else "ROLLBACK")
    finally:
        conn.close()


class Heard:
    """What a listener passed on: notices, forgets and resyncs, in order."""

    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self.forgotten: list[str | None] = []
        self.connects = 0

    def on_head(self, heard: Notice) -> None:
        self.notices.append(heard)

    async def on_connect(self) -> None:
        self.connects += 1

    def deleted(self, session_id: str | None) -> None:
        self.forgotten.append(session_id)

    def heads(self) -> list[tuple[str, int]]:
        return [(n.session_id, n.head) for n in self.notices]


async def until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(30):
        while not condition():
            await anyio.sleep(0.001)


@asynccontextmanager
async def listening(path: Path, **options: object) -> AsyncIterator[tuple[LogListener, Heard]]:
    heard = Heard()
    listener = LogListener(path, "me", deleted=heard.deleted, poll=0, **options)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run, heard.on_head, heard.on_connect)
        await until(lambda: heard.connects == 1)
        yield listener, heard
        tg.cancel_scope.cancel()


async def test_rows_of_others_are_heard_once_in_order_and_own_rows_are_not(log: Path) -> None:
    write(log, "other", notice("a", 0, "other"))  # before the listener: covered by its resync, not heard
    async with listening(log) as (listener, heard):
        assert listener.state == "listening"
        assert heard.forgotten == [None]
        write(log, "other", notice("a", 1, "other"), notice("b", 0, "other"))
        write(log, "me", notice("a", 2, "me"))
        write(log, "other", notice("a", 3, "other", closed=True))
        await until(lambda: len(heard.notices) == 3)
        write(log, "other", notice("c", 0, "other"))
        await until(lambda: len(heard.notices) == 4)
    assert heard.heads() == [("a", 1), ("b", 0), ("a", 3), ("c", 0)]
    assert heard.notices[2].closed
    assert heard.connects == 1


async def test_a_rolled_back_row_is_never_heard(log: Path) -> None:
    async with listening(log) as (_, heard):
        write(log, "other", notice("a", 1, "other"), commit=False)
        write(log, "other", notice("b", 1, "other"))
        await until(lambda: len(heard.notices) == 1)
    assert heard.heads() == [("b", 1)]


async def test_a_delete_is_forgotten_before_it_is_passed_on(log: Path) -> None:
    async with listening(log) as (_, heard):
        write(log, "other", notice("a", -1, "other", deleted=True, incarnation="i1"))
        await until(lambda: len(heard.notices) == 1)
    assert heard.forgotten == [None, "a"]
    assert heard.notices[0].deleted and heard.notices[0].incarnation == "i1"


async def test_catch_up_hears_at_once_what_no_poll_has_read_yet(log: Path) -> None:
    heard = Heard()
    listener = LogListener(log, "me", poll=3600)
    listener.catch_up()  # not connected yet: nothing to hear, nothing fails
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run, heard.on_head, heard.on_connect)
        await until(lambda: heard.connects == 1)
        write(log, "other", notice("a", 5, "other"))
        listener.catch_up()
        assert heard.heads() == [("a", 5)]
        listener.catch_up()  # nothing moved: nothing read again
        assert heard.heads() == [("a", 5)]
        tg.cancel_scope.cancel()


async def test_a_reader_left_behind_by_the_trim_resyncs(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notice_log, "KEPT", 4)
    monkeypatch.setattr(notice_log, "TRIM_EVERY", 2)
    async with listening(log) as (listener, heard):
        # One transaction: no poll can read the first rows before the trim removes them.
        write(log, "other", *[notice("a", head, "other") for head in range(10)])
        assert sql(log, "SELECT n FROM history_notices") == [(7,), (8,), (9,), (10,)]
        listener.catch_up()  # forgets at once; the owner resyncs at the next tick
        assert heard.forgotten == [None, None]
        await until(lambda: heard.connects == 2)
        write(log, "other", notice("a", 10, "other"))
        await until(lambda: len(heard.notices) == 1)
    assert heard.heads() == [("a", 10)]


def test_the_trim_keeps_the_newest_rows_and_never_reuses_a_number(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notice_log, "KEPT", 3)
    monkeypatch.setattr(notice_log, "TRIM_EVERY", 4)
    write(log, "o", *[notice("a", head, "o") for head in range(5)])
    write(log, "o", notice("a", 5, "o"))
    # 1..5 crossed 4: the rows up to 5 - 3 went; 6 crossed nothing.
    assert sql(log, "SELECT n FROM history_notices") == [(3,), (4,), (5,), (6,)]


async def test_a_log_that_went_back_resyncs(log: Path) -> None:
    write(log, "other", notice("a", 0, "other"), notice("a", 1, "other"))
    async with listening(log) as (_, heard):
        sql(log, "DELETE FROM history_notices")
        await until(lambda: heard.connects == 2)
        write(log, "other", notice("b", 0, "other"))
        await until(lambda: len(heard.notices) == 1)
    assert heard.heads() == [("b", 0)]
    assert heard.forgotten == [None, None]


async def test_a_joined_row_of_another_process_resyncs(log: Path) -> None:
    async with listening(log) as (_, heard):
        write(log, "other", notice(JOINED, -1, "other"))
        await until(lambda: heard.connects == 2)
    assert heard.notices == []


async def test_announce_is_called_at_each_connect_once_the_position_is_read(log: Path) -> None:
    write(log, "me", notice("x", 0, "me"))
    announced: list[int] = []

    def announce() -> None:
        write(log, "me", notice(JOINED, -1, "me"))
        announced.append(1)

    async with listening(log, announce=announce) as (_, heard):
        write(log, "other", notice("a", 0, "other"))
        await until(lambda: len(heard.notices) == 1)
    assert announced == [1]
    assert heard.connects == 1  # its own joined row is not a reason to resync


async def test_a_malformed_row_is_skipped_with_one_warning(log: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with listening(log) as (_, heard):
        with caplog.at_level(logging.WARNING, logger="persistence.notice_log"):
            write(log, "other", "{not json", notice("a", 1, "other"))
            await until(lambda: len(heard.notices) == 1)
    assert heard.heads() == [("a", 1)]
    assert [r.getMessage() for r in caplog.records].count("ignoring a malformed head notice '{not json'") == 1


async def test_the_state_goes_reconnecting_when_the_log_fails_and_back(log: Path) -> None:
    missing = log.with_name("missing.db")
    heard = Heard()
    listener = LogListener(missing, "me", poll=0)
    assert listener.state == "connecting"
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run, heard.on_head, heard.on_connect)
        await until(lambda: listener.state == "reconnecting")  # no file: none is created
        assert not missing.exists()
        log.rename(missing)
        await until(lambda: heard.connects == 1)
        assert listener.state == "listening"
        sql(missing, "DROP TABLE history_notices")
        await until(lambda: listener.state == "reconnecting")
        sql(missing, CREATE)
        await until(lambda: heard.connects == 2)
        assert listener.state == "listening"
        tg.cancel_scope.cancel()


async def test_a_failure_met_by_catch_up_makes_run_reconnect(log: Path) -> None:
    heard = Heard()
    listener = LogListener(log, "me", poll=0.05)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run, heard.on_head, heard.on_connect)
        await until(lambda: heard.connects == 1)
        sql(log, "DROP TABLE history_notices")  # moves data_version, so catch_up reads
        listener.catch_up()  # the failure is kept for run, never raised into a request
        await until(lambda: listener.state == "reconnecting")
        tg.cancel_scope.cancel()

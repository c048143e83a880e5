"""PostgreSQL's group writer: a group's appends in one statement, each unit still atomic and failing alone."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Final

import anyio.to_thread
import psycopg
import pytest
import sqlalchemy as sa

from codec import DeltaData, Event, SessionHeader, TextDelta
from persistence.base import AppendResult
from persistence.batch import prepare_batch
from persistence.errors import SeqConflictError, SessionNotFoundError, StoreError
from persistence.memory import MemoryStore
from persistence.rules import Life, next_plan
from persistence.sealing import SINGLES
from persistence.search import MAX_PASSAGE, Passage
from persistence.sql import SqlStore
from persistence.sql.pg_passages import LAST_PASSAGES
from persistence.sql.schema import passages_table
from persistence.sql.writes import Append
from testing.postgres import PG_URL, empty_postgres

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set")]


def event(seq: int, text: str = "") -> Event:
    return Event("x", seq, 0, {"text": text or f"e{seq}"})


class Recording(psycopg.Cursor[Any]):
    """A cursor that keeps the first line of every statement the writer sends."""

    sent: list[str] = []

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        Recording.sent.append(str(query).strip().splitlines()[0])
        return super().execute(query, params, **kwargs)


@pytest.fixture
async def store() -> AsyncIterator[SqlStore]:
    """A store with sessions a, b, c and d, each holding event 0, written by this store (so its writer knows them)."""
    assert PG_URL
    await empty_postgres(PG_URL)
    opened = await SqlStore.open(PG_URL)
    for session in "abcd":
        await opened.create_session(SessionHeader(id=session, createdAt=0))
        await opened.append(session, [event(0)])
    try:
        yield opened
    finally:
        await opened.close()


def unit(store: SqlStore, session: str, events: Sequence[Event]) -> Append:
    batch = prepare_batch(events) if events else None
    return Append(store._writes, session, events, batch, next_plan([e.seq for e in events]) if batch else None)


async def group(
    store: SqlStore, units: list[Any], cursor: type[Recording] = Recording
) -> tuple[list[tuple[bool, Any]], list[str]]:
    """Commit ``units`` as one group on the store's writer connection; the outcomes and the statements sent."""
    connection = store._backend.groups._connection
    assert connection is not None
    connection.cursor_factory = cursor
    Recording.sent = []
    try:
        outcomes = await anyio.to_thread.run_sync(store._backend.groups, units)
    finally:
        if store._backend.groups._connection is not None:
            store._backend.groups._connection.cursor_factory = psycopg.Cursor
    return outcomes, Recording.sent


async def heads(store: SqlStore) -> dict[str, int]:
    return {session: (await store.get_session(session)).head_seq for session in "abcd"}


async def test_a_groups_appends_are_one_statement(store: SqlStore) -> None:
    outcomes, sent = await group(store, [unit(store, s, [event(1), event(2)]) for s in "abcd"])
    assert outcomes == [(True, AppendResult(1, 2))] * 4
    assert len(sent) == 1 and sent[0].startswith("WITH locked AS MATERIALIZED")
    assert await heads(store) == {"a": 2, "b": 2, "c": 2, "d": 2}
    for session in "abcd":
        read = await store.read_page(session, through=None, before=None, max_messages=100)
        assert read.to_seq == 3 and read.stored[0].seq == 0 and read.stored[-1].end == 3


async def test_a_unit_whose_head_moved_fails_alone_and_the_others_commit(store: SqlStore) -> None:
    assert PG_URL
    other = await SqlStore.open(PG_URL)
    try:
        await other.append("b", [event(1, "theirs")])
    finally:
        await other.close()
    outcomes, sent = await group(store, [unit(store, s, [event(1, "ours")]) for s in "abc"])
    assert outcomes[0] == outcomes[2] == (True, AppendResult(1, 1))
    assert outcomes[1][0] is False and isinstance(outcomes[1][1], SeqConflictError)
    # One statement for the three; then b alone, in a savepoint of its own.
    assert sent[0].startswith("WITH locked") and sent[1:2] == ["SAVEPOINT history_unit"]
    assert not any(line.startswith("WITH locked") for line in sent[1:])
    assert await heads(store) == {"a": 1, "b": 1, "c": 1, "d": 0}
    assert b"theirs" in (await store.read_stored("b", 1, 2))[0].line
    assert b"ours" in (await store.read_stored("a", 1, 2))[0].line


async def test_units_the_statement_cannot_write_run_alone_in_the_groups_order(store: SqlStore) -> None:
    units = [
        unit(store, "a", [event(1)]),
        unit(store, "a", [event(2)]),
        unit(store, "b", [event(0)]),
        unit(store, "b", [event(5)]),
        unit(store, "c", []),
        unit(store, "nope", [event(0)]),
        unit(store, "d", [event(1)]),
    ]
    outcomes, _ = await group(store, units)
    assert outcomes[0] == (True, AppendResult(1, 1))
    assert outcomes[1] == (True, AppendResult(2, 2))
    assert outcomes[2] == (True, AppendResult(0, 0, idempotent=True))
    assert outcomes[3][0] is False and isinstance(outcomes[3][1], SeqConflictError)
    assert outcomes[4] == (True, AppendResult(1, 0))
    assert outcomes[5][0] is False and isinstance(outcomes[5][1], SessionNotFoundError)
    assert outcomes[6] == (True, AppendResult(1, 1))
    assert await heads(store) == {"a": 2, "b": 0, "c": 0, "d": 1}


async def test_a_unit_the_database_refuses_fails_alone_and_the_others_commit(store: SqlStore) -> None:
    """A stray row where c's next record goes: the statement fails, and the group runs again unit by unit."""
    assert PG_URL
    engine = sa.create_engine(PG_URL)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO history_records (session_id, seq, members, compressed, data, kind, key, time0, time1)"
            " VALUES ('c', 1, 1, false, 'stray'::bytea, 0, ''::bytea, 0, 0)"
        )
    engine.dispose()
    outcomes, sent = await group(store, [unit(store, s, [event(1)]) for s in "abcd"])
    assert [ok for ok, _ in outcomes] == [True, True, False, True]
    assert isinstance(outcomes[2][1], StoreError)
    assert sent.count("SAVEPOINT history_unit") == 4
    assert await heads(store) == {"a": 1, "b": 1, "c": 0, "d": 1}
    # The retry forgot what the failed statement taught the writer, and the next group is one statement again.
    outcomes, sent = await group(store, [unit(store, s, [event(2)]) for s in "abd"])
    assert outcomes == [(True, AppendResult(2, 2))] * 3 and len(sent) == 1


async def test_a_group_cut_after_its_statement_commits_nothing_and_the_writer_recovers(store: SqlStore) -> None:
    def cut(cursor: Any) -> None:
        cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    units: list[Any] = [unit(store, s, [event(1)]) for s in "ab"]
    with pytest.raises(psycopg.Error):
        await group(store, [*units, cut])
    assert len(store._tails) == 0
    assert await heads(store) == {"a": 0, "b": 0, "c": 0, "d": 0}
    assert await store.append("a", [event(1)]) == AppendResult(1, 1)
    assert (await store.read_stored("a", 0, 2))[-1].end == 2


# The first line of the group's read of its sessions' last passages.
READ_LAST: Final = LAST_PASSAGES.strip().splitlines()[0]


def token(seq: int) -> Event:
    return Event("assistant/chunk", seq, 1_000 + seq, DeltaData(1, 1, TextDelta(0, f" t{seq}")))


async def test_sealing_appends_join_the_statement_and_store_what_the_unit_by_unit_path_stores(
    store: SqlStore, tmp_path: Path
) -> None:
    """Token deltas compact the open run every sixteen appends, and its rows merge: each group stays one statement,
    and stores what SQLite does."""
    reference = await SqlStore.open(f"sqlite:///{tmp_path / 'ref.db'}")
    try:
        await reference.create_session(SessionHeader(id="a", createdAt=0))
        await reference.append("a", [event(0)])
        # The writer learns each run's lines by writing them: the first append per session may run alone.
        for session in "abcd":
            await store.append(session, [token(1)])
        await reference.append("a", [token(1)])
        # Past three times SINGLES tokens: singles merge into rows, and then two rows merge.
        last = 3 * SINGLES + 2
        for seq in range(2, last):
            outcomes, sent = await group(store, [unit(store, s, [token(seq)]) for s in "abcd"])
            assert outcomes == [(True, AppendResult(seq, seq))] * 4
            # Each batch continues its block: one read of the four blocks' last passages, then the one statement.
            assert sent == [READ_LAST, "WITH locked AS MATERIALIZED ("], (seq, sent)
            await reference.append("a", [token(seq)])
        expected = await reference.read_stored("a", 0, last)
        assert [record.members for record in expected][:2] == [1, 2 * SINGLES], "the rows never merged"
        for session in "abcd":
            assert await store.read_stored(session, 0, last) == expected
    finally:
        await reference.close()


def said(seq: int, words: str) -> Event:
    return Event("user/message", seq, 1_000 + seq, {"text": words})


def streamed(seq: int, piece: str, *, index: int = 0) -> Event:
    return Event("assistant/chunk", seq, 1_000 + seq, DeltaData(1, 1, TextDelta(index, piece)))


# Groups of appends to a, b, c and d (after event 0): blocks begun, continued across groups (c's past a
# passage's length, so its rewrite is cut and what follows is inserted after it), and broken off.
PASSAGE_GROUPS: Final = [
    {
        "a": [streamed(1, "The ra")],
        "b": [said(1, "hello world")],
        "c": [streamed(1, "word " * (MAX_PASSAGE // 5 - 10))],
        "d": [],
    },
    {"a": [streamed(2, "te lim")], "b": [streamed(2, "a new block")], "c": [streamed(2, "more " * 30)]},
    {
        "a": [streamed(3, "it is 42"), said(4, "thanks"), streamed(5, "and ag")],
        "b": [streamed(3, " goes on")],
        "c": [streamed(3, "still more")],
        "d": [streamed(1, "other index", index=2)],
    },
    {"a": [streamed(6, "ain")], "b": [streamed(4, "elsewhere", index=1)], "d": [said(2, "done")]},
]


def passage_rows() -> dict[str, list[Passage]]:
    """Every session's passages as PostgreSQL holds them, in id order."""
    assert PG_URL
    p = passages_table.c
    engine = sa.create_engine(PG_URL)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(p.session_id, p.seq, p.last_seq, p.time, p.kind, p.body, p.run).order_by(p.id))
        held: dict[str, list[Passage]] = {}
        for row in rows:
            held.setdefault(row[0], []).append(Passage(*row[1:]))
    engine.dispose()
    return held


async def one_at_a_time(groups: list[dict[str, list[Event]]]) -> dict[str, list[Passage]]:
    """The passages of the groups' appends made one at a time, on the memory store."""
    reference = MemoryStore()
    for session in "abcd":
        await reference.create_session(SessionHeader(id=session, createdAt=0))
        await reference.append(session, [event(0)])
    for appends in groups:
        for session, events in appends.items():
            if events:
                await reference.append(session, events)
    passages = {session: [p for _, p in reference._sessions[session].passages] for session in "abcd"}
    await reference.close()
    return {session: found for session, found in passages.items() if found}


async def test_a_groups_passages_are_those_of_its_appends_one_at_a_time_in_two_statements(store: SqlStore) -> None:
    for appends in PASSAGE_GROUPS:
        units = [unit(store, session, events) for session, events in appends.items() if events]
        outcomes, sent = await group(store, units)
        assert all(ok for ok, _ in outcomes)
        # However many sessions: one read of the last passages (some batch starts with a delta), one statement.
        assert sent == [READ_LAST, "WITH locked AS MATERIALIZED ("]
    assert passage_rows() == await one_at_a_time(PASSAGE_GROUPS)
    assert len(passage_rows()["c"]) == 2, "c's block never passed a passage's length"


async def test_a_passage_a_reindex_replaced_before_the_statement_is_continued_all_the_same(store: SqlStore) -> None:
    """The read takes no lock: a reindex may give a's and c's last passages new rows before the statement rewrites
    them (c's rewrite is cut, and the statement must not insert what comes after it either)."""
    assert PG_URL
    await group(store, [unit(store, session, events) for session, events in PASSAGE_GROUPS[0].items() if events])

    class Reindexed(Recording):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            if str(query).lstrip().startswith("WITH locked"):
                assert PG_URL
                with psycopg.connect(sa.make_url(PG_URL).set(drivername="postgresql").render_as_string(False)) as other:
                    other.execute(
                        "WITH old AS (DELETE FROM search_passages WHERE session_id IN ('a', 'c') RETURNING *)"
                        " INSERT INTO search_passages (session_id, seq, last_seq, time, kind, run, body, terms)"
                        " SELECT session_id, seq, last_seq, time, kind, run, body, terms FROM old ORDER BY id"
                    )
            return super().execute(query, params, **kwargs)

    units = [unit(store, session, events) for session, events in PASSAGE_GROUPS[1].items() if events]
    outcomes, sent = await group(store, units, Reindexed)
    assert all(ok for ok, _ in outcomes)
    # The read, the statement (which wrote b's passage only), then a's and c's, each read again and rewritten alone.
    assert [line.split(" ")[0] for line in sent] == ["SELECT", "WITH", *["SELECT", "UPDATE"] * 2]
    assert passage_rows() == await one_at_a_time(PASSAGE_GROUPS[:2])


# The sweeper (docs/protocol.md §6.5): one at a time in the whole deployment.


async def test_one_store_at_a_time_may_sweep(store: SqlStore) -> None:
    assert PG_URL
    other = await SqlStore.open(PG_URL)
    try:
        async with store.sweeping() as first:
            async with other.sweeping() as second:
                assert (first, second) == (True, False)
        async with other.sweeping() as after:
            assert after
    finally:
        await other.close()


async def test_two_services_sweeping_at_once_never_delete_at_once(store: SqlStore) -> None:
    from history_service.service import HistoryService
    from history_service.settings import Settings

    assert PG_URL
    other = await SqlStore.open(PG_URL)
    for k in range(12):
        await store.create_session(SessionHeader(id=f"s{k}", createdAt=k, expiresAt=1_000))
    deleting, overlaps = {"store": 0, "other": 0}, 0

    def counted(opened: SqlStore, name: str) -> None:
        delete = opened.delete_session

        async def delete_session(session_id: str, *, life: Life | None = None) -> list[str]:
            nonlocal overlaps
            deleting[name] += 1
            overlaps += all(deleting.values())
            try:
                await anyio.sleep(0.01)  # long enough for the other sweeper to meet it, were it let in
                return await delete(session_id, life=life)
            finally:
                deleting[name] -= 1

        opened.delete_session = delete_session  # type: ignore[method-assign]

    counted(store, "store")
    counted(other, "other")
    settings = Settings(sweep_interval=0, sweep_batch=3)
    services = [HistoryService(settings, opened) for opened in (store, other)]
    swept: list[int] = []
    try:

        async def sweep(service: HistoryService) -> None:
            done = await service.sweep()
            swept.append(0 if done is None else len(done.deleted))

        async with anyio.create_task_group() as tasks:
            for service in services:
                tasks.start_soon(sweep, service)
    finally:
        await other.close()
    assert overlaps == 0 and sum(swept) == 12 and sorted(swept)[0] in (0, 12)
    assert await store.expired(now=2_000, retention_ms=None, limit=None) == []


async def test_a_store_closed_under_a_read_its_caller_gave_up_on_waits_for_it_and_closes_its_connection() -> None:
    """A read cancelled by its caller (the app shutting down, a bound) goes on in its thread: close waits for it."""
    assert PG_URL
    await empty_postgres(PG_URL)
    store = await SqlStore.open(PG_URL)
    used: list[Any] = []

    def slow(cursor: Any) -> None:
        used.append(cursor.connection)
        cursor.execute("SELECT pg_sleep(1)")

    with anyio.move_on_after(0.2):
        await store._backend.read(slow)
    await store.close()
    assert len(used) == 1 and used[0].closed

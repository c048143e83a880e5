"""SQL store specifics: WAL, data compression, the schema version and its upgrade, the listing's index."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
import sqlalchemy as sa

from codec import (
    Event,
    SessionHeader,
    StoredRecord,
    decode_event,
    encode,
    encode_lines,
    pack,
    pack_page,
    stored_record,
)
from history_service.scenarios import multi_turn
from persistence.base import SessionKey, SessionSummary
from persistence.clock import now_ms
from persistence.errors import CorruptLogError, SchemaVersionError, StoreError
from persistence.notice_log import CREATE
from persistence.search import SearchRequest, parse
from persistence.sql import SqlStore, meta_table, records_table, sessions_table
from persistence.sql.reads import KeptReaders
from persistence.synopsis import EMPTY, Synopsis, synopsis_of
from persistence.url import open_store
from testing.events import chunk_event, plain, text
from testing.postgres import PG_URL, empty_postgres
from testing.stores import page_records

pytestmark = pytest.mark.anyio


async def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    store = await SqlStore.open(url)
    await store.close()
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()


async def test_large_data_is_compressed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    store = await SqlStore.open(url)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    small = Event("x", 0, 0, {"text": "a" * 100})
    repetitive = Event("x", 1, 0, {"text": "a" * 10_000})
    await store.append("s", [small, repetitive])
    assert await store.read_events("s", 0, 2) == [small, repetitive]
    await store.close()
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(records_table.c.seq, records_table.c.compressed, sa.func.length(records_table.c.data))
        ).all()
    engine.dispose()
    by_seq = {seq: (compressed, size) for seq, compressed, size in rows}
    assert by_seq[0][0] is False
    assert by_seq[1][0] is True and by_seq[1][1] < 1000


@pytest.mark.parametrize(
    ("text", "in_thread"),
    [("a" * 100, False), ("a" * 100_000, True), ("".join(f"{k:07d}" for k in range(40_000)), True)],
    ids=["small", "compressed", "large"],
)
async def test_sqlite_reads_on_the_event_loop_only_what_is_small_and_plain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, in_thread: bool
) -> None:
    """A compressed line may decompress to any size, so, like a large read, it is read in a worker thread."""
    store = await SqlStore.open(f"sqlite:///{tmp_path / 'h.db'}")
    await store.create_session(SessionHeader(id="s", createdAt=0))
    events = [plain(0, "user/message", {"text": "q"}, surfaceOp="append"), Event("tool/result", 1, 0, {"text": text})]
    await store.append("s", events)
    hops: list[str] = []
    original = KeptReaders.in_thread

    async def counted(self: KeptReaders, work: Any, *args: Any) -> Any:
        hops.append(work.__name__)
        return await original(self, work, *args)

    monkeypatch.setattr(KeptReaders, "in_thread", counted)
    read = await store.read_page("s", through=None, before=None, max_messages=5)
    stored = await store.read_stored("s", 0, 2)
    await store.close()
    assert [record.line for record in read.stored] == [record.line for record in stored]
    assert [decode_event(record.line) for record in stored] == events
    assert hops == (["stored", "stored_checked"] if in_thread else [])


async def test_data_is_kept_raw_when_compression_does_not_shrink_it(tmp_path: Path) -> None:
    store = await SqlStore.open(f"sqlite:///{tmp_path / 'h.db'}")

    def stored(line: bytes) -> dict[str, object]:
        return store._lines.row("s", StoredRecord(0, 1, line))

    noise = os.urandom(8000)
    assert (stored(noise)["compressed"], stored(noise)["data"]) == (False, noise)
    assert stored(b"a" * 4095)["compressed"] is False
    assert stored(b"a" * 4096)["compressed"] is True
    await store.close()


async def test_unknown_schema_version_refuses_to_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    await (await SqlStore.open(url)).close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.update(meta_table).values(value="99"))
    engine.dispose()
    with pytest.raises(
        SchemaVersionError, match="schema version '99'; this build reads version 10 and upgrades versions 1 to 9"
    ):
        await SqlStore.open(url)


async def test_reopening_keeps_the_data(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    store = await open_store(url, create=True)
    await store.create_session(SessionHeader(id="s", createdAt=0), owner="bob")
    await store.append("s", [Event("x", 0, 0, 1)])
    await store.close()
    store = await open_store(url)
    info = await store.get_session("s")
    assert (info.owner, info.head_seq) == ("bob", 0)
    await store.close()


async def test_unreachable_database_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="store unavailable"):
        await SqlStore.open(f"sqlite:///{tmp_path / 'missing-dir' / 'h.db'}")
    with pytest.raises(StoreError, match="unsupported store URL"):
        await open_store("mysql://x/y")


# Schema version 2: the upgrade of a version-1 database, and the listing's query plan.

LISTING_INDEX = "ix_history_sessions_listing"


def execute(url: str, *statements: Any) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement) if isinstance(statement, str) else statement)
    engine.dispose()


def schema_of(url: str) -> tuple[str | None, set[str], set[str | None]]:
    """The version row, the columns of history_sessions and the names of its indexes."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        version = conn.execute(sa.select(meta_table.c.value)).scalar()
        inspector = sa.inspect(conn)
        columns = {column["name"] for column in inspector.get_columns("history_sessions")}
        indexes = {index["name"] for index in inspector.get_indexes("history_sessions")}
    engine.dispose()
    return version, columns, indexes


JOIN_COLUMNS = ("kind", "key", "time0", "time1")


EXPIRY_INDEXES = {"ix_history_sessions_expires", "ix_history_sessions_touched"}
VERSION_4_COLUMNS = {"id", "header", "owner", "parent_id", "head_seq", "created_at", "closed_at"}
SYNOPSIS_COLUMNS = ("title", "title_folded", "last_event_at", "input_tokens", "output_tokens")
COLUMNS = VERSION_4_COLUMNS | {"expires_at", "touched_at"} | set(SYNOPSIS_COLUMNS)
VERSION_8_COLUMNS = COLUMNS - set(SYNOPSIS_COLUMNS)


def to_version_9(url: str) -> None:
    """Turn a version-10 database into the version-9 shape: no search passages, nor their full-text index."""
    search = ["DROP TABLE search_fts"] if url.startswith("sqlite") else []
    execute(url, *search, "DROP TABLE search_passages", sa.update(meta_table).values(value="9"))


def to_version_8(url: str) -> None:
    """Turn a version-10 database into the version-8 shape: sessions without their synopsis, nor search."""
    to_version_9(url)
    execute(
        url,
        *(f"ALTER TABLE history_sessions DROP COLUMN {name}" for name in SYNOPSIS_COLUMNS),
        sa.update(meta_table).values(value="8"),
    )


def to_version_7(url: str) -> None:
    """Turn a version-10 database into the version-7 shape: no synopsis, no notices table, no search."""
    to_version_8(url)
    execute(url, "DROP TABLE history_notices", sa.update(meta_table).values(value="7"))


def to_version_6(url: str) -> None:
    """Turn a version-9 database into the version-6 shape: no notices or subscriptions table."""
    to_version_7(url)
    execute(url, "DROP TABLE ds_subscriptions", sa.update(meta_table).values(value="6"))


def to_version_5(url: str) -> None:
    """Turn a version-9 database into the version-5 shape: no Durable Streams tables."""
    to_version_6(url)
    execute(url, "DROP TABLE ds_producers", "DROP TABLE ds_chunks", "DROP TABLE ds_streams")
    execute(url, sa.update(meta_table).values(value="5"))


def to_version_4(url: str) -> None:
    """Turn a version-9 database into the version-4 shape: no ``expires_at``, ``touched_at`` or purges table."""
    to_version_5(url)
    execute(
        url,
        *(f"DROP INDEX {name}" for name in sorted(EXPIRY_INDEXES)),
        "ALTER TABLE history_sessions DROP COLUMN expires_at",
        "ALTER TABLE history_sessions DROP COLUMN touched_at",
        "DROP TABLE history_purges",
        sa.update(meta_table).values(value="4"),
    )


def to_version_3(url: str) -> None:
    """Turn a version-9 database into the version-3 shape: sessions without ``closed_at``."""
    to_version_4(url)
    execute(url, "ALTER TABLE history_sessions DROP COLUMN closed_at", sa.update(meta_table).values(value="3"))


def to_version_2(url: str) -> None:
    """Turn a version-9 database into the version-2 shape: records without their join columns."""
    to_version_3(url)
    execute(
        url,
        *(f"ALTER TABLE history_records DROP COLUMN {name}" for name in JOIN_COLUMNS),
        sa.update(meta_table).values(value="2"),
    )


def to_version_1(url: str) -> None:
    """Turn a version-9 database into the version-1 shape: no join columns, no created_at, no listing index."""
    to_version_2(url)
    execute(
        url,
        f"DROP INDEX {LISTING_INDEX}",
        "ALTER TABLE history_sessions DROP COLUMN created_at",
        sa.update(meta_table).values(value="1"),
    )
    assert schema_of(url) == (
        "1",
        {"id", "header", "owner", "parent_id", "head_seq"},
        {"ix_history_sessions_parent_id"},
    )


async def test_a_version_7_database_gets_the_notices_table_and_keeps_its_sessions(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    await store.create_session(SessionHeader(id="s", createdAt=1))
    await store.close()
    to_version_7(sql_url)
    assert schema_of(sql_url)[0] == "7"

    store = await SqlStore.open(sql_url)
    try:
        assert schema_of(sql_url)[0] == "10"
        assert (await store.get_session("s")).head_seq == -1
        await store.append("s", [plain(0)])
    finally:
        await store.close()
    engine = sa.create_engine(sql_url)
    with engine.connect() as conn:
        # PostgreSQL has the table too, and never writes it: its notices are NOTIFYs.
        told = conn.execute(sa.text("SELECT count(*) FROM history_notices")).scalar()
    engine.dispose()
    assert told == (1 if sql_url.startswith("sqlite") else 0)


async def test_the_notices_table_is_the_one_the_log_creates(tmp_path: Path) -> None:
    """The SQLite store's table (metadata) and the JSONL sidecar's (`notice_log.CREATE`) are one table."""
    store = await SqlStore.open(f"sqlite:///{tmp_path / 'h.db'}")
    await store.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "log.db")) as conn:
        conn.execute(CREATE)
        created = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'history_notices'").fetchone()[0]
    with contextlib.closing(sqlite3.connect(tmp_path / "h.db")) as conn:
        stored = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'history_notices'").fetchone()[0]
    assert columns(created) == columns(stored) == ["n INTEGER NOT NULL", "origin TEXT NOT NULL", "notice TEXT NOT NULL"]
    assert "PRIMARY KEY (n)" in " ".join(stored.split()) and "PRIMARY KEY" in created


def columns(ddl: str) -> list[str]:
    """A CREATE TABLE's column definitions, without the key's clause, spaces made single."""
    body = ddl[ddl.index("(") + 1 : ddl.rindex(")")]
    parts = [" ".join(part.split()) for part in body.split(",")]
    return [part.removesuffix(" PRIMARY KEY") for part in parts if not part.startswith("PRIMARY KEY")]


async def test_version_1_database_is_upgraded_in_place(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    await store.create_session(SessionHeader(id="old", createdAt=100), owner="alice")
    await store.create_session(SessionHeader(id="tie-b", createdAt=200), owner="alice")
    await store.create_session(SessionHeader(id="tie-a", createdAt=200), owner="alice")
    await store.create_session(SessionHeader(id="child", createdAt=300, parentSession="tie-a", origin="subagent"))
    await store.create_session(SessionHeader(id="bobs", createdAt=400), owner="bob")
    await store.append("old", [plain(0), plain(1)])
    await store.close()
    to_version_1(sql_url)

    upgraded = now_ms()
    store = await SqlStore.open(sql_url)
    assert schema_of(sql_url) == ("10", COLUMNS, {"ix_history_sessions_parent_id", LISTING_INDEX} | EXPIRY_INDEXES)
    listed = await store.list_sessions("alice", limit=10)
    # An older session's last write is not on record: it counts as written at the upgrade.
    assert all(upgraded <= s.touched_at <= now_ms() for s in listed)
    assert [msgspec.structs.replace(s, touched_at=0) for s in listed] == [
        SessionSummary("tie-b", 200, -1, 0),
        SessionSummary("tie-a", 200, -1, 1),
        # Its synopsis is folded from its events: no title, and its last event's time.
        SessionSummary("old", 100, 1, 0, synopsis=Synopsis(last_event_at=1000)),
    ]
    assert await store.read_events("old", 0, 2) == [plain(0), plain(1)]
    await store.create_session(SessionHeader(id="newer", createdAt=500), owner="alice")
    assert [s.id for s in await store.list_sessions("alice", limit=2, before=SessionKey(500, "newer"))] == [
        "tie-b",
        "tie-a",
    ]
    await store.close()
    await (await SqlStore.open(sql_url)).close()
    assert schema_of(sql_url)[0] == "10"


async def test_version_2_records_get_their_join_columns_from_their_lines(sql_url: str) -> None:
    events = multi_turn(seed=4, turns=4) + [text(10_000 + k, k, "x" * 300) for k in range(40)]
    events = [msgspec.structs.replace(event, seq=seq) for seq, event in enumerate(events)]
    store = await SqlStore.open(sql_url)
    await store.create_session(SessionHeader(id="s", createdAt=1))
    for start in range(0, len(events), 7):
        await store.append("s", events[start : start + 7])
    before = await store.read_stored("s", 0, len(events))
    await store.close()
    # Version 2 compressed long lines too: the upgrade must read them.
    assert any(row.compressed for row in rows_of(sql_url))
    to_version_2(sql_url)

    store = await SqlStore.open(sql_url)
    assert schema_of(sql_url)[0] == "10"
    assert await store.read_stored("s", 0, len(events)) == before
    assert await page_records(store, "s", 0, len(events)) == [encode(r) for r in pack_page(events)]
    await store.append("s", [plain(len(events))])
    await store.close()


async def test_version_3_sessions_are_open_and_can_be_closed(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    await store.create_session(SessionHeader(id="s", createdAt=1))
    await store.append("s", [plain(0)])
    await store.close()
    to_version_3(sql_url)

    store = await SqlStore.open(sql_url)
    assert schema_of(sql_url)[:2] == ("10", COLUMNS)
    assert not (await store.get_session("s")).closed
    await store.append("s", [plain(1)])
    assert (await store.close_session("s", closed_at=7)).header.closedAt == 7
    await store.close()


async def test_version_4_sessions_count_as_written_at_the_upgrade_and_can_expire(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    for session_id in ("empty", "written", "closed"):
        await store.create_session(SessionHeader(id=session_id, createdAt=100))
    await store.append("written", [plain(0)])
    await store.close_session("closed", closed_at=9_000)
    await store.close()
    to_version_4(sql_url)
    if not sql_url.startswith("sqlite"):
        # Version 4 tied records to their session row, which a delete now removes first.
        fk = "FOREIGN KEY (session_id) REFERENCES history_sessions (id)"
        execute(sql_url, f"ALTER TABLE history_records ADD CONSTRAINT history_records_session_id_fkey {fk}")

    upgraded = now_ms()
    store = await SqlStore.open(sql_url)
    assert schema_of(sql_url) == ("10", COLUMNS, {"ix_history_sessions_parent_id", LISTING_INDEX} | EXPIRY_INDEXES)
    touched = {(await store.get_session(s)).touched_at for s in ("empty", "written", "closed")}
    (at,) = touched
    assert upgraded <= at <= now_ms()
    assert (await store.get_session("closed")).header.closedAt == 9_000
    assert await store.expired(now=at + 999, retention_ms=1_000, limit=None) == []
    assert sorted(await store.expired(now=at + 1_000, retention_ms=1_000, limit=None)) == ["closed", "empty", "written"]
    assert await store.expired(now=at + 1_000, retention_ms=None, limit=None) == []
    assert await store.delete_session("written") == ["written"]
    await store.close()
    engine = sa.create_engine(sql_url)
    with engine.connect() as conn:
        assert sa.inspect(conn).get_foreign_keys("history_records") == []
    engine.dispose()


def synopsis_cases() -> dict[str, list[Event]]:
    """Sessions whose synopses the upgrade must fold: titled, said (in a compressed line), tokens, deltas last."""
    said = {"content": [{"type": "text", "text": "please " * 1000}], "source": {"kind": "user"}}
    usage = {"type": "usage", "usage": {"inputTokens": 7, "outputTokens": 3}}
    message = {"message": {"role": "assistant", "content": [], "usage": {"inputTokens": 5, "outputTokens": 1}}}
    return {
        "titled": [
            Event("user/message", 0, 10, {"text": "first words"}, surfaceOp="append"),
            Event("session/title", 1, 11, {"title": "Named"}),
            chunk_event(2, 12, usage),
            Event("assistant/message", 3, 13, message),
            text(4, 14, "a"),
            text(5, 15, "b"),
        ],
        "said": [
            Event("user/message", 0, 20, {"text": "context", "source": {"kind": "plugin"}}),
            Event("user/message", 1, 21, said, surfaceOp="append"),
            plain(2, time=22),
        ],
        "deltas": [text(0, 30, "x"), text(1, 31, "y")],
        "empty": [],
    }


async def test_a_version_8_database_gets_each_sessions_synopsis_folded_from_its_events(sql_url: str) -> None:
    cases = synopsis_cases()
    store = await SqlStore.open(sql_url)
    for session_id, events in cases.items():
        await store.create_session(SessionHeader(id=session_id, createdAt=1), owner="alice")
        for start in range(0, len(events), 2):
            await store.append(session_id, events[start : start + 2])
    kept = {session_id: await store.synopsis(session_id) for session_id in cases}
    await store.close()
    # The long user message is stored compressed: the upgrade must read it.
    assert any(row.compressed for row in rows_of(sql_url))
    to_version_8(sql_url)
    assert schema_of(sql_url)[:2] == ("8", VERSION_8_COLUMNS)

    store = await SqlStore.open(sql_url)
    try:
        assert schema_of(sql_url)[:2] == ("10", COLUMNS)
        upgraded = {session_id: await store.synopsis(session_id) for session_id in cases}
        assert upgraded == kept == {session_id: synopsis_of([events]) for session_id, events in cases.items()}
        assert upgraded["titled"] == Synopsis("Named", 15, 12, 4)
        assert upgraded["said"].title == ("please " * 1000)[:199].rstrip() + "…"
        assert upgraded["deltas"] == Synopsis(None, 31) and upgraded["empty"] == EMPTY
        # The filter reads the folded titles, and appends go on moving them.
        listed = await store.list_sessions("alice", limit=10, match="NAMED")
        assert [s.id for s in listed] == ["titled"]
        await store.append("deltas", [Event("session/title", 2, 32, {"title": "Late"})])
        assert await store.synopsis("deltas") == Synopsis("Late", 32)
    finally:
        await store.close()


async def test_a_version_9_database_gets_its_search_index_built_from_its_stored_events(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    await store.create_session(SessionHeader(id="s", createdAt=1), owner="alice")
    # A long message is stored compressed, and a block's deltas come in appends of their own: the upgrade reads both.
    await store.append("s", [plain(0, "user/message", {"text": "where is the rate limit? " + "pad " * 2000})])
    for seq, piece in enumerate(["The ra", "te li", "mit is 4", "2."], start=1):
        await store.append("s", [text(seq, seq, piece)])
    await store.append("s", [plain(5, "tool/result", {"content": "北京大学 backoff_factor=2"})])
    queries = ['"rate limit"', "北京", "backoff_factor", '"limit is 42"', "pad"]

    async def hits() -> list[list[tuple[str, int, str, list[str]]]]:
        found = []
        for q in queries:
            request = SearchRequest(owner="alice", query=parse(q), limit=10, now=now_ms())
            found.append([(h.session_id, h.seq, h.kind, h.snippet) for h in (await store.search(request)).hits])
        return found

    kept = await hits()
    await store.close()
    assert all(kept) and any(row.compressed for row in rows_of(sql_url))
    to_version_9(sql_url)
    assert schema_of(sql_url)[0] == "9"

    store = await SqlStore.open(sql_url)
    try:
        assert schema_of(sql_url)[0] == "10"
        assert await hits() == kept
        # Appends go on joining a block the upgrade indexed.
        await store.append("s", [text(6, 6, "Wait, 4"), text(7, 7, "3.")])
        request = SearchRequest(owner="alice", query=parse('"wait 43"'), limit=10, now=now_ms())
        assert [(h.seq, h.kind) for h in (await store.search(request)).hits] == [(6, "assistant")]
    finally:
        await store.close()


def rows_of(url: str) -> list[Any]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = list(conn.execute(sa.select(records_table.c.seq, records_table.c.compressed)).all())
    engine.dispose()
    return rows


async def test_failed_upgrade_leaves_the_version_1_database_as_it_was(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    await store.create_session(SessionHeader(id="good", createdAt=1))
    await store.create_session(SessionHeader(id="bad", createdAt=2))
    await store.close()
    to_version_1(sql_url)
    execute(sql_url, sa.update(sessions_table).where(sessions_table.c.id == "bad").values(header=b"{not json"))
    with pytest.raises(CorruptLogError, match="session 'bad': stored header is corrupt"):
        await SqlStore.open(sql_url)
    assert schema_of(sql_url) == (
        "1",
        {"id", "header", "owner", "parent_id", "head_seq"},
        {"ix_history_sessions_parent_id"},
    )


async def test_listing_is_a_backward_scan_of_the_listing_index(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    for i in range(40):
        parent = {"parentSession": f"s{i - 1}", "origin": "subagent"} if i % 3 == 0 and i else {}
        await store.create_session(SessionHeader(id=f"s{i}", createdAt=i // 4, **parent), owner="ab"[i % 2])  # type: ignore[arg-type]
    statements: list[tuple[str, Any]] = []

    @sa.event.listens_for(store._engine, "before_cursor_execute")
    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        statements.append((statement, parameters))

    await store.list_sessions("a", limit=5)
    await store.list_sessions("a", limit=5, before=SessionKey(5, "s21"))
    await store.close()
    listings = [(statement, parameters) for statement, parameters in statements if "child_count" in statement]
    assert len(listings) == 2
    engine = sa.create_engine(sql_url)
    with engine.connect() as conn:
        sqlite = engine.dialect.name == "sqlite"
        if not sqlite:
            # A tiny table is cheaper to scan; the question is whether the index can serve the listing.
            conn.exec_driver_sql("SET enable_seqscan = off")
        for statement, parameters in listings:
            rows = conn.exec_driver_sql(("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + statement, parameters)
            plan = "\n".join(str(row[-1]) for row in rows)
            assert LISTING_INDEX in plan, plan
            assert ("TEMP B-TREE" if sqlite else "Sort") not in plan, plan
            assert "ix_history_sessions_parent_id" in plan, plan
    engine.dispose()


CRASHING_APPENDER = """
import os, signal, sys
import anyio
from codec import decode_event
from persistence.sql import store as sql, writes
from persistence.sealing import plan_append

url, kill_at, when = sys.argv[1], int(sys.argv[2]), sys.argv[3]
events = [decode_event(line) for line in sys.stdin.buffer.read().splitlines()]
sealing = []

def plan(tail, batch, load):
    keep, records = plan_append(tail, batch, load)
    sealing.append(batch[0].seq >= kill_at and keep < len(tail))
    if sealing[-1] and when == "planned":
        os.kill(os.getpid(), signal.SIGKILL)
    return keep, records

insert = writes._insert

def insert_then_die(cursor, w, session_id, batch, life):
    insert(cursor, w, session_id, batch, life)
    if sealing[-1]:
        # The pieces are deleted and the sealed row written, in a transaction not yet committed.
        os.kill(os.getpid(), signal.SIGKILL)

writes.plan_append = plan
writes._insert = insert_then_die

async def main():
    store = await sql.SqlStore.open(url)
    for event in events:
        await store.append("s", [event])
        print(event.seq, flush=True)

anyio.run(main)
"""


@pytest.mark.parametrize("when", ["planned", "written"])
@pytest.mark.parametrize("kill_at", [3, 40, 77])
async def test_sqlite_killed_while_sealing_loses_nothing_committed(tmp_path: Path, kill_at: int, when: str) -> None:
    events = multi_turn(seed=2, turns=3)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    store = await SqlStore.open(url)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.close()
    child = subprocess.run(
        [sys.executable, "-c", CRASHING_APPENDER, url, str(kill_at), when],
        input=encode_lines(events),
        capture_output=True,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    acknowledged = [int(line) for line in child.stdout.split()]
    assert acknowledged and acknowledged[-1] >= kill_at - 1
    store = await SqlStore.open(url)
    head = await store.head_seq("s")
    assert head == acknowledged[-1]
    assert await store.read_events("s", 0, head + 1) == events[: head + 1]
    assert await page_records(store, "s", 0, head + 1) == [encode(r) for r in pack_page(events[: head + 1])]
    for event in events[head + 1 :]:
        await store.append("s", [event])
    assert await store.read_stored("s", 0, len(events)) == [stored_record(r) for r in pack(events)]
    await store.close()


# Bounds: every call of the store fails with StoreError past its timeout, and the store then works again.

GUARD = 30  # seconds: only so that a hang fails the test; the store's own bounds are far shorter.


async def sqlite_store_with_a_session(tmp_path: Path, timeout: float) -> tuple[SqlStore, Path]:
    path = tmp_path / "h.db"
    store = await SqlStore.open(f"sqlite:///{path}", timeout=timeout)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", [Event("x", 0, 0, {"text": "a"})])
    return store, path


def exclusive_lock(path: Path) -> sqlite3.Connection:
    """Another connection holding the file exclusively, as a tool in exclusive locking mode does: readers wait too."""
    holder = sqlite3.connect(path, isolation_level=None, timeout=0)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE history_sessions SET head_seq = head_seq")
    return holder


@pytest.mark.parametrize("released", [True, False], ids=["lock-released", "lock-kept"])
async def test_sqlite_read_on_the_event_loop_never_waits_for_a_lock(tmp_path: Path, released: bool) -> None:
    """A locked read leaves the event loop at once, and waits in a worker thread, up to the bound."""
    store, path = await sqlite_store_with_a_session(tmp_path, timeout=20 if released else 0.2)
    # The store's connections would keep the holder from its exclusive lock: it keeps none open meanwhile.
    await store._writer.run(lambda cursor: None)
    store._backend.groups.close()
    store._backend.readers.drop()
    store._engine.dispose()
    holder = exclusive_lock(path)
    order: list[str] = []

    async def read() -> None:
        try:
            info = await store.get_session("s")
            order.append(f"read head {info.head_seq}")
        except StoreError:
            order.append("read failed")

    async def meanwhile() -> None:
        order.append("the loop ran")
        if released:
            holder.close()

    try:
        with anyio.fail_after(GUARD):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(read)
                tasks.start_soon(meanwhile)
    finally:
        holder.close()
    assert order == ["the loop ran", "read head 0" if released else "read failed"]
    assert (await store.get_session("s")).head_seq == 0
    await store.close()


async def test_sqlite_append_waiting_for_a_lock_past_the_bound_fails_and_the_next_succeeds(tmp_path: Path) -> None:
    store, path = await sqlite_store_with_a_session(tmp_path, timeout=0.2)
    holder = sqlite3.connect(path, isolation_level=None, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with anyio.fail_after(GUARD), pytest.raises(StoreError, match="locked"):
            await store.append("s", [Event("x", 1, 0, {"text": "b"})])
    finally:
        holder.close()
    assert (await store.append("s", [Event("x", 1, 0, {"text": "b"})])).head_seq == 1
    await store.close()


pg_only = pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set")
EVENTS = [Event("x", seq, 0, {"text": f"e{seq}"}) for seq in range(3)]


async def pg_store_in_use(timeout: float) -> SqlStore:
    """A store with a session, whose writer, sync reader and async reader connections are open."""
    assert PG_URL
    await empty_postgres(PG_URL)
    store = await SqlStore.open(PG_URL, timeout=timeout)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", EVENTS[:1])
    assert (await store.get_session("s")).head_seq == 0
    assert (await store.read_page("s", through=None, before=None, max_messages=5)).to_seq == 1
    return store


async def store_calls_fail(store: SqlStore, match: str) -> None:
    with anyio.fail_after(GUARD):
        with pytest.raises(StoreError, match=match):
            await store.append("s", EVENTS[1:2])
        with pytest.raises(StoreError, match=match):
            await store.read_page("s", through=None, before=None, max_messages=5)


async def store_works(store: SqlStore) -> None:
    with anyio.fail_after(GUARD):
        assert (await store.append("s", EVENTS[1:])).head_seq == 2
        assert (await store.get_session("s")).head_seq == 2
        read = await store.read_page("s", through=None, before=None, max_messages=5)
        assert [record.seq for record in read.stored] == [0, 1, 2]


@pg_only
async def test_postgresql_calls_to_a_stopped_server_fail_within_the_bound_and_then_work() -> None:
    """A server that answers nothing (every backend stopped) cannot time out itself: the store's watchdog does."""
    store = await pg_store_in_use(timeout=0.5)
    assert PG_URL
    engine = sa.create_engine(PG_URL)
    with engine.connect() as control:
        stopped = list(
            control.exec_driver_sql(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).scalars()
        )
    engine.dispose()
    assert stopped
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        await store_calls_fail(store, "no answer within 0.5 s")
        with anyio.fail_after(GUARD), pytest.raises(StoreError, match="no answer within 0.5 s"):
            await store.get_session("s")
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    await store_works(store)
    await store.close()


@pg_only
async def test_postgresql_calls_blocked_on_a_lock_fail_within_the_bound_and_then_work() -> None:
    store = await pg_store_in_use(timeout=0.5)
    assert PG_URL
    engine = sa.create_engine(PG_URL)
    control = engine.connect()
    control.exec_driver_sql("LOCK TABLE history_records IN ACCESS EXCLUSIVE MODE")
    try:
        # The server's statement timeout and the store's watchdog race: either may end the call.
        await store_calls_fail(store, "no answer within 0.5 s|statement timeout")
    finally:
        control.rollback()
        control.close()
        engine.dispose()
    await store_works(store)
    await store.close()

"""Search on the SQL store (persistence/sql/search.py), on SQLite and PostgreSQL: what each database indexes, and
the passages a reindex rebuilds and a delete purges."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings, strategies as st

from codec import Event, SessionHeader
from persistence.search import of_batch
from persistence.search.terms import folded_tokens
from persistence.sql import SqlStore
from persistence.sql.deletion import PURGE_ROWS
from persistence.sql.schema import passages_table, purges_table
from testing.events import plain, reasoning, text, tool
from tests.persistence.sql.conftest import Units

pytestmark = pytest.mark.anyio


def positions(tokens: list[str]) -> dict[str, list[int]]:
    """Each token's positions (1-based), as many as PostgreSQL keeps (256)."""
    found: dict[str, list[int]] = {}
    for at, token in enumerate(tokens, start=1):
        found.setdefault(token, []).append(at)
    return {token: at[:256] for token, at in found.items()}


def indexed(cursor: Any, postgres: bool) -> list[dict[str, list[int]]]:
    """Each passage's tokens and their positions as the database's full-text index reads them, in id order."""
    if postgres:
        cursor.execute("SELECT id FROM search_passages ORDER BY id")
        ids = [row[0] for row in cursor.fetchall()]
        out = []
        for passage in ids:
            cursor.execute("SELECT lexeme, positions FROM search_passages, unnest(terms) WHERE id = %s", (passage,))
            out.append({lexeme: list(at) for lexeme, at in cursor.fetchall()})
        return out
    cursor.execute("SELECT doc, term, offset FROM search_vocab ORDER BY doc, offset")
    by_doc: dict[int, list[str]] = {}
    for doc, term, _ in cursor.fetchall():
        by_doc.setdefault(doc, []).append(term)
    cursor.execute("SELECT id FROM search_passages ORDER BY id")
    return [positions(by_doc.get(row[0], [])) for row in cursor.fetchall()]


async def test_each_database_indexes_a_passages_tokens_as_they_are(units: Units, sql_url: str) -> None:
    """Every store must find what the memory store finds: neither FTS5's tokenizer nor PostgreSQL's ``tsvector``
    input may read a passage's folded tokens otherwise (split, join, fold or drop one)."""
    cursor, search = units.cursor, units.writes.search
    postgres = sql_url.startswith("postgresql")
    if not postgres:
        cursor.execute("CREATE VIRTUAL TABLE temp.search_vocab USING fts5vocab(main, search_fts, instance)")

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.text())
    @example("𝐀𝐁𝐂 Straße ½ ﷺ ᦰᦱ ᳲ 北京大学 it's a\\b 007 " + "k" * 100)
    @example("a " * 300)
    @example("--- !!!")
    @example("find\x00me")
    def reads(text: str) -> None:
        cursor.execute("DELETE FROM search_passages")
        passages = of_batch([plain(0, "user/message", {"text": text})])
        search.write(cursor, "s", passages, 0)
        assert indexed(cursor, postgres) == [positions(folded_tokens(passage.text)) for passage in passages]

    reads()


def passage_rows(url: str, session_id: str | None = None) -> list[tuple[Any, ...]]:
    """The passages' rows but their ids, in id order (of one session's, or of every one)."""
    p = passages_table.c
    query = sa.select(p.session_id, p.seq, p.last_seq, p.time, p.kind, p.run, p.body, p.terms).order_by(p.id)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        found = [
            tuple(row) for row in conn.execute(query if session_id is None else query.where(p.session_id == session_id))
        ]
    engine.dispose()
    return found


def purging(url: str) -> list[str]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        found = list(conn.execute(sa.select(purges_table.c.session_id)).scalars())
    engine.dispose()
    return found


def said(seq: int, words: str) -> Event:
    return plain(seq, "user/message", {"text": words}, time=1_000 + seq)


async def test_reindex_rebuilds_the_passages_appends_wrote(sql_url: str) -> None:
    """Blocks whose deltas came an append at a time, past a passage's length; a batch of several; every kind."""
    store = await SqlStore.open(sql_url)
    try:
        await store.create_session(SessionHeader(id="s", createdAt=0))
        await store.append("s", [said(0, "where is the rate limit?"), plain(1, "session/title", {"title": "Limits"})])
        for seq in range(2, 62):
            await store.append("s", [text(seq, seq, " ".join(f"word{seq}x{k}" for k in range(8)) + " ")])
        await store.append("s", [reasoning(62, 62, "think "), reasoning(63, 63, "more"), said(64, "and then?")])
        await store.append("s", [tool(65, 65, '{"path": "src/', name="read_file"), tool(66, 66, 'retry.py"}')])
        await store.append("s", [plain(67, "tool/result", {"callId": "c", "content": "found backoff_factor=2"})])
        message = {"message": {"content": [{"type": "text", "text": "all done"}, {"type": "reasoning", "text": "ok"}]}}
        await store.append("s", [plain(68, "assistant/message", message)])
        await store.create_session(SessionHeader(id="t", createdAt=0))
        await store.append("t", [said(0, "another session")])
        before = passage_rows(sql_url)
        assert sum(row[4] == "assistant" for row in before) >= 3, "the block never passed a passage's length"
        assert await store.reindex() == len(before)
        assert passage_rows(sql_url) == before
    finally:
        await store.close()


async def test_a_deleted_sessions_passages_are_purged_after_its_records(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    try:
        for session_id in ("big", "kept"):
            await store.create_session(SessionHeader(id=session_id, createdAt=0))
        # More records, and more passages, than a purge removes a batch at a time.
        await store.append("big", [said(seq, f"old words number {seq}") for seq in range(3 * PURGE_ROWS + 5)])
        await store.append("kept", [said(0, "kept words")])
        assert len(passage_rows(sql_url, "big")) == 3 * PURGE_ROWS + 5
        assert await store.delete_session("big") == ["big"]
        assert passage_rows(sql_url, "big") == [] and purging(sql_url) == []
        assert [row[6] for row in passage_rows(sql_url)] == ["kept words"]
    finally:
        await store.close()


async def delete_unpurged(store: SqlStore, session_id: str) -> None:
    """The delete's own unit alone, as if its purge were still to come (or its process died first)."""
    await store._writer.run(lambda cursor: store._deletion.run(cursor, session_id, store._tails.forget), session_id)


async def test_a_create_of_a_purged_id_purges_the_passages_its_last_life_left(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    try:
        await store.create_session(SessionHeader(id="s", createdAt=1))
        await store.append("s", [said(seq, f"old words number {seq}") for seq in range(200)])
        await delete_unpurged(store, "s")
        assert len(passage_rows(sql_url, "s")) == 200 and purging(sql_url) == ["s"]
        await store.create_session(SessionHeader(id="s", createdAt=2))
        assert passage_rows(sql_url, "s") == [] and purging(sql_url) == []
        await store.append("s", [said(0, "new words")])
        assert [row[6] for row in passage_rows(sql_url, "s")] == ["new words"]
    finally:
        await store.close()


async def test_the_passages_of_a_purge_a_crash_cut_go_when_the_store_opens(sql_url: str) -> None:
    store = await SqlStore.open(sql_url)
    await store.create_session(SessionHeader(id="s", createdAt=1))
    await store.append("s", [said(seq, f"old words number {seq}") for seq in range(200)])
    await delete_unpurged(store, "s")
    await store.close()
    assert len(passage_rows(sql_url, "s")) == 200
    await (await SqlStore.open(sql_url)).close()
    assert passage_rows(sql_url) == [] and purging(sql_url) == []

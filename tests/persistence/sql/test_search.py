"""Search on the SQL store (persistence/sql/search.py), on SQLite and PostgreSQL: what each database indexes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from persistence.search import of_batch
from persistence.search.terms import folded_tokens
from testing.events import plain
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

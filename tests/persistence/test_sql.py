"""SQL store specifics: WAL, data compression, the schema version."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from codec import Event, SessionHeader
from persistence.errors import SchemaVersionError, StoreError
from persistence.sql import SqlStore, meta_table, records_table
from persistence.url import open_store

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


async def test_data_is_kept_raw_when_compression_does_not_shrink_it(tmp_path: Path) -> None:
    store = await SqlStore.open(f"sqlite:///{tmp_path / 'h.db'}")
    noise = os.urandom(8000)
    assert store._pack_line(noise) == {"compressed": False, "data": noise}
    assert store._pack_line(b"a" * 4095) == {"compressed": False, "data": b"a" * 4095}
    assert store._pack_line(b"a" * 4096)["compressed"] is True
    await store.close()


async def test_unknown_schema_version_refuses_to_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    await (await SqlStore.open(url)).close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.update(meta_table).values(value="99"))
    engine.dispose()
    with pytest.raises(SchemaVersionError, match="schema version '99'; this build reads version 1 only"):
        await SqlStore.open(url)


async def test_reopening_keeps_the_data(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    store = await open_store(url)
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

"""The PostgreSQL database that tests and benchmarks may use: ``HISTORY_TEST_PG_URL``, emptied before each use."""

from __future__ import annotations

import os
from typing import Final

import sqlalchemy as sa

from persistence.base import HistoryStore
from persistence.sql import SqlStore, metadata

__all__ = ["PG_URL", "PG_URL_ENV", "drop_tables", "empty_postgres", "fresh_postgres_store"]

PG_URL_ENV: Final = "HISTORY_TEST_PG_URL"
PG_URL: Final = os.environ.get(PG_URL_ENV)


def drop_tables(url: str) -> None:
    """Drop our tables, so the next store opened on ``url`` starts from none."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        metadata.drop_all(conn)
        conn.execute(sa.text("DROP TABLE IF EXISTS history_meta"))
    engine.dispose()


async def fresh_postgres_store(url: str) -> HistoryStore:
    """A store on an emptied database: each test starts from no tables."""
    drop_tables(url)
    return await SqlStore.open(url)


async def empty_postgres(url: str) -> None:
    """Empty the database and create our tables in it, leaving no store open (for servers and processes to share)."""
    await (await fresh_postgres_store(url)).close()

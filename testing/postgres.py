"""The PostgreSQL database that tests and benchmarks may use: ``HISTORY_TEST_PG_URL``, emptied before each use.

Under pytest-xdist each worker has a database of its own on that server (``<name>_<worker>``, made by
the root conftest.py), so one worker emptying its database never wipes what the other is using. The
worker comes from ``PYTEST_XDIST_WORKER``, which the service processes a test starts inherit too.
"""

from __future__ import annotations

import os
from typing import Final

import sqlalchemy as sa

from persistence.base import HistoryStore
from persistence.sql import SqlStore, metadata

__all__ = [
    "PG_URL",
    "PG_URL_ENV",
    "create_worker_database",
    "drop_database",
    "drop_tables",
    "drop_worker_database",
    "empty_postgres",
    "fresh_postgres_store",
    "new_database",
    "worker_url",
]

PG_URL_ENV: Final = "HISTORY_TEST_PG_URL"
SHARED_PG_URL: Final = os.environ.get(PG_URL_ENV)
WORKER: Final = os.environ.get("PYTEST_XDIST_WORKER")


def worker_url(url: str, worker: str | None) -> str:
    """The database ``worker`` uses on the server of ``url``: that of ``url`` itself when not under xdist."""
    if not worker:
        return url
    parsed = sa.make_url(url)
    return parsed.set(database=f"{parsed.database}_{worker}").render_as_string(hide_password=False)


PG_URL: Final = worker_url(SHARED_PG_URL, WORKER) if SHARED_PG_URL else None


def _admin(action: str) -> None:
    """Run ``action`` (with ``{name}`` for the worker's database) on the shared database, outside a transaction."""
    assert SHARED_PG_URL and PG_URL
    _outside_transaction(SHARED_PG_URL, action.format(name=sa.make_url(PG_URL).database))


def _outside_transaction(url: str, statement: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def new_database(suffix: str, *, beside: str | None = None) -> str:
    """The URL of a database made anew on the server of ``beside`` (default `PG_URL`), named after that URL's
    database with ``_suffix``: one left by an earlier run is dropped first, with any connection to it."""
    base = beside or PG_URL
    assert base, f"{PG_URL_ENV} is not set"
    url = sa.make_url(base)
    name = f"{url.database}_{suffix}"
    drop_database(url.set(database=name).render_as_string(hide_password=False), beside=base)
    _outside_transaction(base, f'CREATE DATABASE "{name}"')
    return url.set(database=name).render_as_string(hide_password=False)


def drop_database(url: str, *, beside: str | None = None) -> None:
    """Drop the database of ``url`` if it is there, with any connection to it, from ``beside``'s (default
    `PG_URL`)."""
    base = beside or PG_URL
    assert base, f"{PG_URL_ENV} is not set"
    _outside_transaction(base, f'DROP DATABASE IF EXISTS "{sa.make_url(url).database}" WITH (FORCE)')


def create_worker_database() -> None:
    """Make this xdist worker's database anew (an earlier, interrupted run may have left it behind)."""
    if SHARED_PG_URL and WORKER:
        drop_worker_database()
        _admin('CREATE DATABASE "{name}"')


def drop_worker_database() -> None:
    """Drop this xdist worker's database, with any connection a killed service process left open."""
    if SHARED_PG_URL and WORKER:
        _admin('DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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

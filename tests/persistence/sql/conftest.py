"""Fixtures of the SQL store's tests: the units' own cursor, on a migrated database of each kind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import pytest
import sqlalchemy as sa

from persistence.sql import SqlStore
from persistence.sql.deletion import Deletion
from persistence.sql.dialect import Dialect
from persistence.sql.lines import Lines
from persistence.sql.pg_dialect import PostgresDialect
from persistence.sql.search import SqlSearch
from persistence.sql.sqlite import SqliteDialect
from persistence.sql.statements import Statements
from persistence.sql.tails import Tails
from persistence.sql.writes import Writes


class Units(NamedTuple):
    """A cursor, each statement its own transaction, and what the units take with it."""

    cursor: Any
    writes: Writes

    @property
    def sql(self) -> Statements:
        return self.writes.sql

    @property
    def lines(self) -> Lines:
        return self.writes.lines


@pytest.fixture
async def units(sql_url: str) -> AsyncIterator[Units]:
    await (await SqlStore.open(sql_url)).close()  # the schema
    engine = sa.create_engine(sql_url)
    dialect: Dialect = SqliteDialect("units") if engine.dialect.name == "sqlite" else PostgresDialect("units")
    pooled = engine.raw_connection()
    connection: Any = pooled.dbapi_connection
    pooled.detach()
    dialect.autocommit(connection)
    sql = Statements(engine.dialect, dialect)
    dbapi = engine.dialect.loaded_dbapi
    writes = Writes(
        sql,
        SqlSearch(engine.dialect, dialect),
        Lines(),
        Tails(8),
        dialect,
        Deletion(engine.dialect, dialect),
        dbapi.IntegrityError,
    )
    try:
        yield Units(connection.cursor(), writes)
    finally:
        connection.close()
        engine.dispose()

"""PostgreSQL's SQL: the row lock, a notice riding each move of a head, and the compiled collation and incarnation.

A head's read holds the session's row (``SELECT ... FOR UPDATE``), so two processes never
duplicate or skip a seq. Every move of a head, a close and a delete sends a notice
(`persistence.notify`) in the same statement, which PostgreSQL delivers at commit and never
for a rollback.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, cast

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import TSQUERY, TSVECTOR
from sqlalchemy.engine import Connection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Select
from sqlalchemy.sql.compiler import SQLCompiler

from persistence.notify import NOTIFY_CHANNEL, STREAM_NOTICE, notice
from persistence.search import Query, tsquery
from persistence.search.terms import tsvector
from persistence.sql.dialect import Dialect, U
from persistence.sql.pg_group import INCARNATION_OF
from persistence.sql.schema import CodePointOrder, StoredIncarnation, metadata, passages_table

__all__ = ["TABLES", "PostgresDialect"]

TABLES: Final = metadata.sorted_tables


@compiles(CodePointOrder, "postgresql")
def _code_point_order(element: CodePointOrder, compiler: SQLCompiler, **kw: Any) -> str:
    # The database's collation may be a locale's; "C" compares UTF-8 bytes, that is code points.
    return f'{compiler.process(element.column, **kw)} COLLATE "C"'


@compiles(StoredIncarnation, "postgresql")
def _stored_incarnation(element: StoredIncarnation, compiler: SQLCompiler, **kw: Any) -> str:
    return INCARNATION_OF % compiler.process(element.header, **kw)


class PostgresDialect(Dialect):
    """PostgreSQL's SQL; its notices name ``origin``, this process, which ignores its own."""

    EMPTY_BYTES: ClassVar[str] = "''::bytea"
    BEGIN: ClassVar[str | None] = None
    DEFERS_OPEN: ClassVar[bool] = False

    def __init__(self, origin: str) -> None:
        self._origin = origin

    def autocommit(self, connection: Any) -> None:
        connection.autocommit = True

    def drop_default(self, conn: Connection, table: str, column: str) -> None:
        conn.exec_driver_sql(f"ALTER TABLE {table} ALTER COLUMN {column} DROP DEFAULT")

    def vacuum_statements(self) -> tuple[str, ...]:
        return ("VACUUM " + ", ".join(table.name for table in TABLES),)

    def search_terms(self, tokens: list[str]) -> str:
        # Built here, not by to_tsvector: PostgreSQL's parser would read `retry.py` as one token.
        return tsvector(tokens)

    def search_terms_value(self, bound: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.cast(bound, TSVECTOR)

    def search_match(self, query: Query) -> tuple[sa.FromClause, sa.ColumnElement[bool], sa.ColumnElement[Any]]:
        wanted = sa.cast(sa.literal(tsquery(query)), TSQUERY)
        return passages_table, passages_table.c.terms.op("@@")(wanted), passages_table.c.id

    def before_migration(self, conn: Connection) -> None:
        # An upgrade backfills and indexes whole tables: no statement bound applies to it.
        conn.exec_driver_sql("SET LOCAL statement_timeout = 0")

    def lock_head(self, head: Select[Any]) -> Select[Any]:
        return head.with_for_update()

    def advance(self, advance: U) -> U:
        # In the transaction and the same round trip: delivered at commit, never for a rollback.
        told = sa.func.pg_notify(sa.bindparam("channel", type_=sa.Text), sa.bindparam("notice", type_=sa.Text))
        return cast(U, advance.returning(told))

    def told(
        self,
        cursor: Any,
        session_id: str,
        new_head: int,
        *,
        closed: bool = False,
        deleted: bool = False,
        incarnation: str = "",
    ) -> None:
        return None  # the notice rides the statement that moved the head (`advance`)

    def notify_stream(self, cursor: Any, name: str) -> None:
        # In the unit's transaction: sent at commit, never for a rollback.
        cursor.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, notice(STREAM_NOTICE + name, 0, self._origin)))

    def advance_params(
        self, session_id: str, new_head: int, *, closed: bool = False, deleted: bool = False, incarnation: str = ""
    ) -> dict[str, Any]:
        told = notice(session_id, new_head, self._origin, closed=closed, deleted=deleted, incarnation=incarnation)
        return {"channel": NOTIFY_CHANNEL, "notice": told}

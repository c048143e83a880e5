"""Compiled statements: the Core expression's SQL, with parameters bound by name in either style."""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from persistence.sql.prepared import Prepared

table = sa.Table("t", sa.MetaData(), sa.Column("k", sa.String, primary_key=True), sa.Column("v", sa.Integer))
query = sa.select(table.c.k).where(table.c.v >= sa.bindparam("low"), table.c.k != sa.bindparam("skip"))


def test_positional_styles_bind_in_the_statements_order() -> None:
    prepared = Prepared(query.order_by(table.c.k).limit(2), sqlite.dialect())
    assert prepared.sql.count("?") == 4
    # SQLite's LIMIT and OFFSET are literals the statement binds itself; given names may come in any order.
    assert prepared.params({"skip": "b", "low": 1}) == (1, "b", 2, 0)


def test_named_styles_bind_by_name() -> None:
    prepared = Prepared(query, postgresql.psycopg.dialect())  # type: ignore[no-untyped-call]
    assert "%(low)s" in prepared.sql and "%(skip)s" in prepared.sql
    assert prepared.params({"skip": "b", "low": 1}) == {"skip": "b", "low": 1}


def test_statements_run_on_a_dbapi_cursor() -> None:
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
    cursor = connection.cursor()
    Prepared(sa.insert(table), sqlite.dialect()).run_many(cursor, [{"k": k, "v": i} for i, k in enumerate("abcd")])
    found = Prepared(query.order_by(table.c.k), sqlite.dialect()).run(cursor, low=1, skip="c").fetchall()
    assert found == [("b",), ("d",)]

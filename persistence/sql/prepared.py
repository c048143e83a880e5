"""SQLAlchemy Core statements compiled once per dialect, then run on a DBAPI cursor.

The hot path of the SQL store runs a handful of small statements per request. Through a
SQLAlchemy `Connection`, each one pays for a pool checkout, a cache-key lookup, parameter
coercion and result wrapping, which together cost several times the statement itself.
A `Prepared` statement keeps the Core expression as the one source of the SQL (so the
schema and PostgreSQL portability stay with SQLAlchemy) and is left with only the SQL
string and the order of its parameters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

__all__ = ["Prepared"]


class Prepared:
    """One statement's SQL for one dialect, with its parameters bound by name."""

    __slots__ = ("_defaults", "_names", "sql")

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self.sql = str(compiled)
        # qmark and format styles bind by position; pyformat and named styles by name.
        self._names = compiled.positiontup
        self._defaults = {key: value for key, value in compiled.params.items() if value is not None}

    def params(self, values: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """The DBAPI parameters for ``values``; literals the statement itself binds (a LIMIT, say) are kept."""
        merged = {**self._defaults, **values} if self._defaults else values
        if self._names is None:
            return dict(merged)
        return tuple(merged[name] for name in self._names)

    def run(self, cursor: Any, **values: Any) -> Any:
        """Execute on ``cursor`` and return it, for ``fetchone``/``fetchall``/``rowcount``."""
        cursor.execute(self.sql, self.params(values))
        return cursor

    def run_many(self, cursor: Any, rows: Iterable[Mapping[str, Any]]) -> None:
        cursor.executemany(self.sql, [self.params(row) for row in rows])

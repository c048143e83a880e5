"""A delete on the SQL store (docs/protocol.md §6.4): a session and its subagent tree, in one transaction.

The rows go in the writer's transaction, so the delete is atomic: after a crash every
session of the tree is whole or gone. The tree's rows are locked first, in code-point
order, as a group's appends lock theirs. On PostgreSQL each session's row leaves with a
notice saying that incarnation was deleted, delivered at commit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect as SaDialect

from codec import decode_header, incarnation_of
from persistence.base import subtree
from persistence.errors import SessionNotFoundError
from persistence.sql.dialect import Dialect
from persistence.sql.prepared import Prepared
from persistence.sql.schema import hidden_table, messages_table, records_table, sessions_table

__all__ = ["Deletion"]


class Deletion:
    """The statements of a delete, compiled once for the engine's dialect; `run` carries one out."""

    def __init__(self, dialect: SaDialect, ways: Dialect) -> None:
        s, b = sessions_table.c, sa.bindparam
        self._ways = ways
        self._exists = Prepared(sa.select(s.id).where(s.id == b("id")), dialect)
        self._lock = Prepared(ways.lock_head(sa.select(s.header).where(s.id == b("id"))), dialect)
        self._children = Prepared(sa.select(s.id).where(s.parent_id == b("id")), dialect)
        self._rows = [
            Prepared(sa.delete(table).where(table.c.session_id == b("id")), dialect)
            for table in (records_table, messages_table, hidden_table)
        ]
        self._session = Prepared(ways.advance(sa.delete(sessions_table).where(s.id == b("id"))), dialect)

    def tree(self, cursor: Any, session_id: str) -> list[str]:
        """``session_id`` and every session below it, parents first; `SessionNotFoundError` if it is unknown."""
        if self._exists.run(cursor, id=session_id).fetchone() is None:
            raise SessionNotFoundError(session_id)
        return subtree(session_id, lambda parent: [row[0] for row in self._children.run(cursor, id=parent).fetchall()])

    def run(self, cursor: Any, session_id: str, forget: Callable[[str], object]) -> list[str]:
        """Delete ``session_id`` and the sessions below it; the ids deleted. ``forget(id)`` drops the writer's state.

        Every row of the tree is locked first, in code-point order, as a group locks its appends'
        (`persistence.sql.postgres`), so a delete and a group that appends to the tree never wait on each other.
        """
        tree = self.tree(cursor, session_id)
        incarnations = {}
        for member in sorted(tree):
            row = self._lock.run(cursor, id=member).fetchone()
            if row is None:
                raise SessionNotFoundError(member)
            incarnations[member] = incarnation_of(decode_header(bytes(row[0])))
        if self.tree(cursor, session_id) != tree:
            # A child was created meanwhile: it too is locked, as the group order allows, then deleted.
            return self.run(cursor, session_id, forget)
        for gone in reversed(tree):
            for rows in self._rows:
                rows.run(cursor, id=gone)
            told = self._ways.advance_params(gone, -1, deleted=True, incarnation=incarnations[gone])
            self._session.run(cursor, id=gone, **told)
            forget(gone)
        return tree

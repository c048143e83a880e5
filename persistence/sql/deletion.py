"""A delete on the SQL store (docs/protocol.md §6.4): a session and its subagent tree, then its records.

The session rows, message index and hidden ranges go in one unit of the writer's
transaction, so the delete is atomic: after a crash every session of the tree is whole or
gone. The tree's rows are locked first, in code-point order, as a group's appends lock
theirs. On PostgreSQL each session's row leaves with a notice saying that incarnation was
deleted, delivered at commit.

The records, which may be a hundred megabytes, and the search passages stay behind the gone
rows, and no read sees them (every read of records, and every search, asks for its session's
row in the same statement). The same unit
names each id in ``history_purges``; then `Deletion.purge` removes their records a bounded
batch at a time (`Backend.purge`: a unit of SQLite's writer, or a transaction of its own
beside PostgreSQL's), so appends to other sessions commit between the batches. A create of
a purged id removes what is left at once, and opening the store finishes any purge a crash cut.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect as SaDialect

from codec import decode_header, incarnation_of
from persistence.base import subtree
from persistence.errors import SessionNotFoundError, StoreError
from persistence.rules import Life, check_life
from persistence.sql.dialect import Dialect
from persistence.sql.prepared import Prepared
from persistence.sql.schema import (
    hidden_table,
    messages_table,
    passages_table,
    purges_table,
    records_table,
    sessions_table,
)

__all__ = ["PURGE_PAUSE", "PURGE_ROWS", "Deletion", "finish_purges"]

logger = logging.getLogger(__name__)

# Records removed per batch of a purge (half a megabyte of 8 KiB events), and the seconds it
# waits before the next: a purge is background work, and leaves the store to appends between.
PURGE_ROWS: Final = 64
PURGE_PAUSE: Final = 0.01


class Deletion:
    """The statements of a delete, compiled once for the engine's dialect; `run` carries one out."""

    def __init__(self, dialect: SaDialect, ways: Dialect) -> None:
        s, b = sessions_table.c, sa.bindparam
        self._ways = ways
        self._exists = Prepared(sa.select(s.id).where(s.id == b("id")), dialect)
        self._lock = Prepared(ways.lock_head(sa.select(s.header, s.owner).where(s.id == b("id"))), dialect)
        self._children = Prepared(sa.select(s.id).where(s.parent_id == b("id")), dialect)
        self._rows = [
            Prepared(sa.delete(table).where(table.c.session_id == b("id")), dialect)
            for table in (messages_table, hidden_table)
        ]
        self._session = Prepared(ways.advance(sa.delete(sessions_table).where(s.id == b("id"))), dialect)
        p = purges_table.c
        self._purging = Prepared(ways.lock_head(sa.select(p.session_id).where(p.session_id == b("id"))), dialect)
        self._name = Prepared(sa.insert(purges_table), dialect)
        self._unname = Prepared(sa.delete(purges_table).where(p.session_id == b("id")), dialect)
        # What outlives a deleted session's row until it is purged: its records, then its search passages.
        self._purges = [_purges(records_table, "seq", dialect), _purges(passages_table, "id", dialect)]

    def tree(self, cursor: Any, session_id: str) -> list[str]:
        """``session_id`` and every session below it, parents first; `SessionNotFoundError` if it is unknown."""
        if self._exists.run(cursor, id=session_id).fetchone() is None:
            raise SessionNotFoundError(session_id)
        return subtree(session_id, lambda parent: [row[0] for row in self._children.run(cursor, id=parent).fetchall()])

    def run(
        self, cursor: Any, session_id: str, forget: Callable[[str], object], life: Life | None = None
    ) -> tuple[list[str], list[str]]:
        """Delete ``session_id`` and the sessions below it: the ids deleted, and those with records left to purge.

        ``forget(id)`` drops the writer's state. The first `PURGE_ROWS` records of each go at once,
        so a small session is gone whole in this one unit. With ``life``, ``session_id`` must be
        that life (`persistence.rules.check_life`), checked once its row is locked.

        Every row of the tree is locked first, in code-point order, as a group locks its appends'
        (`persistence.sql.postgres`), so a delete and a group that appends to the tree never wait on each other.
        """
        tree = self.tree(cursor, session_id)
        incarnations = {}
        for member in sorted(tree):
            row = self._lock.run(cursor, id=member).fetchone()
            if row is None:
                raise SessionNotFoundError(member)
            header = decode_header(bytes(row[0]))
            if member == session_id:
                check_life(session_id, life, header, row[1])
            incarnations[member] = incarnation_of(header)
        if self.tree(cursor, session_id) != tree:
            # A child was created meanwhile: it too is locked, as the group order allows, then deleted.
            return self.run(cursor, session_id, forget, life)
        left = []
        for gone in reversed(tree):
            if self._purge_batch(cursor, gone):
                # More than one batch: the rest go after this unit (`purge_some`), and the id is named meanwhile.
                if self._purging.run(cursor, id=gone).fetchone() is None:
                    self._name.run(cursor, session_id=gone)
                left.append(gone)
            for rows in self._rows:
                rows.run(cursor, id=gone)
            told = self._ways.advance_params(gone, -1, deleted=True, incarnation=incarnations[gone])
            self._session.run(cursor, id=gone, **told)
            self._ways.told(cursor, gone, -1, deleted=True, incarnation=incarnations[gone])
            forget(gone)
        return tree, left

    def purge_some(self, cursor: Any, session_id: str) -> bool:
        """Remove up to `PURGE_ROWS` records of a deleted session; whether any remain to remove.

        Nothing when the id is no longer named for a purge: it was created again, which purged it.
        """
        if self._purging.run(cursor, id=session_id).fetchone() is None:
            return False
        if self._purge_batch(cursor, session_id):
            return True
        self._unname.run(cursor, id=session_id)
        return False

    def _purge_batch(self, cursor: Any, session_id: str) -> bool:
        """Remove up to `PURGE_ROWS` of a gone session's records, or else of its passages; whether any may remain."""
        for batch, _ in self._purges:
            batch.run(cursor, id=session_id, rows=PURGE_ROWS)
            if cursor.rowcount == PURGE_ROWS:
                return True
        return False

    async def purge(self, left: list[str], batch: Callable[[str, Callable[[Any], bool]], Awaitable[bool]]) -> None:
        """Remove the records of the deleted sessions ``left``, a batch (`purge_some`) at a time, a pause between.

        ``batch(id, work)`` runs one (`Backend.purge`). The delete itself is durable by now: a
        batch that fails is logged, and what is left stays named, for `finish_purges`.
        """
        try:
            for gone in left:
                while await batch(gone, functools.partial(self.purge_some, session_id=gone)):
                    await anyio.sleep(PURGE_PAUSE)
        except StoreError as exc:
            logger.error("the records of deleted sessions %r are not purged yet: %s", left, exc)

    def before_create(self, cursor: Any, session_id: str) -> None:
        """Before ``session_id`` is created again: remove whatever a purge of its last incarnation has left."""
        if self._purging.run(cursor, id=session_id).fetchone() is not None:
            for _, purge_all in self._purges:
                purge_all.run(cursor, id=session_id)
            self._unname.run(cursor, id=session_id)


def _purges(table: sa.Table, key: str, dialect: SaDialect) -> tuple[Prepared, Prepared]:
    """The deletes of a gone session's rows of ``table``: the first ``rows`` of them by ``key``, and all."""
    b, c = sa.bindparam, table.c
    first = sa.select(c[key]).where(c.session_id == b("id")).order_by(c[key]).limit(b("rows"))
    return (
        Prepared(sa.delete(table).where(c.session_id == b("id"), c[key].in_(first)), dialect),
        Prepared(sa.delete(table).where(c.session_id == b("id")), dialect),
    )


def finish_purges(conn: Connection) -> None:
    """Every purge a crash cut, whole: at open, in the opening's write transaction.

    A purge another process is carrying out holds its name's row, and is left to it (on
    PostgreSQL; SQLite has one writer): waiting for it, in the order opposite to its own,
    could deadlock the two.
    """
    p = purges_table.c
    named = sa.select(p.session_id).with_for_update(skip_locked=True)
    for session_id in conn.execute(named).scalars().all():
        for table in (records_table, passages_table):
            conn.execute(sa.delete(table).where(table.c.session_id == session_id))
        conn.execute(sa.delete(purges_table).where(p.session_id == session_id))

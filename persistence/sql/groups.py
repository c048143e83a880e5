"""SQL group commit: a `persistence.group_commit` group as one transaction, each unit in a savepoint of its own."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from persistence.errors import StoreError
from persistence.group_commit import quietly, unavailable

__all__ = ["SqlGroups"]


class _Bounded(Protocol):
    expired: bool
    seconds: float


def _unbounded(connection: Any) -> AbstractContextManager[_Bounded | None]:
    return nullcontext()


class SqlGroups:
    """A group as one transaction on one DBAPI connection, each unit in a savepoint of its own.

    A unit is handed the cursor. One that fails (a seq conflict, an unknown session, a
    driver error) is rolled back to its savepoint alone; the others commit together.
    ``begin`` is the SQL that opens a write transaction (``None`` when the driver opens one
    implicitly); ``aborted`` is called when a whole group is rolled back, so the store can
    forget what it learned from that group's units. The connection is opened in the
    writer thread, and again after a failure. ``bound(connection)`` bounds each unit and
    the commit apart; one whose bound ``expired`` fails the group and replaces the connection.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        begin: str | None,
        aborted: Callable[[], None],
        bound: Callable[[Any], AbstractContextManager[_Bounded | None]] = _unbounded,
    ) -> None:
        self._connect = connect
        self._begin = begin
        self._aborted = aborted
        self._bound = bound
        self._connection: Any = None

    def __call__(self, works: list[Callable[[Any], Any]]) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any]] = []
        deadline: _Bounded | None = None
        try:
            if self._connection is None:
                self._connection = self._connect()
            connection = self._connection
            cursor = connection.cursor()
            if self._begin is not None:
                cursor.execute(self._begin)
            for work in works:
                with self._bound(connection) as deadline:
                    cursor.execute("SAVEPOINT history_unit")
                    try:
                        outcomes.append((True, work(cursor)))
                    except Exception as exc:
                        cursor.execute("ROLLBACK TO SAVEPOINT history_unit")
                        outcomes.append((False, exc if isinstance(exc, StoreError) else unavailable(exc)))
                    cursor.execute("RELEASE SAVEPOINT history_unit")
                if deadline is not None and deadline.expired:
                    raise StoreError("the connection was cut")
            with self._bound(connection) as deadline:
                connection.commit()
            if deadline is not None and deadline.expired:
                # Committed just as the bound cut the connection: the outcome stands, the connection goes.
                self.close()
        except Exception as exc:
            if self._connection is not None:
                quietly(self._connection.rollback)
                self.close()
            self._aborted()
            if deadline is not None and deadline.expired:
                raise StoreError(f"no answer within {deadline.seconds:g} s") from exc
            raise
        return outcomes

    def close(self) -> None:
        """Close the connection (the writer thread must have stopped)."""
        if self._connection is not None:
            quietly(self._connection.close)
            self._connection = None

"""SQL group commit: a `persistence.group_commit` group as one transaction.

`SqlGroups` runs each unit in a savepoint of its own (an append is `persistence.sql.writes.Append`).
A backend may commit some units together in fewer statements
(`persistence.sql.pg_group.PostgresGroups`); it overrides `_run`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from persistence.errors import StoreError
from persistence.group_commit import quietly, unavailable

__all__ = ["SessionUnit", "SqlGroups"]


class _Bounded(Protocol):
    expired: bool
    seconds: float


def _unbounded(connection: Any) -> AbstractContextManager[_Bounded | None]:
    return nullcontext()


class SessionUnit:
    """A unit of a group other than an append that locks sessions' rows (a close, a delete): ``work(cursor)``.

    A backend's group writer takes their locks in the group's order, with the appends': the
    session's, and those of ``also`` (a delete's subagent tree, as found before it ran).
    """

    __slots__ = ("also", "session_id", "work")

    def __init__(self, session_id: str, work: Callable[[Any], Any], also: Sequence[str] = ()) -> None:
        self.session_id = session_id
        self.work = work
        self.also = also

    def __call__(self, cursor: Any) -> Any:
        return self.work(cursor)


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
        self._deadline: _Bounded | None = None

    def __call__(self, works: list[Callable[[Any], Any]]) -> list[tuple[bool, Any]]:
        self._deadline = None
        try:
            if self._connection is None:
                self._connection = self._connect()
            connection = self._connection
            cursor = connection.cursor()
            if self._begin is not None:
                cursor.execute(self._begin)
            outcomes = self._run(connection, cursor, works)
            with self._within(connection):
                self._before_commit(cursor)
                connection.commit()
            if self._expired():
                # Committed just as the bound cut the connection: the outcome stands, the connection goes.
                self.close()
        except Exception as exc:
            if self._connection is not None:
                quietly(self._connection.rollback)
                self.close()
            self._aborted()
            if self._deadline is not None and self._deadline.expired:
                raise StoreError(f"no answer within {self._deadline.seconds:g} s") from exc
            raise
        return outcomes

    def _run(self, connection: Any, cursor: Any, works: Sequence[Callable[[Any], Any]]) -> list[tuple[bool, Any]]:
        """Each unit's outcome, in order, every unit in a savepoint of its own."""
        return [self._unit(connection, cursor, work) for work in works]

    def _before_commit(self, cursor: Any) -> None:
        """The group's last statements, in its transaction, once every unit ran; here none."""

    def _unit(self, connection: Any, cursor: Any, work: Callable[[Any], Any]) -> tuple[bool, Any]:
        with self._within(connection):
            cursor.execute("SAVEPOINT history_unit")
            try:
                outcome: tuple[bool, Any] = (True, work(cursor))
            except Exception as exc:
                cursor.execute("ROLLBACK TO SAVEPOINT history_unit")
                outcome = (False, exc if isinstance(exc, StoreError) else unavailable(exc))
            cursor.execute("RELEASE SAVEPOINT history_unit")
        self._check_cut()
        return outcome

    def _restart(self, connection: Any) -> Any:
        """Roll the group's transaction back and open another; its new cursor. The store forgets the group."""
        connection.rollback()
        self._aborted()
        cursor = connection.cursor()
        if self._begin is not None:
            cursor.execute(self._begin)
        return cursor

    @contextmanager
    def _within(self, connection: Any) -> Iterator[None]:
        """One call on the connection within the bound, which is kept to tell whether it expired."""
        with self._bound(connection) as deadline:
            self._deadline = deadline
            yield

    def _expired(self) -> bool:
        return self._deadline is not None and self._deadline.expired

    def _check_cut(self) -> None:
        """Fail the group when the bound cut the connection during the last call."""
        if self._expired():
            raise StoreError("the connection was cut")

    def close(self) -> None:
        """Close the connection (the writer thread must have stopped)."""
        if self._connection is not None:
            quietly(self._connection.close)
            self._connection = None

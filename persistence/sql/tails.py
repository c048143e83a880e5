"""The open runs the SQL writer keeps: each session's at the head this process last wrote.

An append plans its sealing (`persistence.sealing`) from the session's open run. When this
writer wrote the head the append expects, in the life it names, the run is kept here, with
the lines this writer wrote (others b""), and need not be read back. Writer thread only; a
group rolled back, a session deleted here or by another process, forgets what it knew.
"""

from __future__ import annotations

from collections.abc import Sequence

from codec import StoredRecord
from persistence.rules import Life
from persistence.sealing import next_open_run
from persistence.state import Lru

__all__ = ["Tails"]


class Tails:
    """Up to ``size`` sessions' open runs, each with the incarnation and head it was written at."""

    def __init__(self, size: int) -> None:
        self._kept: Lru[str, tuple[str | None, int, list[StoredRecord]]] = Lru(size)

    def __len__(self) -> int:
        return len(self._kept)

    def remember(
        self,
        session_id: str,
        life: Life | None,
        head: int,
        kept: Sequence[StoredRecord],
        records: Sequence[StoredRecord],
    ) -> None:
        """Keep the session's open run for the next append's plan, with the lines this writer wrote (others are b"").

        ``kept`` is what the plan kept of the open run, ``records`` what it wrote after it, in ``life``.
        """
        self._kept.put(session_id, (None if life is None else life.incarnation, head, next_open_run(kept, records)))

    def kept(self, session_id: str, life: Life | None, head: int) -> list[StoredRecord] | None:
        """The open run kept of ``life`` at ``head``, if this writer last wrote it there; else ``None``.

        Only of the life named (a write that names none, of one that named none): another process
        may have deleted the id and created it again since, to the same head, before its notice said so.
        """
        known = self._kept.get(session_id)
        if known is None or known[:2] != (None if life is None else life.incarnation, head):
            return None
        return known[2]

    def forget(self, session_id: str | None) -> None:
        """Drop what is kept of a session (``None``: of every one)."""
        if session_id is None:
            self._kept.clear()
        else:
            self._kept.pop(session_id)

    def clear(self) -> None:
        """Drop every session's: a group was rolled back."""
        self._kept.clear()

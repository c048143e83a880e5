"""A PostgreSQL group's search passages (docs/protocol.md §14.3): written by the group's statement, all at once.

Before the group statement (`persistence.sql.pg_group.GROUP_PASSAGES`), one read
(`LAST_PASSAGES`) brings the last passage of every session whose batch may continue it
(`persistence.sql.search.needs_last`); none when no batch may. `persistence.search.joined`
decides each join, and `GroupPassages` lays the results out as the statement's rows: the
passages it rewrites, by row id, and those it inserts, each gated, as the statement's other
writes are, on its session's head having moved. So a group's passages cost at most one
round trip more than its records, however many sessions it holds.

The read takes no lock. An append by another writer moves the head, and the statement then
writes nothing of that session; only a reindex replaces a passage without moving it. Should
one have done so meanwhile, the rewrite finds no row, the session's new passages are not
inserted either, and the writer writes them after the statement, its session's row locked
(`persistence.sql.search.SqlSearch.write`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec
from msgspec import Struct

from persistence.search import Passage, joined
from persistence.sql.search import SqlSearch, needs_last

__all__ = ["LAST_PASSAGES", "GroupPassages", "PassageRow", "last_passages"]

# The last passage of each session named, as `SqlSearch.write` orders them: one backward index scan each.
# The ids come as JSON, not an array: costed from the array's length, a plan of its own always
# looked cheaper than the prepared generic one, so each read was planned again (0.1 ms of its 0.3).
LAST_PASSAGES: Final = """
SELECT p.session_id, p.id, p.seq, p.last_seq, p.time, p.kind, p.body, p.run
FROM jsonb_array_elements_text(%(sessions)s::jsonb) AS u(session)
CROSS JOIN LATERAL (
    SELECT * FROM search_passages WHERE session_id = u.session ORDER BY seq DESC, id DESC LIMIT 1
) p
"""

_json = msgspec.json.Encoder()


class PassageRow(Struct, frozen=True):
    """A passage as the group statement reads it (`jsonb_to_recordset`): ``id`` names the row it rewrites (``None``:
    it is inserted), and ``after`` says it comes after a rewrite, so is inserted only if the rewrite was."""

    session: str
    seq: int
    last_seq: int
    time: int
    kind: str
    run: str | None
    body: str
    terms: str
    id: int | None
    after: bool


def last_passages(cursor: Any, batches: Sequence[tuple[str, Sequence[Passage], int]]) -> dict[str, tuple[int, Passage]]:
    """The last passage, and its row's id, of each session whose batch (its id, passages and first seq) may
    continue it; one statement, or none when no batch may."""
    wanted = [session_id for session_id, passages, first_seq in batches if needs_last(passages, first_seq)]
    if not wanted:
        return {}
    cursor.execute(LAST_PASSAGES, {"sessions": _json.encode(wanted).decode()})
    return {row[0]: (row[1], Passage(row[2], row[3], row[4], row[5], row[6], row[7])) for row in cursor.fetchall()}


class GroupPassages:
    """The passages of a group's batches, each joined to its session's last, as the group statement's one parameter."""

    def __init__(self, search: SqlSearch) -> None:
        self._search = search
        self._rows: list[PassageRow] = []
        # The sessions whose batch rewrites its last passage.
        self.rewriting: set[str] = set()

    def add(self, session_id: str, passages: Sequence[Passage], last: tuple[int, Passage] | None) -> None:
        """Lay out a session's batch of passages after ``last`` (its row's id and passage, if read)."""
        rewritten, new = joined(None if last is None else last[1], list(passages))
        first, rest = self._search.tokens_of(session_id, None if last is None else last[1], rewritten, new)
        if rewritten is not None:
            assert last is not None and first is not None
            self.rewriting.add(session_id)
            self._rows.append(self._row(session_id, rewritten, first, last[0], False))
        self._rows.extend(
            self._row(session_id, passage, tokens, None, rewritten is not None)
            for passage, tokens in zip(new, rest, strict=True)
        )

    def __bool__(self) -> bool:
        return bool(self._rows)

    def param(self) -> str:
        """The rows as JSON: one parameter, not an array a column (psycopg adapts each parameter in Python)."""
        return _json.encode(self._rows).decode()

    def _row(self, session_id: str, passage: Passage, tokens: list[str], row_id: int | None, after: bool) -> PassageRow:
        terms = self._search.terms(tokens)
        return PassageRow(
            session_id,
            passage.seq,
            passage.last_seq,
            passage.time,
            passage.kind,
            passage.run,
            passage.text,
            terms,
            row_id,
            after,
        )

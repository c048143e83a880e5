"""PostgreSQL's group writer: a group's appends in one statement (`GROUP_APPEND`), run by `PostgresGroups`.

`persistence.sql.pg_dialect` compiles `persistence.sql.schema.StoredIncarnation` with
`INCARNATION_OF`, which the statement uses too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final, NamedTuple

import psycopg

from codec import MAX_SAFE_INTEGER, StoredRecord
from persistence.base import TOUCH_MS, AppendResult
from persistence.clock import now_ms
from persistence.notify import NOTIFY_CHANNEL, notice
from persistence.rules import BatchPlan
from persistence.sealing import plan_append
from persistence.search import Passage
from persistence.sql.dialect import Deadline
from persistence.sql.groups import SessionUnit, SqlGroups
from persistence.sql.lines import Lines
from persistence.sql.pg_passages import GroupPassages, last_passages
from persistence.sql.search import SqlSearch
from persistence.sql.statements import synopsis_params
from persistence.sql.tails import Tails
from persistence.sql.writes import Append

__all__ = ["GROUP_APPEND", "GROUP_ARRAYS", "GROUP_PASSAGES", "INCARNATION_OF", "INSERTED", "SEALED", "PostgresGroups"]

logger = logging.getLogger(__name__)

# The incarnation a header column (bytea of UTF-8 JSON) names, as `StoredIncarnation` compiles it.
INCARNATION_OF: Final = "(convert_from(%s, 'UTF8')::jsonb ->> 'incarnation')"


# A group's appends in one statement. A sealing append rewrites its open run in place: a record
# whose seq the rewrite keeps is updated, a piece it joins away deleted, and the rest inserted, so
# the three touch different rows. Every session the rest of the group appends to is locked
# first, in code-point order, as the group runs its units, so two processes' groups never wait on
# each other in a cycle. A head moves only from the head its unit expects, and each table's
# insert is gated on its session's head having moved (never a closed session's: that append then
# runs alone, and is refused), nor another life's than its unit's (`persistence.sql.schema.of_life`),
# so every append is all or nothing, in the life it was checked against; the
# NOTIFY rides the update, so PostgreSQL sends it at commit and never for a rollback. Every
# parameter is sent in binary (``%(name)b``): psycopg writes a text array element by element in
# Python, escaping each bytea, at about four times the cost (1.16 ms against 0.28 ms to adapt a
# group of ten appends). Each head moves the session's synopsis with it, as
# `persistence.sql.statements.synopsis_moved` does for an append alone. The statement answers
# which sessions moved, and for each whether a search passage was rewritten (`GROUP_PASSAGES`).
_GROUP: Final = """
WITH locked AS MATERIALIZED (
    SELECT id FROM history_sessions WHERE id = ANY(%(locks)b::text[]) ORDER BY id COLLATE "C" FOR UPDATE
), moved AS (
    UPDATE history_sessions s SET head_seq = u.head,
        touched_at = CASE WHEN s.touched_at < %(touched)s - %(touch_ms)s THEN %(touched)s ELSE s.touched_at END,
        title = COALESCE(u.named, s.title, u.said),
        title_folded = COALESCE(u.named_folded, s.title_folded, u.said_folded),
        last_event_at = u.last_event_at,
        input_tokens = CASE WHEN s.input_tokens > {cap} - u.input_tokens THEN {cap}
            ELSE s.input_tokens + u.input_tokens END,
        output_tokens = CASE WHEN s.output_tokens > {cap} - u.output_tokens THEN {cap}
            ELSE s.output_tokens + u.output_tokens END
    FROM unnest(%(sessions)b::text[], %(expected)b::bigint[], %(heads)b::bigint[], %(notices)b::text[],
        %(owners)b::text[], %(incarnations)b::text[], %(named)b::text[], %(named_folded)b::text[],
        %(said)b::text[], %(said_folded)b::text[], %(last_event_at)b::bigint[], %(input_tokens)b::bigint[],
        %(output_tokens)b::bigint[])
        AS u(session, expected, head, notice, owner, incarnation, named, named_folded, said, said_folded,
            last_event_at, input_tokens, output_tokens)
    WHERE s.id = u.session AND s.head_seq = u.expected AND s.closed_at IS NULL AND s.id IN (SELECT id FROM locked)
        AND s.owner = COALESCE(u.owner, s.owner)
        AND COALESCE({stored}, u.incarnation, '') = COALESCE(u.incarnation, {stored}, '')
    RETURNING s.id, pg_notify(%(channel)b, u.notice)
), records AS (
    INSERT INTO history_records (session_id, seq, members, compressed, data, kind, key, time0, time1)
    SELECT r.session, r.seq, r.members, r.compressed, r.data, r.kind, r.key, r.time0, r.time1
    FROM unnest(
        %(record_sessions)b::text[], %(seqs)b::bigint[], %(members)b::integer[], %(compressed)b::boolean[],
        %(datas)b::bytea[], %(kinds)b::smallint[], %(keys)b::bytea[], %(time0s)b::bigint[], %(time1s)b::bigint[]
    ) AS r(session, seq, members, compressed, data, kind, key, time0, time1)
    WHERE r.session IN (SELECT id FROM moved)
), sealed AS (
    UPDATE history_records t SET members = r.members, compressed = r.compressed, data = r.data, kind = r.kind,
        key = r.key, time0 = r.time0, time1 = r.time1
    FROM unnest(
        %(sealed_sessions)b::text[], %(sealed_seqs)b::bigint[], %(sealed_members)b::integer[],
        %(sealed_compressed)b::boolean[], %(sealed_datas)b::bytea[], %(sealed_kinds)b::smallint[],
        %(sealed_keys)b::bytea[], %(sealed_time0s)b::bigint[], %(sealed_time1s)b::bigint[]
    ) AS r(session, seq, members, compressed, data, kind, key, time0, time1)
    WHERE t.session_id = r.session AND t.seq = r.seq AND r.session IN (SELECT id FROM moved)
), dropped AS (
    DELETE FROM history_records t
    USING unnest(%(dropped_sessions)b::text[], %(dropped_seqs)b::bigint[]) AS d(session, seq)
    WHERE t.session_id = d.session AND t.seq = d.seq AND d.session IN (SELECT id FROM moved)
), messages AS (
    INSERT INTO history_messages (session_id, seq, group_start)
    SELECT m.session, m.seq, m.group_start
    FROM unnest(%(message_sessions)b::text[], %(message_seqs)b::bigint[], %(groups)b::bigint[])
        AS m(session, seq, group_start)
    WHERE m.session IN (SELECT id FROM moved)
), hidden AS (
    INSERT INTO history_hidden (session_id, seq, start, "end")
    SELECT h.session, h.seq, h.start, h.stop
    FROM unnest(%(hidden_sessions)b::text[], %(hidden_at)b::bigint[], %(starts)b::bigint[], %(ends)b::bigint[])
        AS h(session, seq, start, stop)
    WHERE h.session IN (SELECT id FROM moved)
)
{passages}
SELECT id, {rewritten} FROM moved
"""
# The group's search passages (`persistence.sql.pg_passages`), as one JSON parameter: psycopg's
# cost is per parameter, and nine more arrays cost an append alone about 0.45 ms to adapt. A
# passage continued is rewritten only where its row still is, and what comes after a rewrite is
# inserted only with it, in order, so their ids are in order too.
_PASSAGES: Final = """, passages AS (
    SELECT * FROM ROWS FROM (jsonb_to_recordset(%(passages)s::jsonb) AS (session text, seq bigint, last_seq bigint,
        time bigint, kind text, run text, body text, terms text, id bigint, after boolean)) WITH ORDINALITY
        AS n(session, seq, last_seq, time, kind, run, body, terms, id, after, at)
    WHERE n.session IN (SELECT id FROM moved)
), rewritten AS (
    UPDATE search_passages t SET seq = n.seq, last_seq = n.last_seq, time = n.time, kind = n.kind, run = n.run,
        body = n.body, terms = n.terms::tsvector
    FROM passages n
    WHERE t.id = n.id AND t.session_id = n.session
    RETURNING t.session_id
), inserted AS (
    INSERT INTO search_passages (session_id, seq, last_seq, time, kind, run, body, terms)
    SELECT n.session, n.seq, n.last_seq, n.time, n.kind, n.run, n.body, n.terms::tsvector
    FROM passages n
    WHERE n.id IS NULL AND (NOT n.after OR n.session IN (SELECT session_id FROM rewritten))
    ORDER BY n.at
)"""
# The statement of a group whose batches hold no passage (or of a store opened without its
# index): the statements on search_passages cost about 0.2 ms even when they write nothing.
GROUP_APPEND: Final = _GROUP.format(
    passages="", rewritten="false", stored=INCARNATION_OF % "s.header", cap=MAX_SAFE_INTEGER
)
# The statement of a group whose batches hold passages.
GROUP_PASSAGES: Final = _GROUP.format(
    passages=_PASSAGES,
    rewritten="id IN (SELECT session_id FROM rewritten)",
    stored=INCARNATION_OF % "s.header",
    cap=MAX_SAFE_INTEGER,
)


INSERTED: Final = (
    "record_sessions",
    "seqs",
    "members",
    "compressed",
    "datas",
    "kinds",
    "keys",
    "time0s",
    "time1s",
)
# The synopsis parameters of each append (`persistence.sql.statements.synopsis_params`), an array each.
SYNOPSIS_PARAMS: Final = (
    "named",
    "named_folded",
    "said",
    "said_folded",
    "last_event_at",
    "input_tokens",
    "output_tokens",
)
SEALED: Final = tuple(f"sealed_{name}" for name in ("sessions", *INSERTED[1:]))
GROUP_ARRAYS: Final = (
    "sessions",
    "expected",
    "heads",
    "notices",
    "owners",
    "incarnations",
    *SYNOPSIS_PARAMS,
    *INSERTED,
    *SEALED,
    "dropped_sessions",
    "dropped_seqs",
    "message_sessions",
    "message_seqs",
    "groups",
    "hidden_sessions",
    "hidden_at",
    "starts",
    "ends",
)


class _Unwritten(Exception):
    """A record the append rewrites whose line this writer did not keep: the append run alone reads it."""


def _written_lines(pieces: Sequence[StoredRecord]) -> Sequence[StoredRecord]:
    # A stored line is never empty: b"" is a line this writer never held.
    if not all(piece.line for piece in pieces):
        raise _Unwritten
    return pieces


class _Planned(NamedTuple):
    """A unit the group statement can write: its heads, and its records planned from the known open run."""

    at: int
    unit: Append
    plan: BatchPlan
    tail: list[StoredRecord]
    records: list[StoredRecord]
    # The seqs of the open run's records that the append rewrites (none when it only extends the run).
    rewritten: frozenset[int]


class PostgresGroups(SqlGroups):
    """The group writer: the group's appends in one statement (`GROUP_APPEND`), not one savepoint each.

    An append whose session's open run this writer knows (with the lines of what it rewrites)
    joins the statement. One that does not, or whose head had moved (a seq conflict, a resend,
    an unknown session), then runs as its own append (`persistence.sql.writes.append`) in a
    savepoint, so it fails alone. A second append to a session in the group, or a create,
    waits for what came before it.
    Should the statement itself fail, the group's transaction is rolled back and the group runs
    again, every unit in a savepoint, so the unit the database refused fails alone.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        tails: Tails,
        lines: Lines,
        search: SqlSearch,
        origin: str,
        bound: Callable[[Any], AbstractContextManager[Deadline]],
    ) -> None:
        super().__init__(connect, begin=None, aborted=tails.clear, bound=bound)
        self._tails = tails
        self._lines = lines
        self._search = search
        self._origin = origin

    def _run(self, connection: Any, cursor: Any, works: Sequence[Callable[[Any], Any]]) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any] | None] = [None] * len(works)
        # Appends to sessions of their own: those the statement writes, and those that run alone after it.
        pending: dict[str, _Planned] = {}
        alone: dict[str, int] = {}
        try:
            for index, work in enumerate(works):
                if not isinstance(work, Append) or work.session_id in pending or work.session_id in alone:
                    # What comes after must see what came before: a create, or a session's next append.
                    self._flush(connection, cursor, works, pending, alone, outcomes)
                    pending, alone = {}, {}
                if not isinstance(work, Append):
                    outcomes[index] = self._unit(connection, cursor, work)
                elif (planned := self._plan(index, work)) is not None:
                    pending[work.session_id] = planned
                else:
                    alone[work.session_id] = index
            self._flush(connection, cursor, works, pending, alone, outcomes)
        except (psycopg.IntegrityError, psycopg.DataError) as exc:
            # The database refused what a unit writes: only a unit alone can tell which.
            logger.warning("a group statement failed; its %d units run one by one: %s", len(works), exc)
            return super()._run(connection, self._restart(connection), works)
        done = [outcome for outcome in outcomes if outcome is not None]
        assert len(done) == len(works)
        return done

    def _plan(self, index: int, unit: Append) -> _Planned | None:
        """The unit as the statement writes it, when its head and open run are known and it only extends the run."""
        batch, plan = unit.batch, unit.hoped
        if batch is None or plan is None:
            return None
        tail = self._tails.kept(unit.session_id, unit.life, plan.first_seq - 1)
        if tail is None:
            return None
        try:
            keep, records = plan_append(tail, batch.records, _written_lines)
        except _Unwritten:
            return None
        return _Planned(index, unit, plan, tail[:keep], records, frozenset(r.seq for r in tail[keep:]))

    def _flush(
        self,
        connection: Any,
        cursor: Any,
        works: Sequence[Callable[[Any], Any]],
        pending: dict[str, _Planned],
        alone: dict[str, int],
        outcomes: list[tuple[bool, Any] | None],
    ) -> None:
        """Write the pending units in one statement; then run the others, and those it could not write, each alone.

        The statement locks the sessions of every append from the first of these on, so the
        appends run alone after it take no lock out of the group's order.
        """
        moved: set[str] = set()
        # The sessions whose passages the statement left unwritten: a reindex replaced the last meanwhile.
        unwritten: set[str] = set()
        if pending:
            first = min(min(planned.at for planned in pending.values()), *alone.values(), len(works))
            # A close's session too: it runs after the statement, and must not lock out of this order.
            locks = sorted(
                {work.session_id for work in works[first:] if isinstance(work, (Append, SessionUnit))}
                | {also for work in works[first:] if isinstance(work, SessionUnit) for also in work.also}
            )
            params = self._params(pending.values(), locks)
            passages = GroupPassages(self._search)
            if self._search.indexed:
                batches = [self._passages_of(planned) for planned in pending.values()]
                with self._within(connection):
                    lasts = last_passages(cursor, batches)
                self._check_cut()
                for session_id, found, _ in batches:
                    passages.add(session_id, found, lasts.get(session_id))
            with self._within(connection):
                if passages:
                    cursor.execute(GROUP_PASSAGES, {**params, "passages": passages.param()})
                else:
                    cursor.execute(GROUP_APPEND, params)
                rows = cursor.fetchall()
            self._check_cut()
            moved = {row[0] for row in rows}
            unwritten = {row[0] for row in rows if row[0] in passages.rewriting and not row[1]}
        for planned in pending.values():
            unit = planned.unit
            if unit.session_id in moved:
                if unit.session_id in unwritten:
                    with self._within(connection):
                        self._search.write(cursor, *self._passages_of(planned))
                    self._check_cut()
                self._tails.remember(unit.session_id, unit.life, planned.plan.head_seq, planned.tail, planned.records)
                outcomes[planned.at] = (True, AppendResult.of(planned.plan))
            else:
                # What the writer knew of the session is stale: the append run alone finds out why.
                self._tails.forget(unit.session_id)
                alone[unit.session_id] = planned.at
        for index in sorted(alone.values()):
            outcomes[index] = self._unit(connection, cursor, works[index])

    @staticmethod
    def _passages_of(planned: _Planned) -> tuple[str, Sequence[Passage], int]:
        """A unit's session, its batch's passages and the batch's first seq."""
        batch = planned.unit.batch
        assert batch is not None
        return planned.unit.session_id, batch.passages, planned.plan.first_seq

    def _params(self, pending: Iterable[_Planned], locks: list[str]) -> dict[str, Any]:
        params: dict[str, Any] = {"locks": locks, "channel": NOTIFY_CHANNEL, "touched": now_ms(), "touch_ms": TOUCH_MS}
        for name in GROUP_ARRAYS:
            params[name] = []
        for planned in pending:
            session, batch = planned.unit.session_id, planned.unit.batch
            assert batch is not None
            new_head = planned.plan.head_seq
            params["sessions"].append(session)
            params["expected"].append(planned.plan.first_seq - 1)
            params["heads"].append(new_head)
            params["notices"].append(notice(session, new_head, self._origin))
            life = planned.unit.life
            params["owners"].append(None if life is None else life.owner)
            params["incarnations"].append(None if life is None else life.incarnation)
            for name, value in synopsis_params(batch.synopsis).items():
                params[name].append(value)
            for record in planned.records:
                row = self._lines.row(session, record)
                names = SEALED if record.seq in planned.rewritten else INSERTED
                values = (session, record.seq, record.members, row["compressed"], row["data"], record.kind)
                for name, value in zip(names, (*values, record.key, record.time0, record.time1), strict=True):
                    params[name].append(value)
            for seq in sorted(planned.rewritten - {record.seq for record in planned.records}):
                params["dropped_sessions"].append(session)
                params["dropped_seqs"].append(seq)
            for message in batch.messages:
                params["message_sessions"].append(session)
                params["message_seqs"].append(message.seq)
                params["groups"].append(message.group_start)
            for hidden in batch.hidden:
                params["hidden_sessions"].append(session)
                params["hidden_at"].append(hidden.at)
                params["starts"].append(hidden.start)
                params["ends"].append(hidden.end)
        return params

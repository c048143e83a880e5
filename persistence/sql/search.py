"""Search on the SQL store (docs/protocol.md §14.3): passages written with their append, matched by the database.

Each append writes its batch's passages (`persistence.search.passages`) in its own
transaction, so the index never lags its events: a batch whose first passage continues
the session's last (a block's next deltas) rewrites that row, which stays bounded
(`persistence.search.MAX_PASSAGE`). ``terms``, the passage's folded tokens, is what the
database indexes: SQLite's FTS5 table reads it through the triggers of
`persistence.sql.schema`, and PostgreSQL reads it as a ``tsvector`` under a GIN index.

A query joins each matching passage to its session's row, so a passage answers only
while its session lives, for its owner: a deleted session's rows are gone from the join
in the delete's own transaction, and its passages are purged after, with its records
(`persistence.sql.deletion`), before its id can be created again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect as SaDialect

from codec import CodecError, Event, decode_storage_line, expand_row
from persistence.base import DEFAULT_SESSION_CACHE
from persistence.errors import CorruptLogError
from persistence.search import Passage, SearchPage, SearchRequest, hit, joined, of_batch
from persistence.search.matching import marks
from persistence.search.terms import extended, folded_tokens
from persistence.sql.dialect import Dialect
from persistence.sql.prepared import Prepared
from persistence.sql.schema import passages_table, records_table, sessions_table
from persistence.sql.statements import alive
from persistence.state import Lru

__all__ = [
    "REBUILD_ROWS",
    "SqlSearch",
    "needs_last",
    "page",
    "rebuild_all",
    "rebuild_session",
    "session_ids",
    "stored_events",
]

Unpack = Callable[[int, bool, bytes], bytes]

# How many stored records a rebuild reads at a time, and how many sessions' ids.
REBUILD_ROWS: Final = 1000
_COLUMNS: Final = ("seq", "last_seq", "time", "kind", "run", "body", "terms", "open")


class SqlSearch:
    """The search statements of one database, compiled once; `write` runs in an append's transaction."""

    def __init__(
        self, dialect: SaDialect, ways: Dialect, *, indexed: bool = True, kept: int = DEFAULT_SESSION_CACHE
    ) -> None:
        p, b = passages_table.c, sa.bindparam
        self._ways = ways
        # Without the index (a benchmark's baseline), appends write no passages and searches are refused.
        self.indexed = indexed
        # Each session's last passage, as its text and tokens, for the writer: a block's next delta is then
        # tokenized alone, not with the whole passage again. Only the writer thread reads and writes it.
        self._open: Lru[str, tuple[str, list[str]]] = Lru(kept)
        values: dict[str, sa.ColumnElement[Any]] = {name: b(f"b_{name}") for name in _COLUMNS}
        values["terms"] = ways.search_terms_value(b("b_terms"))
        self._last = Prepared(
            sa.select(p.id, p.seq, p.last_seq, p.time, p.kind, p.run, p.body)
            .where(p.session_id == b("id"))
            .order_by(p.seq.desc(), p.id.desc())
            .limit(1),
            dialect,
        )
        self._insert = Prepared(sa.insert(passages_table).values(session_id=b("b_session"), **values), dialect)
        self._rewrite = Prepared(sa.update(passages_table).where(p.id == b("b_id")).values(**values), dialect)
        first = sa.select(p.id).where(p.session_id == b("id")).order_by(p.id).limit(b("rows"))
        self.purge = Prepared(sa.delete(passages_table).where(p.session_id == b("id"), p.id.in_(first)), dialect)
        self.purge_all = Prepared(sa.delete(passages_table).where(p.session_id == b("id")), dialect)
        # On a dialect that defers it (`Dialect.DEFERS_OPEN`), a session's block still streaming is indexed once
        # it ends: when the session's next event is not its next delta.
        self.defers = ways.DEFERS_OPEN
        self._opened = Prepared(sa.select(p.id, p.body).where(p.session_id == b("id"), p.open == sa.true()), dialect)
        self._close = Prepared(
            sa.update(passages_table).where(p.id == b("b_id")).values(open=False, terms=values["terms"]), dialect
        )

    def write(
        self, cursor: Any, session_id: str, passages: Sequence[Passage], first_seq: int, last_seq: int | None = None
    ) -> None:
        """Write the passages of the batch ``[first_seq, last_seq]``, joining the first to the session's last.

        Where the dialect defers it, the batch's last passage is left open when it is a block the batch
        ends with; one the batch does not continue is closed, and then indexed.
        """
        if not self.indexed:
            return
        if not passages:
            if self.defers:
                self._closed(cursor, session_id)
            return
        last: Passage | None = None
        last_id = 0
        if needs_last(passages, first_seq):
            row = self._last.run(cursor, id=session_id).fetchone()
            if row is not None:
                last_id, last = row[0], Passage(row[1], row[2], row[3], row[4], row[6], row[5])
        rewritten, new = joined(last, list(passages))
        first, rest = self.tokens_of(session_id, last, rewritten, new)
        if rewritten is None and self.defers:
            self._closed(cursor, session_id)
        final = new[-1] if new else rewritten
        left_open = self.defers and final is not None and final.run is not None and final.last_seq == last_seq
        if rewritten is not None:
            assert first is not None
            self._rewrite.run(cursor, b_id=last_id, **self._row(rewritten, first, left_open and not new))
        if new:
            rows = [
                {"b_session": session_id, **self._row(passage, tokens, left_open and at == len(new) - 1)}
                for at, (passage, tokens) in enumerate(zip(new, rest, strict=True))
            ]
            self._insert.run_many(cursor, rows)

    def _closed(self, cursor: Any, session_id: str) -> None:
        """Close the session's open passage, if it has one: its terms are written, and so indexed, only now."""
        row = self._opened.run(cursor, id=session_id).fetchone()
        if row is not None:
            kept = self._open.get(session_id)
            tokens = kept[1] if kept is not None and kept[0] == row[1] else folded_tokens(row[1])
            self._close.run(cursor, b_id=row[0], b_terms=self.terms(tokens))

    def tokens_of(
        self, session_id: str, last: Passage | None, rewritten: Passage | None, new: list[Passage]
    ) -> tuple[list[str] | None, list[list[str]]]:
        """The tokens of what `persistence.search.joined` laid out for a session: ``last`` rewritten (from the
        tokens this writer kept of it, while the stored text is still theirs, and the new text alone), and each
        new passage; the session's last passage is kept for its next append."""
        first = None if rewritten is None else self._continued(session_id, last, rewritten)
        rest = [folded_tokens(passage.text) for passage in new]
        final, tokens = (new[-1], rest[-1]) if new else (rewritten, first)
        if final is not None and tokens is not None and final.run is not None:
            self._open.put(session_id, (final.text, tokens))
        return first, rest

    def terms(self, tokens: list[str]) -> str:
        """A passage's tokens as its ``terms`` column is written, in this database."""
        return self._ways.search_terms(tokens)

    def _continued(self, session_id: str, last: Passage | None, rewritten: Passage) -> list[str]:
        assert last is not None
        if not rewritten.text.startswith(last.text):
            return folded_tokens(rewritten.text)  # cut: a token moved to the next passage
        kept = self._open.get(session_id)
        tokens = kept[1] if kept is not None and kept[0] == last.text else folded_tokens(last.text)
        return extended(tokens, last.text, rewritten.text[len(last.text) :])

    def rebuild(self, cursor: Any, session_id: str, batches: Iterable[Sequence[Event]]) -> int:
        """Replace a session's passages with those of its stored events, given a window at a time; how many it
        holds then."""
        self.purge_all.run(cursor, id=session_id)
        out: list[Passage] = []
        for events in batches:
            last, new = joined(out[-1] if out else None, of_batch(events))
            if last is not None:
                out[-1] = last
            out.extend(new)
        if out:
            rows = [{"b_session": session_id, **self._row(p, folded_tokens(p.text))} for p in out]
            self._insert.run_many(cursor, rows)
        self._open.pop(session_id)
        return len(out)

    def _row(self, passage: Passage, tokens: list[str], left_open: bool = False) -> dict[str, Any]:
        return {
            "b_seq": passage.seq,
            "b_last_seq": passage.last_seq,
            "b_time": passage.time,
            "b_kind": passage.kind,
            "b_run": passage.run,
            "b_body": passage.text,
            # An open passage's terms are written when it closes: until then nothing reads them.
            "b_terms": self.terms([] if left_open else tokens),
            "b_open": left_open,
        }

    def query(self, request: SearchRequest) -> sa.Select[Any]:
        """The request's indexed hits, the latest written first, to one past the page: session, parent, title, the
        passage (seq, kind, time, text) and its id.

        The latest written first, never by the database's relevance: FTS5's bm25 weighs a word by
        how rare it is in the whole index, every principal's passages included, so its rank would
        tell one principal how often others wrote a word. Where open passages are scanned beside
        (`open_query`), the page is merged from both, so this reads from the first hit on.
        """
        source, matched, newest = self._ways.search_match(request.query)
        end = request.offset + request.limit + 1
        query = self._hits(request, source, matched).order_by(newest.desc())
        return query.limit(end) if self.defers else query.limit(request.limit + 1).offset(request.offset)

    def open_query(self, request: SearchRequest) -> sa.Select[Any]:
        """The request's owner's open passages, as `query` gives hits, to be matched by the scan
        (`persistence.search.matching`): a session's block still streaming, at most one a session."""
        # Unordered (`page` merges): ordered by id, SQLite would walk every passage rather than the open ones' index.
        return self._hits(request, passages_table, passages_table.c.open == sa.true())

    def _hits(self, request: SearchRequest, source: sa.FromClause, matched: sa.ColumnElement[bool]) -> sa.Select[Any]:
        p, s = passages_table.c, sessions_table.c
        where = [matched, s.owner == request.owner, alive(request.now, request.retention_ms)]
        if request.closed is not None:
            where.append(s.closed_at.is_not(None) if request.closed else s.closed_at.is_(None))
        if request.since is not None:
            where.append(p.time >= request.since)
        if request.until is not None:
            where.append(p.time < request.until)
        columns = (s.id, s.parent_id, s.title, p.seq, p.kind, p.time, p.body, p.id)
        return sa.select(*columns).select_from(source.join(sessions_table, s.id == p.session_id)).where(*where)


def needs_last(passages: Sequence[Passage], first_seq: int) -> bool:
    """Whether the passages of a batch that starts at ``first_seq`` may continue the session's last: only a batch
    that starts with a delta may continue a block an earlier append began (`persistence.search.joined` decides)."""
    return bool(passages) and passages[0].run is not None and passages[0].seq == first_seq


def page(request: SearchRequest, rows: Sequence[Any], opened: Sequence[Any] | None = None) -> SearchPage:
    """The page of `SqlSearch.query`'s rows, and, where open passages are scanned, of those of `open_query` that
    match, merged the latest written first."""
    if opened is not None:
        found = [row for row in opened if marks(request.query, row[6])]
        merged = sorted([*rows, *found], key=lambda row: row[7], reverse=True)
        rows = merged[request.offset :]
    hits = [hit(request, row[0], row[1], row[2], row[3], row[4], row[5], row[6]) for row in rows[: request.limit]]
    return SearchPage(hits, len(rows) > request.limit)


def stored_events(conn: Connection, unpack: Unpack, session_id: str) -> Iterator[list[Event]]:
    """A session's stored events, in seq order, `REBUILD_ROWS` records at a time (a row's deltas expanded)."""
    r = records_table.c
    after = -1
    while True:
        window = (
            sa.select(r.seq, r.compressed, r.data)
            .where(r.session_id == session_id, r.seq > after)
            .order_by(r.seq)
            .limit(REBUILD_ROWS)
        )
        rows = conn.execute(window).all()
        if not rows:
            return
        events: list[Event] = []
        for row in rows:
            try:
                record = decode_storage_line(unpack(row.seq, row.compressed, row.data))
            except (CodecError, CorruptLogError) as exc:
                raise CorruptLogError(
                    f"session {session_id!r}: stored record at seq {row.seq} is corrupt: {exc}"
                ) from exc
            events.extend([record] if isinstance(record, Event) else expand_row(record))
        yield events
        after = rows[-1].seq


def session_ids(conn: Connection, after: str | None) -> Sequence[str]:
    """The next `REBUILD_ROWS` session ids after ``after`` (``None``: from the first), in id order."""
    s = sessions_table.c
    ids = sa.select(s.id).order_by(s.id).limit(REBUILD_ROWS)
    return conn.execute(ids if after is None else ids.where(s.id > after)).scalars().all()


def rebuild_all(conn: Connection, search: SqlSearch, unpack: Unpack) -> int:
    """Rebuild every session's passages from its records, in ``conn``'s transaction; how many there are then."""
    total = 0
    after: str | None = None
    while found := session_ids(conn, after):
        total += sum(rebuild_session(conn, search, unpack, session_id) for session_id in found)
        after = found[-1]
    return total


def rebuild_session(conn: Connection, search: SqlSearch, unpack: Unpack, session_id: str) -> int:
    """Rebuild one session's passages, in ``conn``'s write transaction; how many it has (0: it is gone)."""
    s = sessions_table.c
    # Locked (on PostgreSQL; SQLite's write transaction holds the file), so no append interleaves.
    if conn.execute(sa.select(s.id).where(s.id == session_id).with_for_update()).first() is None:
        return 0  # deleted meanwhile
    cursor = conn.connection.cursor()
    try:
        return search.rebuild(cursor, session_id, stored_events(conn, unpack, session_id))
    finally:
        cursor.close()

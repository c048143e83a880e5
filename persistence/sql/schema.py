"""The SQL store's tables, and the code-point order its listing sorts ids by.

Tables, keyed ``(session_id, seq)``:

* ``history_sessions``: header (canonical JSON), owner, parent (for subagent children), the
  header's ``createdAt`` (for listings, indexed by owner), head seq, ``closed_at``, the
  header's ``closedAt`` once the session is closed (NULL while it is open), which an append checks,
  and for the sweeper (docs/protocol.md §6.5), both indexed: ``expires_at``, the header's
  ``expiresAt`` (NULL when it has none), and ``touched_at``, when the row was last written
  (created, appended to or closed), by the store's clock; and the session's synopsis
  (`persistence.synopsis`), which each append moves with the head: ``title`` and its
  case-folded ``title_folded`` (what a listing's filter compares), ``last_event_at``
  (NULL while the session has no event), and ``input_tokens`` and ``output_tokens``;
* ``history_records``: one row per stored record (`codec.StoredRecord`), a packed row at its
  ``seq0``: its member count, its canonical JSON line in ``data``, and the join columns
  ``kind``, ``key``, ``time0`` and ``time1``. A line of at least 4 KiB is zstd-compressed
  when that is smaller: measured on the realistic tail page, a cold read costs the same
  either way (decompressing offsets reading five times the bytes), and the file is a
  fifth of the size.
* ``history_messages`` and ``history_hidden``: the message index and ``conversationOp`` ranges;
* ``history_purges``: the ids of deleted sessions whose records are still being removed
  (`persistence.sql.deletion`). A record's session row may be gone before it, so no foreign
  key ties ``history_records`` to ``history_sessions``, and every read of records asks that
  its session row exists, in the same statement;
* ``history_meta``: the schema version (`persistence.sql.migrations`);
* ``ds_streams``, ``ds_chunks`` and ``ds_producers``: generic Durable Streams (`persistence.sql.streams`):
  a stream's metadata as one encoded `persistence.streams.StreamMeta`, with ``deadline``, when it
  expires (indexed, for the sweeper); each append's bytes at the position after them; and each
  idempotent producer's state;
* ``ds_subscriptions``: Durable Streams subscriptions, each a `persistence.streams.SubscriptionRecord`
  (its configuration and state encoded, and the version a change is made over);
* ``search_passages``: each session's search passages (`persistence.search.passages`): the
  seqs of the first and last event, the first event's time, the kind, the run of deltas it
  joins, the text (``body``), and ``terms``, its folded tokens (`persistence.search.terms`),
  which the database's full-text index reads: on SQLite the FTS5 table ``search_fts``, whose
  content is this table's ``terms`` (kept in step by triggers); on PostgreSQL a ``tsvector``
  with a GIN index. A deleted session's passages are purged with its records;
* ``history_notices``: the notices log between processes on one host (`persistence.notice_log`),
  written by SQLite's writer in the transaction of each change it tells of; PostgreSQL has
  ``NOTIFY`` and never writes it.

Each dialect module compiles `CodePointOrder` and `StoredIncarnation` for its database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import sqlalchemy as sa
import zstandard
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.sql.visitors import InternalTraversal

from codec import CodecError, SessionHeader, StoredRecord, decode_header
from persistence.errors import CorruptLogError
from persistence.page_bound import bounded_cuts, floor_sizes, within

__all__ = [
    "COMPRESS_AT",
    "expiry_indexes",
    "CodePointOrder",
    "FRAME_HEADER",
    "JOIN_COLUMNS",
    "PROBE",
    "purges_table",
    "SCHEMA_VERSION",
    "SYNOPSIS_COLUMNS",
    "StoredIncarnation",
    "bounded_rows",
    "hidden_table",
    "line_size",
    "listing_index",
    "messages_table",
    "meta_table",
    "metadata",
    "of_life",
    "records_table",
    "sessions_table",
    "stored_header",
    "ds_chunks_table",
    "ds_producers_table",
    "ds_streams_table",
    "ds_subscriptions_table",
    "notices_table",
    "passages_table",
]

SCHEMA_VERSION: Final = 10
COMPRESS_AT: Final = 4096


class CodePointOrder(sa.ColumnElement[str]):
    """A text column compared by code point, as Python compares str (and so every other store)."""

    inherit_cache = True
    _traverse_internals = [("column", InternalTraversal.dp_clauseelement)]
    type = sa.String()

    def __init__(self, column: sa.ColumnElement[str]) -> None:
        self.column = column


class StoredIncarnation(sa.ColumnElement[str]):
    """The incarnation a stored header names, read in SQL: ``NULL`` for a header from before incarnations."""

    inherit_cache = True
    _traverse_internals = [("header", InternalTraversal.dp_clauseelement)]
    type = sa.String()

    def __init__(self, header: sa.ColumnElement[bytes]) -> None:
        self.header = header


metadata = sa.MetaData()
meta_table = sa.Table(
    "history_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.String(255), nullable=False),
)
sessions_table = sa.Table(
    "history_sessions",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("header", sa.LargeBinary, nullable=False),
    sa.Column("owner", sa.String, nullable=False),
    sa.Column("parent_id", sa.String, nullable=True, index=True),
    sa.Column("head_seq", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Column("closed_at", sa.BigInteger, nullable=True),
    sa.Column("expires_at", sa.BigInteger, nullable=True),
    sa.Column("touched_at", sa.BigInteger, nullable=False),
    sa.Column("title", sa.String, nullable=True),
    sa.Column("title_folded", sa.String, nullable=True),
    sa.Column("last_event_at", sa.BigInteger, nullable=True),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
)
# The synopsis columns (`persistence.synopsis`), in the order of `persistence.synopsis.Synopsis` (and the folded title).
SYNOPSIS_COLUMNS: Final = ("title", "last_event_at", "input_tokens", "output_tokens")
# The sweeper's two reads (`persistence.rules.expiry`): sessions past their own expiresAt, and
# sessions last written before the retention's cutoff; each a range scan that stops at its limit.
expiry_indexes = (
    sa.Index(
        "ix_history_sessions_expires",
        sessions_table.c.expires_at,
        sqlite_where=sessions_table.c.expires_at.is_not(None),
        postgresql_where=sessions_table.c.expires_at.is_not(None),
    ),
    sa.Index("ix_history_sessions_touched", sessions_table.c.touched_at),
)
# A listing reads one owner's top-level sessions newest first: a backward range scan of this
# index that never visits a child's entry, so a page costs its length, not the owner's sessions.
listing_index = sa.Index(
    "ix_history_sessions_listing",
    sessions_table.c.owner,
    sessions_table.c.created_at,
    CodePointOrder(sessions_table.c.id),
    sqlite_where=sessions_table.c.parent_id.is_(None),
    postgresql_where=sessions_table.c.parent_id.is_(None),
)
records_table = sa.Table(
    "history_records",
    metadata,
    sa.Column("session_id", sa.String, primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("members", sa.Integer, nullable=False),
    sa.Column("compressed", sa.Boolean, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("kind", sa.SmallInteger, nullable=False),
    sa.Column("key", sa.LargeBinary, nullable=False),
    sa.Column("time0", sa.BigInteger, nullable=False),
    sa.Column("time1", sa.BigInteger, nullable=False),
)
JOIN_COLUMNS: Final = ("kind", "key", "time0", "time1")
purges_table = sa.Table("history_purges", metadata, sa.Column("session_id", sa.String, primary_key=True))
# The longest zstd frame header: magic, descriptor, window, dictionary id and content size.
FRAME_HEADER: Final = 18


def stored_header(data: bytes, session_id: str) -> SessionHeader:
    """A ``header`` column's session header; `CorruptLogError` when it does not decode."""
    try:
        return decode_header(data)
    except CodecError as exc:
        raise CorruptLogError(f"session {session_id!r}: stored header is corrupt: {exc}") from exc


def line_size(stored: int, frame: bytes | None) -> int:
    """A line's length: its stored size, or what its compressed frame says it holds (at least its stored size)."""
    if frame is None:
        return int(stored)
    try:
        size = zstandard.frame_content_size(bytes(frame))
    except zstandard.ZstdError:
        return int(stored)
    return max(int(stored), size)


def bounded_rows(cuts: list[int], to_seq: int, rows: Sequence[Any], max_bytes: int) -> list[int]:
    """`persistence.page_bound.bounded_cuts` over rows of ``seq, members, stored size, frame, join columns``."""
    sizes = [line_size(row[2], row[3]) for row in rows]
    if within(sizes, max_bytes):
        return cuts
    records = [
        StoredRecord(seq, members, b"", kind, bytes(key), time0, time1)
        for seq, members, _, _, kind, key, time0, time1 in rows
    ]
    return bounded_cuts(cuts, to_seq, records, floor_sizes(records, sizes), max_bytes)


def of_life(owner: sa.ColumnElement[str], header: sa.ColumnElement[bytes]) -> sa.ColumnElement[bool]:
    """Whether a session row is the life (`persistence.rules.Life`) the ``owner`` and ``incarnation`` parameters name.

    Either parameter ``NULL`` matches any. A header that names no incarnation is from before
    incarnations, and every life created since names one, so such a row is the only life its
    id has had since: it is the one named, whatever its derived incarnation.
    """
    owner_param, incarnation = sa.bindparam("owner", type_=sa.String), sa.bindparam("incarnation", type_=sa.String)
    stored = StoredIncarnation(header)
    return sa.and_(
        owner == sa.func.coalesce(owner_param, owner),
        sa.func.coalesce(stored, incarnation, "") == sa.func.coalesce(incarnation, stored, ""),
    )


# The readiness probe's read: one row of the sessions table, so it reads the table itself, not only the catalog.
PROBE: Final = f"SELECT 1 FROM {sessions_table.name} LIMIT 1"
messages_table = sa.Table(
    "history_messages",
    metadata,
    sa.Column("session_id", sa.String, sa.ForeignKey("history_sessions.id"), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("group_start", sa.BigInteger, nullable=False),
)
hidden_table = sa.Table(
    "history_hidden",
    metadata,
    sa.Column("session_id", sa.String, sa.ForeignKey("history_sessions.id"), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("start", sa.BigInteger, nullable=False),
    sa.Column("end", sa.BigInteger, nullable=False),
)
ds_streams_table = sa.Table(
    "ds_streams",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("meta", sa.LargeBinary, nullable=False),
    sa.Column("deadline", sa.BigInteger, nullable=True),
    sa.Index(
        "ix_ds_streams_deadline",
        "deadline",
        sqlite_where=sa.text("deadline IS NOT NULL"),
        postgresql_where=sa.text("deadline IS NOT NULL"),
    ),
)
ds_chunks_table = sa.Table(
    "ds_chunks",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("end_pos", sa.BigInteger, primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
)
ds_producers_table = sa.Table(
    "ds_producers",
    metadata,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("producer_id", sa.String, primary_key=True),
    sa.Column("state", sa.LargeBinary, nullable=False),
)
ds_subscriptions_table = sa.Table(
    "ds_subscriptions",
    metadata,
    sa.Column("owner", sa.String, primary_key=True),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("config", sa.LargeBinary, nullable=False),
    sa.Column("state", sa.LargeBinary, nullable=False),
)
notices_table = sa.Table(
    "history_notices",
    metadata,
    # Integer, not BigInteger: only SQLite's "INTEGER PRIMARY KEY" is the rowid, numbered max + 1 in commit order.
    sa.Column("n", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("origin", sa.Text, nullable=False),
    sa.Column("notice", sa.Text, nullable=False),
)
passages_table = sa.Table(
    "search_passages",
    metadata,
    # On SQLite "INTEGER PRIMARY KEY" is the rowid, which the FTS5 table's rows are keyed by.
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("time", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("run", sa.String, nullable=True),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("terms", sa.Text().with_variant(TSVECTOR(), "postgresql"), nullable=False),
    # A block still streaming, on SQLite: kept out of search_fts until it ends, and scanned by a search meanwhile.
    sa.Column("open", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Index("ix_search_passages_session", "session_id", "seq"),
)
# Said as the queries say it (``open = 1``), so SQLite sees that they may read it.
sa.Index(
    "ix_search_passages_open",
    passages_table.c.session_id,
    sqlite_where=passages_table.c.open == sa.true(),
    postgresql_where=passages_table.c.open == sa.true(),
)


def _ddl(statement: str, dialect: str) -> Any:
    """DDL that only ``dialect``'s databases run."""
    return sa.DDL(statement).execute_if(dialect=dialect)  # type: ignore[no-untyped-call]


# The full-text index over ``terms``: made with the table, by the database it is made in.
for _statement in (
    # Contentful, external: FTS5 reads a row's terms from search_passages, and the triggers tell it each change.
    # Marks are token characters too: a few letters to Python (New Tai Lue's vowels) are marks to SQLite.
    "CREATE VIRTUAL TABLE search_fts USING fts5(terms, content='search_passages', content_rowid='id', "
    "tokenize='unicode61 remove_diacritics 0 categories ''L* N* Co M*''')",
    # An open passage is in no FTS5 row: each trigger reads or writes search_fts only for one that is not.
    "CREATE TRIGGER search_passages_ai AFTER INSERT ON search_passages WHEN NOT new.open BEGIN "
    "INSERT INTO search_fts(rowid, terms) VALUES (new.id, new.terms); END",
    "CREATE TRIGGER search_passages_ad AFTER DELETE ON search_passages WHEN NOT old.open BEGIN "
    "INSERT INTO search_fts(search_fts, rowid, terms) VALUES ('delete', old.id, old.terms); END",
    "CREATE TRIGGER search_passages_au AFTER UPDATE ON search_passages BEGIN "
    "INSERT INTO search_fts(search_fts, rowid, terms) SELECT 'delete', old.id, old.terms WHERE NOT old.open; "
    "INSERT INTO search_fts(rowid, terms) SELECT new.id, new.terms WHERE NOT new.open; END",
):
    sa.event.listen(passages_table, "after_create", _ddl(_statement, "sqlite"))
sa.event.listen(
    passages_table,
    "after_create",
    _ddl("CREATE INDEX ix_search_passages_terms ON search_passages USING gin (terms)", "postgresql"),
)
sa.event.listen(passages_table, "before_drop", _ddl("DROP TABLE IF EXISTS search_fts", "sqlite"))

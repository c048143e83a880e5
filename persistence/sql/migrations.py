"""The schema version in ``history_meta``, and the upgrades from versions 1 to 9 to the current one.

An older database is upgraded in place when opened; an unknown version refuses to open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from codec import CodecError, Event, SessionHeader, decode_storage_line, stored_record
from persistence.clock import now_ms
from persistence.errors import CorruptLogError, SchemaVersionError
from persistence.sql.dialect import Dialect
from persistence.sql.schema import (
    JOIN_COLUMNS,
    SCHEMA_VERSION,
    ds_chunks_table,
    ds_producers_table,
    ds_streams_table,
    ds_subscriptions_table,
    expiry_indexes,
    listing_index,
    meta_table,
    metadata,
    notices_table,
    passages_table,
    purges_table,
    records_table,
    sessions_table,
)
from persistence.sql.search import SqlSearch, rebuild_all
from persistence.synopsis import EMPTY, Synopsis, folded, synopsis_of

__all__ = ["migrate", "refuse"]

_BACKFILL_BATCH: Final = 1000

Header = Callable[[bytes, str], SessionHeader]
Unpack = Callable[[int, bool, bytes], bytes]


def migrate(conn: Connection, dialect: Dialect, header: Header, unpack: Unpack) -> str | None:
    """Create the schema on an empty database or upgrade an old one, in ``conn``'s write transaction.

    Returns the version found when it is none this build upgrades, for `refuse` once the transaction is over.
    """
    dialect.before_migration(conn)
    if not sa.inspect(conn).has_table(meta_table.name):
        metadata.create_all(conn)
        conn.execute(sa.insert(meta_table).values(key="schema_version", value=str(SCHEMA_VERSION)))
        return None
    # FOR UPDATE: of two processes opening a version-1 database, one upgrades it and the
    # other then reads version 2 (SQLite's write transaction already serializes them).
    version = conn.execute(
        sa.select(meta_table.c.value).where(meta_table.c.key == "schema_version").with_for_update()
    ).scalar()
    if version == "1":
        _upgrade_from_1(conn, header)
        version = "2"
    if version == "2":
        _upgrade_from_2(conn, dialect, unpack)
        version = "3"
    if version == "3":
        _upgrade_from_3(conn)
        version = "4"
    if version == "4":
        _upgrade_from_4(conn, dialect)
        version = "5"
    if version == "5":
        _upgrade_from_5(conn)
        version = "6"
    if version == "6":
        _upgrade_from_6(conn)
        version = "7"
    if version == "7":
        _upgrade_from_7(conn)
        version = "8"
    if version == "8":
        _upgrade_from_8(conn, dialect, unpack)
        version = "9"
    if version == "9":
        _upgrade_from_9(conn, dialect, unpack)
        return None
    return version


def refuse(version: str | None) -> None:
    """Raise `SchemaVersionError` for a version `migrate` found and could not upgrade."""
    if version is not None and version != str(SCHEMA_VERSION):
        raise SchemaVersionError(
            f"the database has history schema version {version!r}; "
            f"this build reads version {SCHEMA_VERSION} and upgrades versions 1 to 9"
        )


def _upgrade_from_1(conn: Connection, header: Header) -> None:
    """Version 2 adds ``history_sessions.created_at`` and the listing index; one transaction does it all."""
    # SQLite cannot add a NOT NULL column without a default; every insert names created_at.
    conn.exec_driver_sql("ALTER TABLE history_sessions ADD COLUMN created_at BIGINT NOT NULL DEFAULT 0")
    c = sessions_table.c
    set_created_at = (
        sa.update(sessions_table).where(c.id == sa.bindparam("b_id")).values(created_at=sa.bindparam("b_created"))
    )
    after: str | None = None
    while True:
        batch = sa.select(c.id, c.header).order_by(c.id).limit(_BACKFILL_BATCH)
        rows = conn.execute(batch if after is None else batch.where(c.id > after)).all()
        if not rows:
            break
        conn.execute(
            set_created_at,
            [{"b_id": row.id, "b_created": header(row.header, row.id).createdAt} for row in rows],
        )
        after = rows[-1].id
    listing_index.create(conn)
    _set_version(conn, "2")


def _upgrade_from_2(conn: Connection, dialect: Dialect, unpack: Unpack) -> None:
    """Version 3 adds the join columns to ``history_records``, filled from each record's line."""
    for name, kind, default in (
        ("kind", sa.SmallInteger(), "0"),
        ("key", sa.LargeBinary(), dialect.EMPTY_BYTES),
        ("time0", sa.BigInteger(), "0"),
        ("time1", sa.BigInteger(), "0"),
    ):
        column_type = kind.compile(dialect=conn.dialect)
        conn.exec_driver_sql(f"ALTER TABLE history_records ADD COLUMN {name} {column_type} NOT NULL DEFAULT {default}")
    c = records_table.c
    set_columns = (
        sa.update(records_table)
        .where(c.session_id == sa.bindparam("b_session"), c.seq == sa.bindparam("b_seq"))
        .values({name: sa.bindparam(f"b_{name}") for name in JOIN_COLUMNS})
    )
    after: tuple[str, int] | None = None
    while True:
        batch = (
            sa.select(c.session_id, c.seq, c.compressed, c.data).order_by(c.session_id, c.seq).limit(_BACKFILL_BATCH)
        )
        if after is not None:
            batch = batch.where(sa.tuple_(c.session_id, c.seq) > sa.tuple_(*after))
        rows = conn.execute(batch).all()
        if not rows:
            break
        updates = []
        for row in rows:
            line = unpack(row.seq, row.compressed, row.data)
            try:
                record = stored_record(decode_storage_line(line), line)
            except CodecError as exc:
                raise CorruptLogError(
                    f"session {row.session_id!r}: stored record at seq {row.seq} is corrupt: {exc}"
                ) from exc
            if record.kind:
                updates.append(
                    {
                        "b_session": row.session_id,
                        "b_seq": row.seq,
                        **{f"b_{name}": getattr(record, name) for name in JOIN_COLUMNS},
                    }
                )
        if updates:
            conn.execute(set_columns, updates)
        after = (rows[-1].session_id, rows[-1].seq)
    _set_version(conn, "3")


def _upgrade_from_3(conn: Connection) -> None:
    """Version 4 adds ``closed_at`` to ``history_sessions``: every session of an older database is open."""
    conn.exec_driver_sql("ALTER TABLE history_sessions ADD COLUMN closed_at BIGINT")
    _set_version(conn, "4")


def _upgrade_from_4(conn: Connection, dialect: Dialect) -> None:
    """Version 5 adds ``expires_at`` and ``touched_at``, for retention (docs/protocol.md §6.5), and
    ``history_purges``, for deletes that remove a session's records after its row.

    No older header holds an ``expiresAt``. A session's last write before the upgrade is not on
    record (a plain record keeps no time of its own), so each counts as written at the upgrade:
    a retention then never deletes an older session sooner than a whole period after it.
    """
    conn.exec_driver_sql("ALTER TABLE history_sessions ADD COLUMN expires_at BIGINT")
    # A constant default: PostgreSQL adds the column without rewriting the table, and nothing is updated.
    conn.exec_driver_sql(f"ALTER TABLE history_sessions ADD COLUMN touched_at BIGINT NOT NULL DEFAULT {now_ms()}")
    dialect.drop_default(conn, sessions_table.name, "touched_at")
    # A delete now leaves its records to be purged after the session row (`persistence.sql.deletion`).
    purges_table.create(conn, checkfirst=True)
    for key in sa.inspect(conn).get_foreign_keys(records_table.name):
        if key["name"]:  # SQLite's have none, and cannot be dropped: its connections do not enforce them
            conn.exec_driver_sql(f'ALTER TABLE {records_table.name} DROP CONSTRAINT "{key["name"]}"')
    for index in expiry_indexes:
        index.create(conn)
    _set_version(conn, "5")


def _upgrade_from_5(conn: Connection) -> None:
    """Version 6 adds the Durable Streams tables (docs/protocol.md §13); nothing older changes."""
    for table in (ds_streams_table, ds_chunks_table, ds_producers_table):
        table.create(conn, checkfirst=True)
    _set_version(conn, "6")


def _upgrade_from_6(conn: Connection) -> None:
    """Version 7 adds ``ds_subscriptions``: subscriptions are kept in the store (docs/protocol.md §13.6)."""
    ds_subscriptions_table.create(conn, checkfirst=True)
    _set_version(conn, "7")


def _upgrade_from_7(conn: Connection) -> None:
    """Version 8 adds ``history_notices``, the notices between processes of one host (docs/protocol.md §7.6).

    Nothing older changes, but a build before it would write without telling the others: it refuses version 8.
    """
    notices_table.create(conn, checkfirst=True)
    _set_version(conn, "8")


def _upgrade_from_8(conn: Connection, dialect: Dialect, unpack: Unpack) -> None:
    """Version 9 adds each session's synopsis (`persistence.synopsis`), folded from its stored events.

    Only records that never join (``kind`` 0) can name a title or report tokens, so only those
    are read and decoded, in batches; a session's last event's time is its last record's
    (a row's ``time1``, or the event's own time).
    """
    for name, kind in (("title", sa.String()), ("title_folded", sa.String()), ("last_event_at", sa.BigInteger())):
        conn.exec_driver_sql(f"ALTER TABLE history_sessions ADD COLUMN {name} {kind.compile(dialect=conn.dialect)}")
    for name in ("input_tokens", "output_tokens"):
        conn.exec_driver_sql(f"ALTER TABLE history_sessions ADD COLUMN {name} BIGINT NOT NULL DEFAULT 0")
        dialect.drop_default(conn, sessions_table.name, name)
    s, r = sessions_table.c, records_table.c
    set_synopsis = (
        sa.update(sessions_table)
        .where(s.id == sa.bindparam("b_id"))
        .values(
            title=sa.bindparam("b_title"),
            title_folded=sa.bindparam("b_folded"),
            input_tokens=sa.bindparam("b_input"),
            output_tokens=sa.bindparam("b_output"),
        )
    )

    def event(row: Any) -> Event:
        line = unpack(row.seq, row.compressed, row.data)
        try:
            found = decode_storage_line(line)
        except CodecError as exc:
            where = f"session {row.session_id!r}: stored record at seq {row.seq}"
            raise CorruptLogError(f"{where} is corrupt: {exc}") from exc
        if not isinstance(found, Event):
            raise CorruptLogError(f"session {row.session_id!r}: stored record at seq {row.seq} is a row of kind 0")
        return found

    def flush(done: dict[str, Synopsis]) -> None:
        if done:
            conn.execute(
                set_synopsis,
                [
                    {
                        "b_id": session_id,
                        "b_title": found.title,
                        "b_folded": None if found.title is None else folded(found.title),
                        "b_input": found.input_tokens,
                        "b_output": found.output_tokens,
                    }
                    for session_id, found in done.items()
                ],
            )
            done.clear()

    # Titles and tokens: the plain records of every session, in (session, seq) order, folded as one batch each.
    done: dict[str, Synopsis] = {}
    current, folding = None, EMPTY
    after: tuple[str, int] | None = None
    alive = sa.exists().where(s.id == r.session_id)
    while True:
        batch = (
            sa.select(r.session_id, r.seq, r.compressed, r.data)
            .where(r.kind == 0, alive)
            .order_by(r.session_id, r.seq)
            .limit(_BACKFILL_BATCH)
        )
        if after is not None:
            batch = batch.where(sa.tuple_(r.session_id, r.seq) > sa.tuple_(*after))
        rows = conn.execute(batch).all()
        for row in rows:
            if row.session_id != current:
                if current is not None:
                    done[current] = folding
                current, folding = row.session_id, EMPTY
            folding = synopsis_of([[event(row)]], folding)
        if len(done) >= _BACKFILL_BATCH or not rows:
            flush(done)
        if not rows:
            break
        after = (rows[-1].session_id, rows[-1].seq)
    if current is not None:
        done[current] = folding
    flush(done)
    # The last event's time: each session's last record, a batch of sessions at a time.
    set_last = sa.update(sessions_table).where(s.id == sa.bindparam("b_id")).values(last_event_at=sa.bindparam("b_at"))
    last_seq = (
        sa.select(r.session_id, sa.func.max(r.seq).label("seq"))
        .where(r.session_id.in_(sa.bindparam("b_ids", expanding=True)))
        .group_by(r.session_id)
        .subquery()
    )
    last = sa.select(r.session_id, r.seq, r.kind, r.time1, r.compressed, r.data).join(
        last_seq, sa.and_(r.session_id == last_seq.c.session_id, r.seq == last_seq.c.seq)
    )
    after_id: str | None = None
    while True:
        ids_query = sa.select(s.id).where(s.head_seq >= 0).order_by(s.id).limit(_BACKFILL_BATCH)
        ids = conn.execute(ids_query if after_id is None else ids_query.where(s.id > after_id)).scalars().all()
        if not ids:
            break
        lasts = conn.execute(last, {"b_ids": list(ids)}).all()
        if lasts:
            conn.execute(
                set_last,
                [{"b_id": row.session_id, "b_at": row.time1 if row.kind else event(row).time} for row in lasts],
            )
        after_id = ids[-1]
    _set_version(conn, "9")


def _upgrade_from_9(conn: Connection, dialect: Dialect, unpack: Unpack) -> None:
    """Version 10 adds the search passages and the database's full-text index over them (docs/protocol.md §14.3),
    built from every session's stored events."""
    passages_table.create(conn)
    rebuild_all(conn, SqlSearch(conn.dialect, dialect), unpack)
    _set_version(conn, "10")


def _set_version(conn: Connection, version: str) -> None:
    conn.execute(sa.update(meta_table).where(meta_table.c.key == "schema_version").values(value=version))

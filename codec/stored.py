"""Stored records: the storage form of a session, made for splicing (docs/protocol.md §7).

Every backend keeps, per storage record, its canonical JSON line (the exact bytes a page
carries) and the columns a join needs: the seq range, the kind, the block key and the
first and last member times. Whether two records join is decided from the columns alone,
with the one run rule (`continues_run`); joining them concatenates byte spans of their
lines. Only a row cut by an interval's edge is decoded.

Appends may store one run in several pieces; `runs` groups them, and `codec.splice` joins
them from spans of their lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, NamedTuple

import msgspec

from codec._paths import DECODE_FAILURES, describe, reason
from codec.chunk_rows import (
    ROW_TAGS,
    Block,
    ChunkRow,
    StorageRecord,
    block_of,
    check_row,
    continues_run,
    delta_member,
    member_count,
    pack,
    row_block,
)
from codec.errors import InvalidJsonError, RecordFormatError, RowFormatError
from codec.event_json import decode_event, encode
from codec.events import Event

__all__ = [
    "OTHER",
    "Part",
    "StoredRecord",
    "decode_storage_line",
    "runs",
    "single_delta",
    "stored_batch",
    "stored_record",
]

OTHER: Final = 0
_SINGLE: Final = 4

Part = bytes | memoryview


class StoredRecord(NamedTuple):
    """One storage record: its seq range, its canonical JSON line and its join columns.

    ``kind`` is `OTHER` for a record that never joins, the block kind (1-3) for a row and
    the block kind plus 4 for a single delta event; ``key`` is the block key (`Block.key`);
    ``time0`` and ``time1`` are the first and the last member's time.
    """

    seq: int
    members: int
    line: bytes
    kind: int = OTHER
    key: bytes = b""
    time0: int = 0
    time1: int = 0

    @property
    def block(self) -> Block:
        return Block(self.kind & 3, self.key)

    @property
    def is_row(self) -> bool:
        return 0 < self.kind < _SINGLE

    @property
    def end(self) -> int:
        """One past the last seq."""
        return self.seq + self.members


def stored_record(record: StorageRecord, line: bytes | None = None) -> StoredRecord:
    """The stored form of an event or a row; ``line`` is its canonical encoding when already made."""
    if line is None:
        line = encode(record)
    if type(record) is Event:
        member = delta_member(record)
        if member is None:
            return StoredRecord(record.seq, 1, line)
        kind, key = block_of(member)
        return StoredRecord(record.seq, 1, line, kind + _SINGLE, key, record.time, record.time)
    row: ChunkRow = record  # type: ignore[assignment]
    kind, key = row_block(row)
    return StoredRecord(row.seq0, member_count(row), line, kind, key, row.time0, row.time0 + sum(row.data.dt))


def single_delta(seq: int, line: bytes, block: Block, time: int) -> StoredRecord:
    """The stored form of one delta event of ``block``, from its canonical line: what `stored_record` makes of it."""
    return StoredRecord(seq, 1, line, (block.kind & 3) + _SINGLE, block.key, time, time)


def stored_batch(events: Sequence[Event]) -> list[StoredRecord]:
    """A dense batch packed into stored records: a row for each run, an event for the rest."""
    return [stored_record(record) for record in pack(events)]


class _TypeProbe(msgspec.Struct):
    type: Any = None


_PROBE: Final = msgspec.json.Decoder(_TypeProbe)
_ROW: Final = msgspec.json.Decoder(ChunkRow)


def decode_storage_line(line: bytes, *, where: str = "record") -> StorageRecord:
    """Decode one storage line: a chunk row (by its tag) or a logical event."""
    try:
        tag = _PROBE.decode(line).type
    except DECODE_FAILURES as exc:
        if isinstance(exc, msgspec.ValidationError):
            raise RecordFormatError(f"{where}: not a JSON object: {reason(exc)}") from exc
        raise InvalidJsonError(f"{where}: invalid JSON: {reason(exc)}") from exc
    if type(tag) is str and tag in ROW_TAGS:
        try:
            row = _ROW.decode(line)
        except msgspec.ValidationError as exc:
            row_where, why = describe(exc, "row")
            raise RowFormatError(f"malformed {tag} row: {row_where}: {why}") from exc
        except DECODE_FAILURES as exc:
            raise InvalidJsonError(f"{where}: invalid JSON: {reason(exc)}") from exc
        return check_row(row)
    if tag == "session":
        raise RecordFormatError(f"{where}: a session header where a storage record was expected")
    return decode_event(line, where=where)


def runs(stored: Iterable[StoredRecord]) -> Iterator[list[StoredRecord]]:
    """Group stored records, in seq order: the pieces of each run of deltas together, every other record alone."""
    run: list[StoredRecord] = []
    for record in stored:
        if run and record.kind:
            last = run[-1]
            if last.kind and continues_run(
                last.block, last.end - 1, last.time1, record.block, record.seq, record.time0
            ):
                run.append(record)
                continue
        if run:
            yield run
        run = [record]
    if run:
        yield run

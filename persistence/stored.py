"""Stored records: what every backend keeps for an append batch.

A batch is packed into storage records, rows capped at `MAX_ROW_MEMBERS` so that a read
starting inside a row needs a bounded lookback, and each record is kept as its canonical
JSON line: the exact bytes the codec encodes. Pages splice those bytes instead of
decoding and re-encoding them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from codec import Event, encode, member_count, pack
from persistence.message_index import HiddenRange, MessageEntry, index_entries

__all__ = ["MAX_ROW_MEMBERS", "PreparedBatch", "StoredRecord", "is_row_line", "prepare_batch"]

MAX_ROW_MEMBERS: Final = 1024
_ROW_PREFIXES: Final = (b'{"type":"text-chunks"', b'{"type":"reasoning-chunks"', b'{"type":"tool-call-chunks"')


class StoredRecord(NamedTuple):
    """One storage record: its first seq, how many logical events it holds, and its JSON line."""

    seq: int
    members: int
    line: bytes


class PreparedBatch(NamedTuple):
    """An append batch ready to write: its records and its message-index entries."""

    records: list[StoredRecord]
    messages: list[MessageEntry]
    hidden: list[HiddenRange]


def is_row_line(line: bytes) -> bool:
    """Whether a canonical storage line is a chunk row."""
    return line.startswith(_ROW_PREFIXES)


def prepare_batch(events: Sequence[Event]) -> PreparedBatch:
    """Pack a dense batch into stored records and derive its index entries."""
    records = []
    for record in pack(events, max_members=MAX_ROW_MEMBERS):
        if type(record) is Event:
            records.append(StoredRecord(record.seq, 1, encode(record)))
        else:
            records.append(StoredRecord(record.seq0, member_count(record), encode(record)))  # type: ignore[union-attr, arg-type]
    messages, hidden = index_entries(events)
    return PreparedBatch(records, messages, hidden)

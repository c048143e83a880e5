"""An append batch ready to write: its stored records and its message-index entries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from codec import Event, StoredRecord, stored_batch
from persistence.message_index import HiddenRange, MessageEntry, index_entries

__all__ = ["PreparedBatch", "prepare_batch"]


class PreparedBatch(NamedTuple):
    """A batch packed into stored records (`codec.StoredRecord`), with the index entries it adds."""

    records: list[StoredRecord]
    messages: list[MessageEntry]
    hidden: list[HiddenRange]


def prepare_batch(events: Sequence[Event]) -> PreparedBatch:
    """Pack a dense batch into stored records and derive its index entries."""
    messages, hidden = index_entries(events)
    return PreparedBatch(stored_batch(events), messages, hidden)

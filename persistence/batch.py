"""An append batch ready to write: its stored records, its message-index entries and what it says of the synopsis."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

import anyio.to_thread

from codec import Event, StoredRecord, stored_batch
from persistence.message_index import HiddenRange, MessageEntry, index_entries
from persistence.search import Passage, of_batch as passages_of
from persistence.synopsis import BatchSynopsis, of_batch

__all__ = ["PreparedBatch", "prepare_batch", "prepared"]

# Batches of more events are packed in a worker thread, off the event loop.
PACK_INLINE: Final = 64


class PreparedBatch(NamedTuple):
    """A batch packed into stored records (`codec.StoredRecord`), with the index entries it adds, its synopsis and
    its search passages (`persistence.search.passages`, before any joins the session's last)."""

    records: list[StoredRecord]
    messages: list[MessageEntry]
    hidden: list[HiddenRange]
    synopsis: BatchSynopsis
    passages: list[Passage]


def prepare_batch(events: Sequence[Event]) -> PreparedBatch:
    """Pack a dense, non-empty batch into stored records and derive its index entries, synopsis and passages."""
    messages, hidden = index_entries(events)
    return PreparedBatch(stored_batch(events), messages, hidden, of_batch(events), passages_of(events))


async def prepared(events: Sequence[Event]) -> PreparedBatch | None:
    """`prepare_batch` of a non-empty batch (``None`` for an empty one), in a worker thread when it is large."""
    if not events:
        return None
    if len(events) <= PACK_INLINE:
        return prepare_batch(events)
    return await anyio.to_thread.run_sync(prepare_batch, events)

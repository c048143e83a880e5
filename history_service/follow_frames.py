"""The frames of a ``session.follow`` stream (docs/protocol.md §5): SSE frames, each event's carrying its id.

A stored event's line is its canonical JSON and goes into its frame as it is, never decoded
and encoded again. A packed stream's ``records`` frame (§5.5) carries the page records of an
interval, spliced from stored records as a page's are.
"""

from __future__ import annotations

from collections.abc import Sequence

from codec import StoredRecord, event_id, live_records

__all__ = ["event_frames", "records_frame", "sse_frame"]


def sse_frame(event: str, data: bytes, *, event_id: bytes | None = None, before: bytes = b"") -> bytes:
    """One SSE frame, after ``before``. ``data`` is single-line JSON, so it needs no splitting.

    ``event_id`` is the frame's ``id:`` (`codec.event_id`). It is joined once: ``data`` may be
    a whole snapshot, and each concatenation would copy it.
    """
    head = b"" if event_id is None else b"id: %s\n" % event_id
    return b"".join((before, head, b"event: ", event.encode(), b"\ndata: ", data, b"\n\n"))


def event_frames(records: Sequence[StoredRecord], incarnation: str) -> bytes:
    """The ``event`` frames of stored records of one event each (`codec.event_records`), joined."""
    parts: list[bytes] = []
    for record in records:
        parts += (b"id: %b\nevent: event\ndata: " % event_id(incarnation, record.seq), record.line, b"\n\n")
    return b"".join(parts)


def records_frame(stored: Sequence[StoredRecord], from_seq: int, to_seq: int, incarnation: str) -> bytes:
    """The ``records`` frame of ``[from_seq, to_seq)``: its page records, packed as a page packs them (§5.5).

    Its ``id:`` is the last seq it covers, so a resume from it continues after the frame.
    """
    data = live_records(stored, from_seq, to_seq)
    return sse_frame("records", data, event_id=event_id(incarnation, to_seq - 1))

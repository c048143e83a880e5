"""The frames of a ``session.follow`` stream (docs/protocol.md §5): SSE frames, each event's carrying its id.

A stored event's line is its canonical JSON and goes into its frame as it is, never decoded
and encoded again. A packed stream's ``records`` frame (§5.5) carries the page records of an
interval, spliced from stored records as a page's are.
"""

from __future__ import annotations

from collections.abc import Sequence

from codec import Event, StoredRecord, encode, event_id, event_lines, live_records, stored_record

__all__ = ["event_frame", "live_event", "records_frame", "seq_records", "sse_frame", "stored_frames"]


def sse_frame(event: str, data: bytes, *, event_id: bytes | None = None, before: bytes = b"") -> bytes:
    """One SSE frame, after ``before``. ``data`` is single-line JSON, so it needs no splitting.

    ``event_id`` is the frame's ``id:`` (`codec.event_id`). It is joined once: ``data`` may be
    a whole snapshot, and each concatenation would copy it.
    """
    head = b"" if event_id is None else b"id: %s\n" % event_id
    return b"".join((before, head, b"event: ", event.encode(), b"\ndata: ", data, b"\n\n"))


def event_frame(event: Event, incarnation: str) -> bytes:
    return sse_frame("event", encode(event), event_id=event_id(incarnation, event.seq))


def live_event(event: Event, incarnation: str) -> tuple[bytes, StoredRecord]:
    """A durable event's ``event`` frame and its stored record, from one encoding of it."""
    line = encode(event)
    return sse_frame("event", line, event_id=event_id(incarnation, event.seq)), stored_record(event, line)


def records_frame(stored: Sequence[StoredRecord], from_seq: int, to_seq: int, incarnation: str) -> bytes:
    """The ``records`` frame of ``[from_seq, to_seq)``: its page records, packed as a page packs them (§5.5).

    Its ``id:`` is the last seq it covers, so a resume from it continues after the frame.
    """
    data = live_records(stored, from_seq, to_seq)
    return sse_frame("records", data, event_id=event_id(incarnation, to_seq - 1))


def seq_records(stored: Sequence[StoredRecord], from_seq: int, to_seq: int) -> list[StoredRecord]:
    """For each seq of ``[from_seq, to_seq)`` that ``stored`` covers, the stored record that holds it."""
    return [record for record in stored for _ in range(max(from_seq, record.seq), min(to_seq, record.end))]


def stored_frames(stored: Sequence[StoredRecord], from_seq: int, to_seq: int, incarnation: str) -> list[bytes]:
    """The event frames of ``[from_seq, to_seq)`` from the stored records that cover it.

    A stored event's line is its canonical JSON and goes into its frame as it is; a row's
    members get their lines from the codec without becoming events.
    """
    return [
        sse_frame("event", line, event_id=event_id(incarnation, seq + i))
        for seq, lines in event_lines(stored, from_seq, to_seq)
        for i, line in enumerate(lines)
    ]

"""Hand-built wire bytes of the service: page bodies and follow (SSE) frames."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from codec import Event, SessionHeader, encode, pack_page, parse_event_id

__all__ = ["event_frame", "id_seq", "page_body", "records_frame", "records_of", "snapshot_frame", "sse"]


def records_of(events: list[Event]) -> Any:
    """The packed page records of ``events`` as plain JSON values, ready to edit into a broken page."""
    return msgspec.json.decode(encode(pack_page(events)))


def page_body(
    events: Sequence[Event], *, from_seq: int | None = None, to_seq: int | None = None, records: Any = None
) -> bytes:
    first = events[0].seq if events else 0 if from_seq is None else from_seq
    from_seq = first if from_seq is None else from_seq
    to_seq = (events[-1].seq + 1 if events else from_seq) if to_seq is None else to_seq
    body = {
        "records": pack_page(events) if records is None else records,
        "hasMore": from_seq > 0,
        "fromSeq": from_seq,
        "toSeq": to_seq,
    }
    return encode(body)


def id_seq(text: str | bytes) -> int:
    """The seq of a follow frame's ``id:`` value, which must be ``<incarnation>:<seq>`` (docs/protocol.md §5.1)."""
    parsed = parse_event_id(text.decode() if isinstance(text, bytes) else text)
    assert parsed is not None and parsed[0] is not None, f"not an id of the service's: {text!r}"
    return parsed[1]


def sse(event: str, data: bytes, event_id: int | None = None) -> bytes:
    head = b"" if event_id is None else b"id: %d\n" % event_id
    return head + b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def event_frame(event: Event) -> bytes:
    return sse("event", encode(event), event.seq)


def records_frame(events: Sequence[Event], *, records: Any = None, event_id: int | None = None) -> bytes:
    """A packed stream's frame of ``events`` (docs/protocol.md §5.5), its id the last seq unless given."""
    from_seq, to_seq = events[0].seq, events[-1].seq + 1
    body = {"records": pack_page(events) if records is None else records, "fromSeq": from_seq, "toSeq": to_seq}
    return sse("records", encode(body), to_seq - 1 if event_id is None else event_id)


def snapshot_frame(events: Sequence[Event], cursor: int, *, session: str = "s") -> bytes:
    page = page_body(events, to_seq=cursor + 1)
    header = encode(SessionHeader(id=session, createdAt=0))
    data = b'{"header":%b,"cursor":%d,%b' % (header, cursor, page[1:])
    return sse("snapshot", data, cursor)

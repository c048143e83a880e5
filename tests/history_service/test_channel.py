"""The channel's bounded buffer: contiguous events, one stored record each, and the writes built from them."""

from __future__ import annotations

import msgspec
from hypothesis import given, strategies as st

from codec import Event, StoredRecord, encode, event_records, join, pack_page, runs, stored_record
from history_service.channel import Channel
from testing.events import plain
from testing.strategies import layouts, sessions, stored_in


def _records(first: int, count: int) -> list[StoredRecord]:
    return [stored_record(plain(seq)) for seq in range(first, first + count)]


def _seqs(frames: bytes) -> list[int]:
    return [int(line.rsplit(b":", 1)[1]) for line in frames.split(b"\n") if line.startswith(b"id: ")]


def test_channel_keeps_a_bounded_contiguous_buffer() -> None:
    channel = Channel(4)
    channel.incarnation = "i"
    channel.publish(10, _records(10, 3))
    assert (channel.first_seq, channel.next_seq) == (10, 13)
    assert _seqs(channel.frames(11, 13, packed=False)) == [11, 12]
    assert channel.holds(12) and not channel.holds(13) and not channel.holds(9)
    channel.publish(13, _records(13, 6))
    assert (
        channel.next_seq == 19
        and channel.first_seq == 15
        and _seqs(channel.frames(15, 19, packed=False))
        == [
            15,
            16,
            17,
            18,
        ]
    )
    channel.publish(40, _records(40, 1))
    assert (channel.first_seq, channel.next_seq) == (40, 41)
    assert channel.frames(40, 41, packed=False) == b"id: i:40\nevent: event\ndata: " + encode(plain(40)) + b"\n\n"


def test_a_channel_skips_what_it_holds_and_learns_the_head() -> None:
    channel = Channel(8)
    channel.incarnation = "i"
    channel.anchor(9)
    assert (channel.first_seq, channel.next_seq, channel.known_head) == (10, 10, 9)
    channel.publish(10, _records(10, 2))
    channel.publish(10, _records(10, 3))  # a store read that overlaps a local publish
    assert _seqs(channel.frames(10, 13, packed=False)) == [10, 11, 12] and channel.known_head == 12
    channel.publish(8, _records(8, 2))  # entirely old: nothing changes
    assert channel.next_seq == 13


def _data(frame: bytes) -> dict[str, object]:
    lines = frame.decode().split("\n")
    assert lines[1] == "event: records" and lines[2].startswith("data: ")
    value: dict[str, object] = msgspec.json.decode(lines[2][len("data: ") :])
    value["id"] = lines[0]
    return value


@given(events=sessions(), data=st.data())
def test_a_packed_write_from_any_point_is_the_page_of_what_follows(events: list[Event], data: st.DataObject) -> None:
    """Whether the events were published an append at a time, or read back from the store in rows a store compacted
    between reads (so a later read's row starts before what the buffer holds)."""
    if not events:
        return
    live = Channel(10_000)
    sizes = data.draw(layouts(len(events)))
    at = 0
    for size in sizes:
        live.publish(at, [stored_record(event) for event in events[at : at + size]])
        at += size
    read = Channel(10_000)
    stored = stored_in(events, sizes)
    sealed = [record for run in runs(stored) for record in join(run)]
    cut = data.draw(st.integers(0, len(events)))
    read.publish(0, event_records(stored, 0, cut))
    read.publish(cut, event_records(sealed, cut, len(events)))
    start = data.draw(st.integers(0, len(events) - 1))
    end = data.draw(st.integers(start + 1, len(events)))
    expected = msgspec.json.decode(encode(pack_page(events[start:end])))
    for channel in (live, read):
        channel.incarnation = "inc"
        frame = channel.frames(start, end, packed=True)
        assert channel.frames(start, end, packed=True) is frame  # followers in step share it
        assert _data(frame) == {"records": expected, "fromSeq": start, "toSeq": end, "id": f"id: inc:{end - 1}"}
        assert channel.frames(start, end, packed=False) == b"".join(
            b"id: inc:%d\nevent: event\ndata: %b\n\n" % (event.seq, encode(event)) for event in events[start:end]
        )

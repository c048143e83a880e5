"""The channel's bounded buffer: contiguous frames, the stored record of each, and packed frames spliced from them."""

from __future__ import annotations

import msgspec
from hypothesis import given, strategies as st

from codec import Event, StoredRecord, encode, pack_page, stored_batch
from history_service.channel import Channel
from history_service.follow_frames import live_event, seq_records
from testing.strategies import layouts, sessions


def _records(first: int, count: int) -> list[StoredRecord]:
    return [StoredRecord(seq, 1, b"{}") for seq in range(first, first + count)]


def test_channel_keeps_a_bounded_contiguous_buffer() -> None:
    channel = Channel(4)
    channel.publish(10, [b"a", b"b", b"c"], _records(10, 3))
    assert (channel.first_seq, channel.next_seq) == (10, 13)
    assert channel.frames_from(11) == b"bc" and channel.frames_from(13) == b"" and channel.frames_from(9) is None
    channel.publish(13, [b"d"] * 6, _records(13, 6))
    assert channel.next_seq == 19 and channel.first_seq == 15 and channel.frames_from(15) == b"dddd"
    assert len(channel._records) == 4
    channel.publish(40, [b"z"], _records(40, 1))
    assert (channel.first_seq, channel.next_seq) == (40, 41) and channel._records == _records(40, 1)


def test_a_channel_skips_what_it_holds_and_learns_the_head() -> None:
    channel = Channel(8)
    channel.anchor(9)
    assert (channel.first_seq, channel.next_seq, channel.known_head) == (10, 10, 9)
    channel.publish(10, [b"a", b"b"], _records(10, 2))
    channel.publish(10, [b"a", b"b", b"c"], _records(10, 3))  # a store read that overlaps a local publish
    assert channel.frames_from(10) == b"abc" and channel.known_head == 12 and channel._records == _records(10, 3)
    channel.publish(8, [b"x", b"y"], _records(8, 2))  # entirely old: nothing changes
    assert channel.frames_from(10) == b"abc"


def _data(frame: bytes) -> dict[str, object]:
    lines = frame.decode().split("\n")
    assert lines[1] == "event: records" and lines[2].startswith("data: ")
    value: dict[str, object] = msgspec.json.decode(lines[2][len("data: ") :])
    value["id"] = lines[0]
    return value


@given(events=sessions(), data=st.data())
def test_a_packed_frame_from_any_point_is_the_page_of_what_follows(events: list[Event], data: st.DataObject) -> None:
    """Whether the events were published one append at a time or read back from the store as rows."""
    if not events:
        return
    sizes = data.draw(layouts(len(events)))
    live = Channel(10_000)
    live.incarnation = "inc"
    at = 0
    for size in sizes:
        made = [live_event(event, "inc") for event in events[at : at + size]]
        live.publish(at, [frame for frame, _ in made], [record for _, record in made])
        at += size
    stored = Channel(10_000)
    stored.incarnation = "inc"
    rows = stored_batch(events)
    stored.publish(0, [b"f"] * len(events), seq_records(rows, 0, len(events)))
    start = data.draw(st.integers(0, len(events) - 1))
    expected = msgspec.json.decode(encode(pack_page(events[start:])))
    for channel in (live, stored):
        frame = channel.packed_from(start)
        assert channel.packed_from(start) is frame  # followers in step share it
        assert _data(frame) == {
            "records": expected,
            "fromSeq": start,
            "toSeq": len(events),
            "id": f"id: inc:{len(events) - 1}",
        }

"""Stored records: join columns, runs and storage lines (docs/protocol.md §7.4)."""

from __future__ import annotations

import pytest

from codec import (
    CodecError,
    RecordFormatError,
    decode_storage_line,
    pack,
    stored_batch,
    stored_record,
)
from codec.chunk_rows import block_of, continues_run, delta_member
from codec.stored import OTHER
from testing.events import plain, reasoning, text, tool


def test_columns_name_the_block_and_the_member_times() -> None:
    row, single, other = (
        stored_batch([text(0, 10, "a"), text(1, 13, "b"), text(2, 12, "c")])[0],
        *stored_batch([reasoning(5, 7, "r"), plain(6)]),
    )
    assert (row.seq, row.members, row.kind, row.time0, row.time1) == (0, 3, 1, 10, 12)
    assert row.key == b'{"turn":1,"step":1,"index":1}' and row.is_row
    assert (single.kind, single.key, single.time0, single.time1) == (6, b'{"turn":1,"step":1,"index":0}', 7, 7)
    assert not single.is_row and single.block == (2, single.key)
    assert other.kind == OTHER and other.key == b""


def test_a_tool_block_key_carries_the_id_and_the_presence_of_the_name() -> None:
    named, unnamed = stored_record(tool(0, 1, "{", name="bash")), stored_record(tool(0, 1, "{"))
    assert named.key == b'{"turn":1,"step":1,"index":2,"id":"c1","name":"bash"}'
    assert unnamed.key == b'{"turn":1,"step":1,"index":2,"id":"c1"}'


def test_spellings_that_json_tells_apart_are_different_blocks() -> None:
    # 1 and 1.0, or 0.0 and -0.0, are one number to Python but two spellings in a row.
    for a, b in ((1, 1.0), (0.0, -0.0)):
        first, second = (delta_member(text(0, 0, "x", turn=turn)) for turn in (a, b))
        assert first is not None and second is not None
        assert not continues_run(block_of(first), 0, 0, block_of(second), 1, 0)
        assert len(pack([text(0, 0, "x", turn=a), text(1, 0, "y", turn=b), text(2, 0, "z", turn=b)])) == 3


@pytest.mark.parametrize("line", [b"", b"not json", b"[1,2]", b'"text"', b'{"type":"x"', b"\xff\xfe"])
def test_storage_line_rejects_non_objects(line):
    with pytest.raises(CodecError):
        decode_storage_line(line)


def test_storage_line_refuses_a_header():
    with pytest.raises(RecordFormatError, match="session header"):
        decode_storage_line(b'{"type":"session","version":0,"id":"s","createdAt":0}')

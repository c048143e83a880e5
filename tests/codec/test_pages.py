"""The page wire format: records, bodies, snapshots and coverage checks, decoded strictly."""

from __future__ import annotations

import pytest

from codec import (
    CodecError,
    Event,
    Page,
    PageRecord,
    RecordFormatError,
    RowFormatError,
    TextChunks,
    check_page,
    decode_follow_snapshot,
    decode_page,
    decode_page_record,
    decode_page_shell,
    decode_record_range,
    encode,
    expand_records,
    iter_page_events,
    pack,
    pack_page,
    record_seq_range,
)
from codec.pages import page_record
from testing.events import plain, reasoning, text


def session() -> list[Event]:
    return [plain(0), text(1, 10, "a"), text(2, 11, "b"), text(3, 12, "c"), plain(4, "step/end"), reasoning(5, 1, "r")]


def test_pack_page_wraps_each_record_in_exactly_one_key():
    records = pack_page(session())
    body = encode(records)
    assert body.startswith(b'[{"event":{"type":"turn/start"')
    assert b'{"chunks":{"type":"text-chunks","seq0":1,' in body
    assert [record_seq_range(r) for r in records] == [(0, 0), (1, 3), (4, 4), (5, 5)]


def test_page_body_round_trips_and_expands_exactly():
    events = session()
    page = Page(pack_page(events), False, 0, 6)
    body = encode(page)
    assert body.endswith(b'],"hasMore":false,"fromSeq":0,"toSeq":6}')
    decoded = check_page(decode_page(body))
    assert decoded == page
    assert list(iter_page_events(decoded.records)) == events


def test_page_record_is_the_inverse_of_the_union():
    for record in pack(session()):
        wrapped = page_record(record)
        assert (wrapped.event if isinstance(record, type(plain(0))) else wrapped.chunks) == record


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        (
            b'{"records":[{}],"hasMore":false,"fromSeq":0,"toSeq":0}',
            RecordFormatError,
            r"records\[0\]: expected exactly one",
        ),
        (
            b'{"records":[{"event":{"type":"x","seq":0,"time":0,"data":1},"chunks":{"type":"text-chunks","seq0":1,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}}],"hasMore":false,"fromSeq":0,"toSeq":2}',
            RecordFormatError,
            r"records\[0\]: expected exactly one",
        ),
        (b'{"records":[{"evnt":{}}],"hasMore":false,"fromSeq":0,"toSeq":0}', RecordFormatError, "unknown field `evnt`"),
        (
            b'{"records":[{"chunks":{"type":"text-chunks","seq0":1,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a"]}}}],"hasMore":true,"fromSeq":1,"toSeq":2}',
            RowFormatError,
            r"records\[0\]\.chunks: malformed text-chunks row: dt has 1 entries",
        ),
        (
            b'{"records":[{"chunks":{"type":"text-chunks","seq0":1,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}}}],"hasMore":true,"fromSeq":1,"toSeq":2}',
            RowFormatError,
            r"records\[0\]\.chunks: malformed text-chunks row: row\.data\.texts",
        ),
        (
            b'{"records":[{"event":{"type":"x","seq":0,"time":0,"data":1,"surfaceOp":1}}],"hasMore":false,"fromSeq":0,"toSeq":1}',
            CodecError,
            r"records\[0\]\.event\.surfaceOp: expected",
        ),
        (b'{"records":[],"hasMore":false,"fromSeq":0,"toSeq":0,"x":1}', RecordFormatError, "unknown field `x`"),
        (b'{"records":[],"hasMore":false,"fromSeq":-1,"toSeq":0}', RecordFormatError, r"page\.fromSeq"),
        (b"[]", RecordFormatError, "expected `object`"),
    ],
    ids=[
        "empty-record",
        "both-keys",
        "unknown-key",
        "dt-arity",
        "empty-members",
        "bad-event",
        "extra-body-key",
        "negative-from",
        "not-object",
    ],
)
def test_decode_page_rejects_malformed_bodies(body, error, message):
    with pytest.raises(error, match=message):
        decode_page(body)


def test_decode_page_checks_rows_with_large_clock_jumps_exactly():
    good = [text(0, 0, "a"), text(1, 2**40, "b"), text(2, 2**40 + 2**35, "c")]
    body = encode(Page(pack_page(good), False, 0, 3))
    assert b'"dt":[1099511627776,34359738368]' in body
    assert expand_records([r.chunks for r in decode_page(body).records]) == good  # type: ignore[misc]
    bad = body.replace(b"[1099511627776,", b"[9007199254740991,")
    with pytest.raises(RowFormatError, match="running time of member 2"):
        decode_page(bad)


def test_check_page_accepts_an_empty_page():
    assert check_page(Page([], False, 0, 0)).records == []
    assert check_page(Page([], True, 7, 7)).toSeq == 7


@pytest.mark.parametrize(
    ("page", "message"),
    [
        (Page(pack_page(session()[1:]), True, 0, 6), "hasMore is True but fromSeq is 0"),
        (Page(pack_page(session()[1:]), True, 2, 6), r"records\[0\] starts at seq 1, expected 2"),
        (Page(pack_page(session()), False, 0, 7), "records end before seq 6, but the page ends at toSeq 7"),
        (Page(pack_page(session()), False, 0, 5), "records end before seq 6, but the page ends at toSeq 5"),
        (Page([PageRecord(event=plain(0)), PageRecord(event=plain(2))], False, 0, 3), r"records\[1\] starts at seq 2"),
        (Page([PageRecord(event=plain(0)), PageRecord(event=plain(0))], False, 0, 1), r"records\[1\] starts at seq 0"),
        (Page([], True, 5, 4), "page range is inverted"),
    ],
    ids=["has-more-wrong", "starts-late", "ends-short", "ends-past", "gap", "overlap", "inverted"],
)
def test_check_page_rejects_broken_cover(page, message):
    with pytest.raises(RecordFormatError, match=message):
        check_page(page)


def test_rows_in_pages_are_not_length_capped():
    events = [text(k, k, "x") for k in range(3000)]
    (record,) = pack_page(events)
    assert type(record.chunks) is TextChunks


def test_check_cover_refuses_an_inverted_record_range():
    from codec import check_cover

    with pytest.raises(RecordFormatError, match=r"records\[0\] has an inverted cursor range"):
        check_cover([(5, 4)], from_seq=5, to_seq=5, has_more=True)


def _page_bytes() -> bytes:
    events = [plain(0), *(text(seq, 1000 + seq, f"t{seq}") for seq in range(1, 9)), plain(9)]
    return encode({"records": pack_page(events), "hasMore": False, "fromSeq": 0, "toSeq": 10})


def test_record_at_a_time_decoding_matches_whole_page_decoding():
    body = _page_bytes()
    shell = decode_page_shell(body)
    page = decode_page(body)
    assert (shell.fromSeq, shell.toSeq, shell.hasMore) == (page.fromSeq, page.toSeq, page.hasMore)
    assert [decode_page_record(raw, index=i) for i, raw in enumerate(shell.records)] == page.records
    assert [decode_record_range(raw) for raw in shell.records] == [(0, 0), (1, 8), (9, 9)]


def test_a_single_record_error_names_its_index_and_field():
    row = bytes(decode_page_shell(_page_bytes()).records[1]).replace(b'"seq0":1', b'"seq0":"1"')
    with pytest.raises(RowFormatError, match=r"records\[4\]\.chunks: malformed text-chunks row: row\.seq0"):
        decode_page_record(row, index=4)
    with pytest.raises(RecordFormatError, match=r"records\[2\]: expected exactly one"):
        decode_record_range(b'{"event":{"seq":1},"chunks":{"seq0":1,"data":{"dt":[]}}}', index=2)


def test_follow_snapshot_keeps_header_cursor_and_raw_records():
    body = _page_bytes()
    snapshot = decode_follow_snapshot(b'{"header":{"type":"session","id":"s","createdAt":0},"cursor":9,' + body[1:])
    assert (snapshot.header.id, snapshot.cursor, len(snapshot.records), snapshot.toSeq) == ("s", 9, 3, 10)
    with pytest.raises(RecordFormatError, match="snapshot"):
        decode_follow_snapshot(b'{"header":{"id":"s","createdAt":0},"cursor":-2,' + body[1:])

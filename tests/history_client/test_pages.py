"""Page validation and lazy decoding: a page either tiles its interval exactly or raises before any event."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, strategies as st

from codec import Event, PageShell, encode, expand_records
from history_client import HistoryPage, LazyPage, PageContinuityError, ProtocolError, iter_body_events, read_page
from history_client.pages import check_ranges, expected_to_seq, open_lazy_page
from testing.events import make_events
from testing.strategies import batches
from testing.wire import page_body, records_of

LOG = make_events(120)


def test_read_page_keeps_records_and_expands_exactly():
    page = read_page(page_body(LOG[40:120]), through=119)
    assert isinstance(page, HistoryPage)
    assert (page.from_seq, page.to_seq, page.has_more, len(page)) == (40, 120, True, 80)
    assert any(record.chunks is not msgspec.UNSET for record in page.records)
    assert list(page.events()) == LOG[40:120]


@given(batches())
def test_lazy_decoding_gives_the_same_events_as_full_decoding(events):
    events = [msgspec.structs.replace(event, seq=seq) for seq, event in enumerate(events)]  # a page is dense
    body = page_body(events)
    assert list(iter_body_events(body)) == list(read_page(body).events()) == events


@pytest.mark.parametrize("after", [-1, 39, 40, 41, 55, 78, 119, 200])
def test_lazy_events_after_a_seq_cut_inside_rows(after):
    page = open_lazy_page(page_body(LOG[40:120]))
    assert list(page.events(after=after)) == [event for event in LOG[40:120] if event.seq > after]


def test_expected_to_seq_follows_through_and_before():
    assert expected_to_seq(through=None, before=9) is None
    assert expected_to_seq(through=9, before=None) == 10
    assert expected_to_seq(through=9, before=5) == 5


BAD_PAGES = [
    (dict(through=100), "did not end at its requested cursor"),
    (dict(to_seq=130, through=None), "did not end at its cursor"),
    (dict(records=records_of(LOG[40:60]) + records_of(LOG[59:120])), "overlaps the previous record"),
    (dict(records=records_of(LOG[40:60]) + records_of(LOG[61:120])), "leaves a gap"),
    (dict(from_seq=121, to_seq=120, records=[]), "inverted page range"),
    (dict(from_seq=120, to_seq=120, records=[]), "empty but ends after seq 0"),
    (dict(from_seq=0, records=records_of(LOG[0:120])[:0]), "discontinuous|did not end"),
]


@pytest.mark.parametrize(
    ("change", "message"), BAD_PAGES, ids=[m.split()[0] + str(i) for i, (_, m) in enumerate(BAD_PAGES)]
)
@pytest.mark.parametrize("reader", ["full", "lazy"])
def test_a_broken_cover_raises_before_any_event(change, message, reader):
    change = dict(change)
    through = change.pop("through", 119)
    body = page_body(LOG[40:120], **change)
    received: list[Event] = []
    with pytest.raises(PageContinuityError, match=message):
        if reader == "full":
            received += read_page(body, through=through).events()
        else:
            received += iter_body_events(body, through=through)
    assert received == []


def test_an_inverted_record_range_is_refused():
    with pytest.raises(PageContinuityError, match="inverted cursor range"):
        check_ranges([(5, 4)], from_seq=5, to_seq=6, has_more=True)


def test_has_more_must_match_from_seq():
    body = encode({"records": [], "hasMore": True, "fromSeq": 0, "toSeq": 0})
    with pytest.raises(PageContinuityError, match="hasMore"):
        read_page(body)


def test_a_page_past_before_is_refused():
    with pytest.raises(PageContinuityError, match="past before"):
        read_page(page_body(LOG[40:120]), before=100)


def malformed_row_body() -> tuple[bytes, Any]:
    records = records_of(LOG[0:40])
    row = next(record for record in records if "chunks" in record)
    row["chunks"]["data"]["dt"] = row["chunks"]["data"]["dt"][:-1] + [0, 0]  # one dt too many
    return encode({"records": records, "hasMore": False, "fromSeq": 0, "toSeq": 40}), row


def test_a_malformed_row_is_a_protocol_error():
    body, _ = malformed_row_body()
    with pytest.raises(ProtocolError, match="dt has"):
        read_page(body)


def test_a_lazy_page_stops_at_a_row_whose_members_disagree_with_its_range():
    records = records_of(LOG[0:40])
    index = next(i for i, record in enumerate(records) if "chunks" in record)
    row = records[index]["chunks"]
    del row["data"]["texts"][-1]  # dt still claims the old length, so the cover check passes
    body = encode({"records": records, "hasMore": False, "fromSeq": 0, "toSeq": 40})
    received: list[Event] = []
    with pytest.raises(ProtocolError, match="dt has"):
        received += iter_body_events(body)
    assert received == expand_records([]) + LOG[: row["seq0"]]


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"records":[],"hasMore":false}', b'{"records":[{}],"hasMore":false,"fromSeq":0,"toSeq":1}'],
    ids=["not-json", "missing-fields", "empty-record"],
)
@pytest.mark.parametrize("reader", [read_page, open_lazy_page], ids=["full", "lazy"])
def test_malformed_bodies_are_protocol_errors(body, reader):
    with pytest.raises(ProtocolError):
        reader(body)


def test_lazy_page_len_and_repr():
    page = LazyPage.open(msgspec.json.decode(page_body(LOG[0:40]), type=PageShell))
    assert len(page) == 40 and "from_seq=0" in repr(page)


@given(st.integers(min_value=0, max_value=119))
def test_every_prefix_page_validates_at_its_cursor(through):
    page = read_page(page_body(LOG[: through + 1]), through=through)
    assert list(page.events()) == LOG[: through + 1]

"""The follow plan through both clients and a scripted service: exactly once, in order, or a typed error."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

import codec
from codec import Event, SessionHeader, encode, pack_page, record_seq_range
from history_client import (
    AsyncHistoryClient,
    Backoff,
    CursorAheadError,
    HistoryClient,
    ProtocolError,
    Reconnected,
    ResumeBehindError,
    Retrying,
    ServiceError,
    SessionDeletedError,
    StreamOverlapError,
    TransportError,
)
from testing.events import make_events
from testing.mock_service import Broken, Service, Silent, collect
from testing.wire import event_frame, page_body, records_frame, snapshot_frame, sse

LOG = make_events(200)
RETRY = b"retry: 1000\n\n"


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def live(start: int, stop: int) -> bytes:
    return b"".join(event_frame(event) for event in LOG[start:stop])


def unavailable() -> httpx.Response:
    return httpx.Response(503, json={"error": {"code": "unavailable", "message": "draining"}})


def summary(change: Retrying | Reconnected) -> tuple[Any, ...]:
    if isinstance(change, Reconnected):
        return ("reconnected", change.failures)
    return ("lost" if change.opened else "failed", change.attempt, change.reason)


def test_fresh_open_delivers_the_snapshot_then_live_events(mode):
    service = Service(LOG, [RETRY + snapshot_frame(LOG[40:100], 99) + live(100, 120)])
    assert collect(service, mode=mode, limit=80) == LOG[40:120]
    assert "last-event-id" not in service.follows[0].headers


def test_a_dropped_stream_resumes_with_last_event_id_and_loses_nothing(mode):
    streams = [Broken(snapshot_frame(LOG[0:50], 49), live(50, 60)), Broken(live(60, 75)), live(75, 90)]
    service = Service(LOG, streams)
    assert collect(service, mode=mode, limit=90) == LOG[:90]
    assert [request.headers.get("last-event-id") for request in service.follows] == [None, "59", "74"]


def test_a_stream_split_at_every_byte_still_decodes_exactly(mode):
    body = snapshot_frame(LOG[0:30], 29) + live(30, 40)
    service = Service(LOG, [Broken(*(body[i : i + 1] for i in range(len(body))))])
    assert collect(service, mode=mode, limit=40) == LOG[:40]


def test_complete_duplicates_are_dropped(mode):
    body = snapshot_frame(LOG[0:20], 19) + live(15, 20) + live(20, 25) + live(22, 25) + live(25, 30)
    assert collect(Service(LOG, [body]), mode=mode, limit=30) == LOG[:30]


def test_a_live_row_that_partly_overlaps_delivered_events_fails(mode):
    row = pack_page(LOG[1:24])[-1]
    first, last = record_seq_range(row)
    assert first < 20 < last
    body = snapshot_frame(LOG[0:20], 19) + sse("event", encode(row), 23) + live(24, 30)
    received = []
    with pytest.raises(StreamOverlapError, match="partially overlapping"):
        received += collect(Service(LOG, [body]), mode=mode, limit=100)
    assert received == []


def test_a_live_row_that_continues_the_cursor_is_expanded_exactly(mode):
    row = pack_page(LOG[20:24])[0]
    body = snapshot_frame(LOG[0:20], 19) + sse("event", encode(row), 23) + live(24, 30)
    assert collect(Service(LOG, [body]), mode=mode, limit=30) == LOG[:30]


def test_a_resume_behind_the_delivered_cursor_fails(mode):
    streams = [Broken(snapshot_frame(LOG[0:50], 49), live(50, 60)), snapshot_frame(LOG[0:55], 54)]
    with pytest.raises(ResumeBehindError, match="behind the last applied entry"):
        collect(Service(LOG, streams), mode=mode, limit=1000)


def test_a_resumed_snapshot_ahead_of_the_cursor_delivers_only_the_new_suffix(mode):
    streams = [Broken(snapshot_frame(LOG[0:50], 49)), snapshot_frame(LOG[40:70], 69) + live(70, 75)]
    assert collect(Service(LOG, streams), mode=mode, limit=75) == LOG[:75]


def test_a_gap_in_live_events_is_repaired_from_pages(mode):
    body = snapshot_frame(LOG[0:20], 19) + live(20, 25) + live(61, 70)
    service = Service(LOG, [body])
    assert collect(service, mode=mode, limit=70) == LOG[:70]
    # Repair pages hold 10 events each here, so the client joined several, through 60.
    assert [request.url.params["through"] for request in service.pages] == ["60", "50", "40", "30"]


def test_a_gap_between_a_resumed_snapshot_and_the_cursor_is_repaired(mode):
    streams = [Broken(snapshot_frame(LOG[0:20], 19)), snapshot_frame(LOG[45:60], 59)]
    assert collect(Service(LOG, streams), mode=mode, limit=60) == LOG[:60]


def test_starting_after_a_seq_gets_exactly_the_suffix(mode):
    service = Service(LOG, [live(120, 150)])
    assert collect(service, mode=mode, limit=30, after=119) == LOG[120:150]
    assert service.follows[0].headers["last-event-id"] == "119"


def test_cursor_ahead_is_a_typed_error(mode):
    body = RETRY + sse("error", b'{"code":"cursor_ahead","headSeq":10}')
    with pytest.raises(CursorAheadError) as caught:
        collect(Service(LOG, [body]), mode=mode, limit=5, after=50)
    assert (caught.value.after, caught.value.head_seq) == (50, 10)


def test_a_failure_frame_after_the_opening_is_resumed_like_a_cut(mode):
    failed = RETRY + snapshot_frame(LOG[0:50], 49) + live(50, 60) + sse("error", b'{"code":"store_unavailable"}')
    service = Service(LOG, [failed, live(60, 80)])
    assert collect(service, mode=mode, limit=80) == LOG[:80]
    assert [request.headers.get("last-event-id") for request in service.follows] == [None, "59"]


def test_a_client_error_status_is_raised_at_once(mode):
    not_found = httpx.Response(404, json={"error": {"code": "session_not_found", "message": "no session 's'"}})
    service = Service(LOG, [not_found])
    with pytest.raises(ServiceError) as caught:
        collect(service, mode=mode, limit=5)
    assert (caught.value.status_code, caught.value.code) == (404, "session_not_found")
    assert len(service.follows) == 1


def test_unavailable_is_retried_and_then_gives_up_with_a_transport_error(mode):
    service = Service(LOG, [unavailable(), snapshot_frame(LOG[0:10], 9) + live(10, 12)])
    assert collect(service, mode=mode, limit=12) == LOG[:12]
    with pytest.raises(TransportError, match="gave up after attempt 4 failed"):
        collect(Service(LOG, []), mode=mode, limit=5)


def test_each_retried_failure_is_reported_with_its_attempt_and_delay_then_the_reconnect(mode):
    service = Service(LOG, [unavailable(), unavailable(), snapshot_frame(LOG[0:10], 9) + live(10, 12)])
    changes: list[Retrying | Reconnected] = []
    backoff = Backoff(base=0.001, cap=0.0015, rand=lambda: 1.0)
    assert collect(service, mode=mode, limit=12, backoff=backoff, on_connection=changes.append) == LOG[:12]
    assert [summary(change) for change in changes] == [
        ("failed", 1, "503 unavailable: draining"),
        ("failed", 2, "503 unavailable: draining"),
        ("reconnected", 2),
    ]
    assert [change.delay for change in changes if isinstance(change, Retrying)] == [0.001, 0.0015]


def test_attempts_count_the_failures_since_the_last_delivery_and_say_whether_the_stream_had_opened(mode):
    streams = [snapshot_frame(LOG[0:20], 19), unavailable(), Broken(live(20, 30)), live(30, 40)]
    changes: list[Retrying | Reconnected] = []
    assert collect(Service(LOG, streams), mode=mode, limit=40, on_connection=changes.append) == LOG[:40]
    assert [summary(change) for change in changes] == [
        ("lost", 1, "the stream ended"),
        ("failed", 2, "503 unavailable: draining"),
        ("reconnected", 2),
        ("lost", 1, "ReadError: connection reset by peer"),
        ("reconnected", 1),
    ]


def test_the_failure_that_exhausts_the_retries_is_raised_not_reported(mode):
    changes: list[Retrying | Reconnected] = []
    with pytest.raises(TransportError, match="gave up after attempt 4 failed: 503 gone: no more streams"):
        collect(Service(LOG, []), mode=mode, limit=5, on_connection=changes.append)
    assert [summary(change) for change in changes] == [("failed", n, "503 gone: no more streams") for n in (1, 2, 3)]


def test_a_malformed_row_in_the_snapshot_is_a_protocol_error_before_any_event(mode):
    records = [{"event": encode_value(LOG[0])}, {"chunks": {"type": "text-chunks", "seq0": 1, "time0": 0}}]
    data = b'{"header":{"id":"s","createdAt":0},"cursor":1,"records":%b,"hasMore":false,"fromSeq":0,"toSeq":2}'
    body = sse("snapshot", data % encode(records), 1)
    received = []
    with pytest.raises(ProtocolError):
        received += collect(Service(LOG, [body]), mode=mode, limit=5)
    assert received == []


def test_an_event_before_the_snapshot_is_a_protocol_error(mode):
    with pytest.raises(ProtocolError, match="before its snapshot"):
        collect(Service(LOG, [live(0, 3)]), mode=mode, limit=5)


def test_a_non_event_stream_answer_is_a_protocol_error(mode):
    html = httpx.Response(200, headers={"content-type": "text/html"}, content=b"<html>")
    with pytest.raises(ProtocolError, match="text/html"):
        collect(Service(LOG, [html]), mode=mode, limit=5)


def test_backoff_grows_to_its_cap_with_jitter_in_the_upper_half():
    backoff = Backoff(base=0.1, cap=1.0, rand=lambda: 1.0)
    assert [backoff.delay(n, None) for n in (1, 2, 3, 4, 5, 6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert Backoff(base=0.1, rand=lambda: 0.0).delay(1, None) == 0.05
    assert Backoff(rand=lambda: 1.0).delay(1, 250) == 0.25
    assert Backoff(rand=lambda: 1.0).delay(1, None) == 1.0


def encode_value(event: Event) -> Any:
    import msgspec

    return msgspec.json.decode(encode(event))


INC = "5d0c1e9a7b22"
NEXT = "77aa00bb11cc"  # the incarnation of the same id created again


class Incarnated(Service):
    """The scripted service of one incarnation: pages name it, and a page that names another gets 404."""

    def __init__(self, log: Any, streams: Any = (), incarnation: str = INC) -> None:
        super().__init__(log, streams, incarnation=incarnation)
        self.named = incarnation

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/follow"):
            return super().__call__(request)
        named = request.url.params.get("incarnation")
        if named is not None and named != self.named:
            self.pages.append(request)
            return session_not_found()
        response = super().__call__(request)
        response.headers["Session-Incarnation"] = self.named
        return response


def session_not_found() -> httpx.Response:
    return httpx.Response(404, json={"error": {"code": "session_not_found", "message": "no session 's'"}})


def framed(event: str, data: bytes, event_id: bytes | None) -> bytes:
    head = b"" if event_id is None else b"id: %b\n" % event_id
    return head + b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def inc_live(start: int, stop: int, incarnation: str = INC) -> bytes:
    return b"".join(framed("event", encode(event), codec.event_id(incarnation, event.seq)) for event in LOG[start:stop])


def inc_snapshot(events: list[Event], cursor: int, *, header: str | None = INC, frame_id: str = INC) -> bytes:
    """A snapshot frame whose header names ``header`` (none when ``None``) and whose id names ``frame_id``."""
    page = page_body(events, to_seq=cursor + 1)
    session = (
        SessionHeader(id="s", createdAt=0) if header is None else SessionHeader(id="s", createdAt=0, incarnation=header)
    )
    data = b'{"header":%b,"cursor":%d,%b' % (encode(session), cursor, page[1:])
    return framed("snapshot", data, codec.event_id(frame_id, cursor))


def follow_into(received: list[Event], service: Service, *, mode: str, limit: int, **follow: Any) -> list[Event]:
    """`collect`, with ``follow``'s own options, into ``received``: what arrived before an error stays there."""
    service.asynchronous = mode == "async"
    backoff = Backoff(base=0.001, cap=0.002, max_retries=3)
    if mode == "sync":
        with HistoryClient("http://test", transport=httpx.MockTransport(service), backoff=backoff) as client:
            for event in client.follow("s", **follow):
                received.append(event)
                if len(received) == limit:
                    break
        return received

    async def run() -> None:
        async with AsyncHistoryClient("http://test", transport=httpx.MockTransport(service), backoff=backoff) as client:
            async for event in client.follow("s", **follow):
                received.append(event)
                if len(received) == limit:
                    break

    anyio.run(run)
    return received


def resumes(service: Service) -> list[str | None]:
    return [request.headers.get("last-event-id") for request in service.follows]


def test_a_resume_names_the_snapshots_incarnation_and_the_cursor(mode):
    streams = [
        Broken(RETRY + inc_snapshot(LOG[0:50], 49), inc_live(50, 60)),
        Broken(inc_live(60, 75)),
        inc_live(75, 90),
    ]
    service = Incarnated(LOG, streams)
    assert collect(service, mode=mode, limit=90) == LOG[:90]
    assert resumes(service) == [None, f"{INC}:59", f"{INC}:74"]
    assert "incarnation" not in service.follows[0].url.params


def test_a_resume_after_a_seq_learns_the_incarnation_from_the_first_id(mode):
    service = Incarnated(LOG, [Broken(inc_live(120, 130)), inc_live(130, 150)])
    assert collect(service, mode=mode, limit=30, after=119) == LOG[120:150]
    assert resumes(service) == ["119", f"{INC}:129"]


def test_a_follow_given_an_incarnation_names_it_from_its_first_request(mode):
    fresh = Incarnated(LOG, [inc_snapshot(LOG[0:20], 19) + inc_live(20, 25)])
    assert follow_into([], fresh, mode=mode, limit=25, incarnation=INC) == LOG[:25]
    assert fresh.follows[0].url.params["incarnation"] == INC and resumes(fresh) == [None]
    resumed = Incarnated(LOG, [inc_live(120, 125)])
    assert follow_into([], resumed, mode=mode, limit=5, after=119, incarnation=INC) == LOG[120:125]
    assert resumes(resumed) == [f"{INC}:119"]


def test_the_session_deleted_frame_ends_the_follow_without_reconnecting(mode):
    deleted = RETRY + inc_snapshot(LOG[0:20], 19) + inc_live(20, 30) + sse("error", b'{"code":"session_deleted"}')
    service = Incarnated(LOG, [deleted, inc_live(30, 40)])
    changes: list[Retrying | Reconnected] = []
    received: list[Event] = []
    with pytest.raises(SessionDeletedError, match=f"incarnation {INC}") as caught:
        follow_into(received, service, mode=mode, limit=40, on_connection=changes.append)
    assert caught.value.incarnation == INC and received == LOG[:30]
    assert len(service.follows) == 1 and changes == []


def test_a_session_deleted_frame_before_any_id_is_still_the_end(mode):
    service = Incarnated(LOG, [RETRY + sse("error", b'{"code":"session_deleted"}'), inc_live(120, 130)])
    with pytest.raises(SessionDeletedError) as caught:
        collect(service, mode=mode, limit=5, after=119)
    assert caught.value.incarnation is None and len(service.follows) == 1


def test_a_reconnect_that_finds_the_incarnation_gone_raises_session_deleted(mode):
    streams = [Broken(inc_snapshot(LOG[0:50], 49), inc_live(50, 60)), session_not_found(), inc_live(60, 70)]
    service = Incarnated(LOG, streams)
    received: list[Event] = []
    with pytest.raises(SessionDeletedError) as caught:
        follow_into(received, service, mode=mode, limit=70)
    assert caught.value.incarnation == INC and received == LOG[:60]
    assert isinstance(caught.value.__cause__, ServiceError) and caught.value.__cause__.status_code == 404
    assert resumes(service) == [None, f"{INC}:59"]


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (inc_snapshot(LOG[0:20], 19) + inc_live(20, 25, NEXT), f"names incarnation {NEXT}, but the read is of {INC}"),
        (inc_snapshot(LOG[0:20], 19, frame_id=NEXT), f"names incarnation {NEXT}, but the read is of {INC}"),
        (inc_snapshot(LOG[0:20], 19) + live(20, 25), "names no incarnation"),
        (inc_snapshot(LOG[0:20], 19) + framed("event", encode(LOG[20]), b"x:y"), "malformed id"),
    ],
    ids=["live-frame", "snapshot-id", "bare-id", "malformed-id"],
)
def test_a_frame_of_another_incarnation_is_a_protocol_error(mode, stream, message):
    service = Incarnated(LOG, [stream])
    with pytest.raises(ProtocolError, match=message):
        collect(service, mode=mode, limit=25)
    assert len(service.follows) == 1


def test_a_snapshot_of_another_incarnation_than_the_one_asked_for_is_a_protocol_error(mode):
    service = Incarnated(LOG, [inc_snapshot(LOG[0:20], 19, header=NEXT, frame_id=NEXT)])
    with pytest.raises(ProtocolError, match=f"header names incarnation {NEXT}, but the read is of {INC}"):
        follow_into([], service, mode=mode, limit=5, incarnation=INC)


def test_a_snapshot_whose_header_names_none_learns_the_incarnation_from_its_id(mode):
    streams = [Broken(inc_snapshot(LOG[0:20], 19, header=None)), inc_live(20, 30)]
    service = Incarnated(LOG, streams)
    assert collect(service, mode=mode, limit=30) == LOG[:30]
    assert resumes(service) == [None, f"{INC}:19"]


def test_gap_repairs_name_the_incarnation_on_their_pages(mode):
    service = Incarnated(LOG, [inc_snapshot(LOG[0:20], 19) + inc_live(20, 25) + inc_live(41, 50)])
    assert collect(service, mode=mode, limit=50) == LOG[:50]
    assert [request.url.params["incarnation"] for request in service.pages] == [INC, INC]


def test_a_gap_repair_that_finds_the_incarnation_gone_raises_session_deleted(mode):
    # The repair's pages are of the session created again under the id: each answers 404.
    service = Incarnated(LOG, [inc_snapshot(LOG[0:20], 19) + inc_live(20, 25) + inc_live(41, 50)], incarnation=NEXT)
    received: list[Event] = []
    with pytest.raises(SessionDeletedError):
        follow_into(received, service, mode=mode, limit=50)
    assert received == LOG[:25] and len(service.pages) == 1 and len(service.follows) == 1


def test_a_repair_page_of_another_incarnation_is_a_protocol_error(mode):
    class Unpinned(Incarnated):
        # A service that ignores the pin and answers with the page of the session now under the id.
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/follow"):
                return super().__call__(request)
            response = Service.__call__(self, request)
            response.headers["Session-Incarnation"] = NEXT
            return response

    service = Unpinned(LOG, [inc_snapshot(LOG[0:20], 19) + inc_live(41, 50)])
    with pytest.raises(ProtocolError, match=f"a page names incarnation {NEXT}, but the read is of {INC}"):
        collect(service, mode=mode, limit=50)


def test_a_packed_stream_is_asked_for_by_default_and_its_records_expand_exactly(mode):
    body = RETRY + snapshot_frame(LOG[0:20], 19) + records_frame(LOG[20:45]) + records_frame(LOG[45:46])
    service = Service(LOG, [body])
    assert collect(service, mode=mode, limit=46) == LOG[:46]
    assert service.follows[0].url.params["packed"] == "1"


def test_a_follow_that_is_not_packed_asks_for_event_frames(mode):
    service = Service(LOG, [snapshot_frame(LOG[0:20], 19) + live(20, 30)])
    assert collect(service, mode=mode, limit=30, packed=False) == LOG[:30]
    assert "packed" not in service.follows[0].url.params


def test_records_frames_follow_the_live_rules(mode):
    """A duplicate is dropped, a gap is repaired from pages, and a resume continues after the last frame."""
    streams = [
        Broken(snapshot_frame(LOG[0:20], 19), records_frame(LOG[20:30]), records_frame(LOG[25:30])),
        records_frame(LOG[30:35]) + records_frame(LOG[52:60]),
    ]
    service = Service(LOG, streams)
    assert collect(service, mode=mode, limit=60) == LOG[:60]
    assert service.follows[1].headers["last-event-id"] == "29"
    assert [request.url.params["through"] for request in service.pages] == ["51", "41"]


@pytest.mark.parametrize(
    ("frame", "error", "message"),
    [
        (records_frame(LOG[15:25]), StreamOverlapError, "partially overlapping"),
        (records_frame(LOG[20:25], event_id=23), ProtocolError, "has the id of seq 23"),
        (records_frame(LOG[20:25], records=pack_page(LOG[20:24])), ProtocolError, "records end before seq 24"),
        (sse("records", b'{"records":[]}', 20), ProtocolError, "invalid records frame"),
    ],
)
def test_a_records_frame_that_breaks_the_rules_is_refused_before_any_of_its_events(mode, frame, error, message):
    received = []
    with pytest.raises(error, match=message):
        received += collect(Service(LOG, [snapshot_frame(LOG[0:20], 19) + frame]), mode=mode, limit=100)
    assert received == []


def test_a_server_that_predates_packed_streams_is_followed_in_event_frames(mode):
    old = httpx.Response(
        400, json={"error": {"code": "invalid_parameter", "message": "unknown query parameter(s): packed"}}
    )
    service = Service(LOG, [old, snapshot_frame(LOG[0:20], 19) + live(20, 30)])
    assert collect(service, mode=mode, limit=30) == LOG[:30]
    assert [request.url.params.get("packed") for request in service.follows] == ["1", None]


def test_until_caught_up_ends_a_fresh_follow_once_the_snapshot_is_delivered(mode):
    service = Service(LOG, [snapshot_frame(LOG[40:100], 99) + live(100, 120)])
    assert collect(service, mode=mode, limit=1000, follow={"until": "caught_up"}) == LOG[40:100]
    assert service.states == [], "a fresh follow's snapshot names the head: nothing else is read"


def test_until_caught_up_on_a_resume_reads_the_head_first_and_ends_there(mode):
    service = Service(LOG, [Broken(live(120, 130)), live(130, 160)], head=139)
    assert collect(service, mode=mode, limit=1000, after=119, follow={"until": "caught_up"}) == LOG[120:140]
    assert [r.url.path for r in service.states] == ["/v1/sessions/s"]
    assert [r.headers["last-event-id"] for r in service.follows] == ["119", "129"]


def test_on_caught_up_hears_the_head_once_and_the_follow_goes_on(mode):
    heard: list[int] = []
    service = Service(LOG, [snapshot_frame(LOG[40:100], 99) + live(100, 120)])
    assert collect(service, mode=mode, limit=80, follow={"on_caught_up": heard.append}) == LOG[40:120]
    assert heard == [99]


def test_a_resume_at_the_head_is_caught_up_before_it_connects_and_one_past_it_is_cursor_ahead(mode):
    service = Service(LOG, [live(150, 160)], head=149)
    assert collect(service, mode=mode, limit=1000, after=149, follow={"until": "caught_up"}) == []
    assert service.follows == []
    with pytest.raises(CursorAheadError) as ahead:
        collect(Service(LOG, head=149), mode=mode, limit=1000, after=160, follow={"until": "caught_up"})
    assert (ahead.value.after, ahead.value.head_seq) == (160, 149)


def test_idle_ends_a_follow_that_hears_nothing_more_but_pings(mode):
    service = Service(LOG, [Silent(snapshot_frame(LOG[0:10], 9), live(10, 15))])
    assert collect(service, mode=mode, limit=1000, follow={"idle": 0.05}) == LOG[:15]
    assert len(service.follows) == 1, "idle is an end, not a broken stream"


def test_a_resume_that_reads_the_head_of_another_incarnation_raises_session_deleted(mode):
    service = Incarnated(LOG, [inc_live(120, 150)], incarnation=NEXT)
    with pytest.raises(SessionDeletedError):
        collect(service, mode=mode, limit=1000, after=119, follow={"until": "caught_up", "incarnation": INC})
    assert service.follows == []


def test_a_resume_learns_the_incarnation_from_the_head_it_reads(mode):
    service = Incarnated(LOG, [inc_live(120, 150)])
    service.head = 149
    assert collect(service, mode=mode, limit=1000, after=119, follow={"until": "caught_up"}) == LOG[120:150]
    assert service.follows[0].headers["last-event-id"] == f"{INC}:119"


@pytest.mark.parametrize(("option", "value"), [("until", "caught-up"), ("idle", 0), ("idle", -1.0)])
def test_a_follow_refuses_a_stopping_rule_it_does_not_know(mode, option, value):
    with pytest.raises(ValueError, match=option):
        collect(Service(LOG, []), mode=mode, limit=1, follow={option: value})

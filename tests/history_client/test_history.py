"""Paging plans through both clients: pages join exactly, history comes back oldest first and exact."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from history_client import (
    AsyncHistoryClient,
    HistoryClient,
    PageContinuityError,
    ProtocolError,
    SessionDeletedError,
)
from history_client.history import Emit, Fetch, PageAnswer, history_plan
from testing.events import make_events
from testing.mock_service import Service
from testing.wire import page_body

LOG = make_events(95)


def run(mode: str, handler: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    if mode == "sync":
        with HistoryClient("http://test", transport=httpx.MockTransport(handler)) as client:
            return list(getattr(client, method)(*args, **kwargs))

    async def main() -> Any:
        async with AsyncHistoryClient("http://test", transport=httpx.MockTransport(handler)) as client:
            return [value async for value in getattr(client, method)(*args, **kwargs)]

    return anyio.run(main)


@pytest.fixture(params=["sync", "async"])
def mode(request):
    return request.param


def test_iter_pages_walks_back_to_seq_zero_and_each_page_joins_the_next(mode):
    service = Service(LOG)
    pages = run(mode, service, "iter_pages", "s")
    assert [(page.from_seq, page.to_seq) for page in pages] == [(85 - 10 * i, 95 - 10 * i) for i in range(9)] + [(0, 5)]
    assert [event for page in reversed(pages) for event in page.events()] == LOG
    assert "through" not in service.pages[0].url.params
    assert [request.url.params["through"] for request in service.pages[1:]] == [str(84 - 10 * i) for i in range(9)]


def test_iter_history_returns_the_whole_log_oldest_first(mode):
    service = Service(LOG)
    assert run(mode, service, "iter_history", "s") == LOG
    assert len(service.pages) == 10  # each page is fetched once; the newer ones wait on disk


@pytest.mark.parametrize(
    ("after", "through"), [(-1, 94), (40, None), (44, 60), (45, 54), (93, None), (94, None), (60, 60)]
)
def test_iter_history_returns_exactly_the_interval(mode, after, through):
    expected = [event for event in LOG if after < event.seq <= (94 if through is None else through)]
    assert run(mode, Service(LOG), "iter_history", "s", after=after, through=through) == expected


def test_pages_that_do_not_join_are_refused(mode):
    def handler(request):
        through = int(request.url.params.get("through", 94))
        start = max(0, through - 9)
        # The second page claims to end one seq early: it does not reach the first page's start.
        end = through if through != 84 else through - 1
        return httpx.Response(200, content=page_body(LOG[start : end + 1], from_seq=start, to_seq=end + 1))

    with pytest.raises(PageContinuityError, match="requested cursor"):
        run(mode, handler, "iter_history", "s")


def test_an_empty_session_has_no_history(mode):
    def handler(request):
        return httpx.Response(200, content=page_body([], from_seq=0, to_seq=0))

    assert run(mode, handler, "iter_history", "s") == []
    assert [len(page) for page in run(mode, handler, "iter_pages", "s")] == [0]


def test_history_plan_spools_all_but_the_oldest_page():
    plan = history_plan(through=29)
    assert next(plan) == Fetch(29)
    assert plan.send(PageAnswer(page_body(LOG[20:30], from_seq=20, to_seq=30))) == Fetch(19)
    assert plan.send(PageAnswer(page_body(LOG[10:20], from_seq=10, to_seq=20))) == Fetch(9)
    emitted = plan.send(PageAnswer(page_body(LOG[0:10], from_seq=0, to_seq=10)))
    assert isinstance(emitted, Emit) and list(emitted.values) == LOG[0:10]
    for expected in (LOG[10:20], LOG[20:30]):
        emitted = next(plan)
        assert isinstance(emitted, Emit) and list(emitted.values) == expected
    with pytest.raises(StopIteration):
        next(plan)


INC = "5d0c1e9a7b22"


class Recreated(Service):
    """Pages of incarnation ``INC`` until ``recreate_after`` pages were served; then the id holds another session."""

    def __init__(self, log: Any, *, recreate_after: int | None = None, pinned: bool = True) -> None:
        super().__init__(log)
        self.recreate_after = recreate_after
        self.pinned = pinned  # False: a service that ignores the incarnation it is asked for

    def __call__(self, request: httpx.Request) -> httpx.Response:
        served = len(self.pages)
        incarnation = INC if self.recreate_after is None or served < self.recreate_after else "77aa00bb11cc"
        named = request.url.params.get("incarnation")
        if self.pinned and named is not None and named != incarnation:
            self.pages.append(request)
            return httpx.Response(404, json={"error": {"code": "session_not_found", "message": "no session 's'"}})
        response = super().__call__(request)
        response.headers["Session-Incarnation"] = incarnation
        return response


def test_every_page_after_the_first_names_the_first_pages_incarnation(mode):
    service = Recreated(LOG)
    pages = run(mode, service, "iter_pages", "s")
    assert [event for page in reversed(pages) for event in page.events()] == LOG
    assert {page.incarnation for page in pages} == {INC}
    assert "incarnation" not in service.pages[0].url.params
    assert {request.url.params["incarnation"] for request in service.pages[1:]} == {INC}
    history = Recreated(LOG)
    assert run(mode, history, "iter_history", "s", after=40) == LOG[41:]
    assert [request.url.params.get("incarnation") for request in history.pages] == [None] + [INC] * 5


def test_an_incarnation_given_by_the_caller_pins_the_first_page_too(mode):
    service = Recreated(LOG)
    assert run(mode, service, "iter_history", "s", after=80, incarnation=INC) == LOG[81:]
    assert [request.url.params["incarnation"] for request in service.pages] == [INC, INC]
    with pytest.raises(SessionDeletedError):
        run(mode, Recreated(LOG), "iter_pages", "s", incarnation="77aa00bb11cc")


@pytest.mark.parametrize("method", ["iter_pages", "iter_history"])
def test_a_delete_and_re_create_between_two_pages_raises_session_deleted(mode, method):
    service = Recreated(LOG, recreate_after=2)
    with pytest.raises(SessionDeletedError) as caught:
        run(mode, service, method, "s")
    assert caught.value.incarnation == INC
    assert len(service.pages) == 3  # the third page was refused, and nothing was asked after it


def test_a_page_of_another_incarnation_than_the_pinned_one_is_a_protocol_error(mode):
    service = Recreated(LOG, recreate_after=1, pinned=False)
    with pytest.raises(ProtocolError, match="a page names incarnation 77aa00bb11cc, but the read is of 5d0c1e9a7b22"):
        run(mode, service, "iter_history", "s")


def test_pages_of_a_service_without_incarnations_pin_nothing(mode):
    service = Service(LOG)
    pages = run(mode, service, "iter_pages", "s")
    assert {page.incarnation for page in pages} == {None}
    assert all("incarnation" not in request.url.params for request in service.pages)


def test_the_plan_names_the_learned_incarnation_on_its_next_fetch():
    plan = history_plan(through=29)
    assert next(plan) == Fetch(29)
    assert plan.send(PageAnswer(page_body(LOG[20:30], from_seq=20, to_seq=30), INC)) == Fetch(19, incarnation=INC)

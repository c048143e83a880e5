"""Paging plans through both clients: pages join exactly, history comes back oldest first and exact."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from history_client import AsyncHistoryClient, HistoryClient, PageContinuityError
from history_client.history import Emit, Fetch, history_plan
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
    assert plan.send(page_body(LOG[20:30], from_seq=20, to_seq=30)) == Fetch(19)
    assert plan.send(page_body(LOG[10:20], from_seq=10, to_seq=20)) == Fetch(9)
    emitted = plan.send(page_body(LOG[0:10], from_seq=0, to_seq=10))
    assert isinstance(emitted, Emit) and list(emitted.values) == LOG[0:10]
    for expected in (LOG[10:20], LOG[20:30]):
        emitted = next(plan)
        assert isinstance(emitted, Emit) and list(emitted.values) == expected
    with pytest.raises(StopIteration):
        next(plan)

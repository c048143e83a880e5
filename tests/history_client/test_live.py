"""The client against real uvicorn servers on 127.0.0.1: exact history, and follow through cuts and restarts."""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from codec import DeltaData, Event, SessionHeader, TextDelta, encode
from history_client import (
    AsyncHistoryClient,
    Backoff,
    HistoryClient,
    Reconnected,
    Retrying,
    ServiceError,
    SessionDeletedError,
)
from history_service.settings import Settings
from persistence import MemoryStore
from testing.seeding import SCENARIOS
from testing.servers import CuttingProxy, ServerProcess, serve_in_thread

TOTAL = 20_000

JSON = {"Content-Type": "application/json"}


def child_address(session_id: str) -> tuple[str, str | None]:
    if ".child-" not in session_id:
        return session_id, None
    return session_id.rpartition(".")[0] if "grandchild" in session_id else session_id.split(".child-")[0], session_id


@pytest.mark.parametrize("request_body", SCENARIOS.values(), ids=list(SCENARIOS))
def test_iter_history_returns_exactly_the_stored_events_for_every_scenario(request_body: dict[str, Any]) -> None:
    from history_service.settings import Settings

    store = MemoryStore()
    with serve_in_thread(Settings(enable_test_seed=True), store=store) as server:
        response = httpx.post(f"{server.url}/v1/test-only/seed", json=request_body, timeout=60)
        assert response.status_code == 201, response.text
        with HistoryClient(server.url, max_messages=4, timeout=60) as client:
            for session in response.json()["sessions"]:
                stored = server.call(store.read_events(session["id"], 0, session["headSeq"] + 1))
                parent, child = child_address(session["id"])
                assert list(client.iter_history(parent, child=child)) == stored
                middle = session["headSeq"] // 2
                assert list(client.iter_history(parent, child=child, after=middle)) == stored[middle + 1 :]


def make_events(rand: random.Random) -> list[Event]:
    events = []
    for seq in range(TOTAL):
        if rand.random() < 0.04:
            events.append(Event("note", seq, seq, {"seq": seq, "pad": "é" * rand.randint(0, 200)}))
        else:
            events.append(Event("assistant/chunk", seq, seq, DeltaData(1, 1, TextDelta(seq // 500, f" t{seq}"))))
    return events


async def produce(url: str, events: list[Event], rand: random.Random, progress: dict[str, int]) -> None:
    """Append in random batches, re-sending a batch until it is stored (a re-sent stored batch is a 200)."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        start = 0
        batch: list[Event] = []
        while start < len(events):
            # A batch whose answer was lost is re-sent whole, never re-cut: it may already be stored.
            batch = batch or events[start : start + rand.randint(1, 300)]
            try:
                response = await client.post(
                    "/v1/sessions/live/events", content=encode({"events": batch}), headers=JSON
                )
            except httpx.TransportError:
                await anyio.sleep(0.05)
                continue
            assert response.status_code in (200, 201), response.text
            start += len(batch)
            batch = []
            progress["appended"] = start
            await anyio.sleep(rand.uniform(0, 0.01))


@pytest.mark.anyio
async def test_follow_delivers_every_event_once_through_cuts_and_server_restarts(tmp_path: Path) -> None:
    rand = random.Random(5)
    events = make_events(rand)
    server = ServerProcess(f"sqlite:///{tmp_path / 'live.db'}")
    await anyio.to_thread.run_sync(server.start)
    try:
        assert httpx.post(f"{server.url}/v1/sessions", json={"id": "live", "createdAt": 0}).status_code == 201
        progress = {"appended": 0}
        received: list[Event] = []
        async with CuttingProxy(server.port) as proxy, anyio.create_task_group() as group:
            group.start_soon(produce, server.url, events, rand, progress)
            while progress["appended"] < 2000:
                await anyio.sleep(0.01)

            restarts = [signal.SIGKILL, signal.SIGTERM]

            async def chaos() -> None:
                while progress["appended"] < TOTAL:
                    await anyio.sleep(rand.uniform(0.05, 0.4))
                    if restarts and progress["appended"] > TOTAL * (3 - len(restarts)) // 4:
                        await anyio.to_thread.run_sync(server.restart, restarts.pop(0))
                    # Cut a connection the follower holds, not the gap while it backs off: on a loaded
                    # machine every cut could otherwise land in a gap and sever nothing.
                    with anyio.move_on_after(2):
                        while not proxy.open:
                            await anyio.sleep(0.005)
                    proxy.cut()

            group.start_soon(chaos)
            backoff = Backoff(base=0.02, cap=0.5, max_retries=200)
            with anyio.fail_after(300):
                async with AsyncHistoryClient(proxy.url, backoff=backoff, follow_read_timeout=5) as client:
                    async for event in client.follow("live"):
                        received.append(event)
                        if event.seq == TOTAL - 1:
                            break
        assert len(received) == TOTAL and received == events
        # The follower really reconnected. How often depends on where each cut and restart lands:
        # one during a backoff finds no connection open (more often on a loaded machine), so the
        # count of connections is not pinned; at least one cut must have severed an open one.
        assert proxy.cuts >= 3 and restarts == [] and proxy.severed >= 1 and proxy.connections >= 2

        with HistoryClient(server.url, backoff=backoff) as sync_client:
            suffix = []
            for event in sync_client.follow("live", after=12_345):
                suffix.append(event)
                if event.seq == TOTAL - 1:
                    break
        assert suffix == events[12_346:]
    finally:
        await anyio.to_thread.run_sync(server.stop)


@pytest.mark.anyio
async def test_both_clients_close_a_session_and_their_follows_end_after_its_last_event() -> None:
    events = make_events(random.Random(3))[:120]
    with serve_in_thread(Settings(store_url="memory://", ping_interval=0.5)) as running:
        async with AsyncHistoryClient(running.url) as client:
            await client.create_session(SessionHeader(id="s", createdAt=0))
            await client.append("s", events[:100])
            received: list[Event] = []

            async def follow() -> None:
                async for event in client.follow("s", after=-1):
                    received.append(event)

            async with anyio.create_task_group() as group:
                group.start_soon(follow)
                await client.append("s", events[100:])
                closed = await client.close_session("s")
            assert closed.head_seq == 119 and type(closed.closed_at) is int
            assert encode(received) == encode(events)
            with pytest.raises(ServiceError) as refused:
                await client.append("s", [Event("note", 120, 0, {})])
            assert refused.value.code == "session_closed"
        with HistoryClient(running.url) as sync_client:
            assert sync_client.close_session("s") == closed
            assert encode(list(sync_client.follow("s", after=110))) == encode(events[111:])


def messages(count: int, **data: Any) -> list[Event]:
    """User messages, each a message group of its own, so a page of ``maxMessages`` N holds N of them."""
    return [Event("user/message", seq, seq, {"text": f"m{seq}", **data}, surfaceOp="append") for seq in range(count)]


def recreate(url: str, events: list[Event]) -> str:
    """Delete session ``s`` and create it again with ``events``; the new incarnation."""
    with HistoryClient(url) as raw:
        raw.delete_session("s")
        created = raw.create_session(SessionHeader(id="s", createdAt=1))
        raw.append("s", events)
    return created.incarnation


def test_both_clients_delete_a_session_and_its_id_may_be_created_again() -> None:
    with serve_in_thread(Settings(store_url="memory://")) as running:
        with HistoryClient(running.url) as client:
            created = client.create_session(SessionHeader(id="s", createdAt=0))
            assert created.id == "s" and created.head_seq == -1 and type(created.incarnation) is str
            client.append("s", messages(10))
            assert client.page("s").incarnation == created.incarnation
            client.delete_session("s")
            with pytest.raises(ServiceError) as gone:
                client.page("s")
            assert (gone.value.status_code, gone.value.code) == (404, "session_not_found")
            with pytest.raises(ServiceError) as again:
                client.delete_session("s")
            assert type(again.value) is ServiceError and again.value.code == "session_not_found"
            with pytest.raises(SessionDeletedError):
                client.page("s", incarnation=created.incarnation)

        async def main() -> str:
            async with AsyncHistoryClient(running.url) as client:
                answer = await client.create_session(SessionHeader(id="s", createdAt=0))
                assert (await client.page("s", incarnation=answer.incarnation)).to_seq == 0
                await client.delete_session("s")
                with pytest.raises(ServiceError, match="session_not_found"):
                    await client.delete_session("s")
                return answer.incarnation

        assert anyio.run(main) != created.incarnation


def store_url(kind: str, tmp_path: Path) -> str:
    return {"memory": "memory://", "sqlite": f"sqlite:///{tmp_path / 'h.db'}", "jsonl": f"jsonl:///{tmp_path}"}[kind]


@pytest.mark.parametrize("store", ["memory", "sqlite", "jsonl"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_follow_ends_with_session_deleted_when_its_session_is_deleted(mode: str, store: str, tmp_path: Path) -> None:
    events = messages(100)
    changes: list[Any] = []
    received: list[Event] = []
    with serve_in_thread(Settings(store_url=store_url(store, tmp_path))) as running:
        with HistoryClient(running.url) as setup:
            incarnation = setup.create_session(SessionHeader(id="s", createdAt=0)).incarnation
            setup.append("s", events)
        if mode == "sync":
            with HistoryClient(running.url) as client, pytest.raises(SessionDeletedError) as caught:
                for event in client.follow("s", after=-1, on_connection=changes.append):
                    received.append(event)
                    if event.seq == 99:
                        client.delete_session("s")
        else:

            async def main() -> None:
                async with AsyncHistoryClient(running.url) as client:
                    async for event in client.follow("s", after=-1, on_connection=changes.append):
                        received.append(event)
                        if event.seq == 99:
                            await client.delete_session("s")

            with pytest.raises(SessionDeletedError) as caught:
                anyio.run(main)
    assert received == events and caught.value.incarnation == incarnation
    assert caught.value.__cause__ is None  # the stream's session_deleted frame, not a refused reconnect
    assert changes == []  # it stopped; it did not reconnect


@pytest.mark.parametrize("store", ["memory", "sqlite", "jsonl"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.anyio
async def test_a_follower_that_reconnects_after_a_delete_and_re_create_gets_session_deleted(
    mode: str, store: str, tmp_path: Path
) -> None:
    old, new = messages(50), messages(80, new=True)
    received: list[Event] = []
    changes: list[Retrying | Reconnected] = []
    incarnations: list[str] = []
    with serve_in_thread(Settings(store_url=store_url(store, tmp_path))) as running:
        with HistoryClient(running.url) as setup:
            incarnations.append(setup.create_session(SessionHeader(id="s", createdAt=0)).incarnation)
            setup.append("s", old)

        def lost(change: Retrying | Reconnected) -> None:
            # Runs after the stream was cut and before the reconnect: the id is another session by then.
            changes.append(change)
            if len(incarnations) == 1:
                incarnations.append(recreate(running.url, new))

        backoff = Backoff(base=0.01, cap=0.05, max_retries=5)
        async with CuttingProxy(int(running.url.rpartition(":")[2])) as proxy:
            if mode == "sync":

                def follow() -> None:
                    with HistoryClient(proxy.url, backoff=backoff) as client:
                        for event in client.follow("s", after=-1, on_connection=lost):
                            received.append(event)
                            if event.seq == 49:
                                anyio.from_thread.run_sync(proxy.cut)

                with pytest.raises(SessionDeletedError) as caught:
                    await anyio.to_thread.run_sync(follow)
            else:
                async with AsyncHistoryClient(proxy.url, backoff=backoff) as client:
                    with pytest.raises(SessionDeletedError) as caught:
                        async for event in client.follow("s", after=-1, on_connection=lost):
                            received.append(event)
                            if event.seq == 49:
                                proxy.cut()
            assert proxy.connections == 2  # the follow, and its one reconnect
        with HistoryClient(running.url) as check:
            assert list(check.iter_history("s")) == new  # the new session is there, and was never delivered
    assert received == old and caught.value.incarnation == incarnations[0] != incarnations[1]
    refused = caught.value.__cause__
    assert isinstance(refused, ServiceError) and (refused.status_code, refused.code) == (404, "session_not_found")
    assert [type(change) for change in changes] == [Retrying]


@pytest.mark.parametrize("store", ["memory", "sqlite", "jsonl"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pages_read_across_a_delete_and_re_create_raise_session_deleted(mode: str, store: str, tmp_path: Path) -> None:
    with serve_in_thread(Settings(store_url=store_url(store, tmp_path))) as running:
        with HistoryClient(running.url) as setup:
            setup.create_session(SessionHeader(id="s", createdAt=0))
            setup.append("s", messages(30))
        pages: list[Any] = []
        if mode == "sync":
            with HistoryClient(running.url, max_messages=5) as client, pytest.raises(SessionDeletedError):
                for page in client.iter_pages("s"):
                    pages.append(page)
                    recreate(running.url, messages(30, new=True))
        else:

            async def main() -> None:
                async with AsyncHistoryClient(running.url, max_messages=5) as client:
                    async for page in client.iter_pages("s"):
                        pages.append(page)
                        await anyio.to_thread.run_sync(recreate, running.url, messages(30, new=True))

            with pytest.raises(SessionDeletedError):
                anyio.run(main)
        assert [(page.from_seq, page.to_seq) for page in pages] == [(25, 30)]
        assert list(pages[0].events()) == messages(30)[25:]


def test_history_read_across_a_delete_and_re_create_raises_session_deleted() -> None:
    with serve_in_thread(Settings(store_url="memory://")) as running:
        with HistoryClient(running.url) as setup:
            setup.create_session(SessionHeader(id="s", createdAt=0))
            setup.append("s", messages(30))
        pages_served = []

        def after_page(response: httpx.Response) -> None:
            # Between the first page and the second, the id becomes another session with as many events.
            pages_served.append(response.headers.get("Session-Incarnation"))
            if len(pages_served) == 1:
                recreate(running.url, messages(30, new=True))

        http = httpx.Client(base_url=running.url, event_hooks={"response": [after_page]})
        received: list[Event] = []
        with HistoryClient(http_client=http, max_messages=5) as client, pytest.raises(SessionDeletedError):
            received.extend(client.iter_history("s"))
        http.close()
    assert received == [] and len(pages_served) == 2 and pages_served[1] is None  # the 404 names none


def test_both_clients_list_sessions_and_children_read_a_session_and_stop_a_follow_caught_up_or_idle() -> None:
    events = messages(30)
    with serve_in_thread(Settings(store_url="memory://")) as running:
        with HistoryClient(running.url) as client:
            client.create_session(SessionHeader(id="p", createdAt=2))
            client.create_session(SessionHeader(id="q", createdAt=1))
            client.create_session(SessionHeader(id="p.c", createdAt=3, parentSession="p", origin="subagent"))
            client.append("p", events)
            closed = client.close_session("q")
            first = client.list_sessions(limit=1)
            assert [(s.id, s.head_seq, s.child_count) for s in first.sessions] == [("p", 29, 1)]
            assert (first.total, first.sessions[0].title, first.sessions[0].last_event_at) == (2, "m0", 29)
            assert [(s.id, s.title) for s in client.list_sessions(q="Q").sessions] == [("q", msgspec.UNSET)]
            rest = client.list_sessions(cursor=first.next_cursor)
            assert [(s.id, s.closed_at) for s in rest.sessions] == [("q", closed.closed_at)] and not rest.next_cursor
            assert [s.id for s in client.list_sessions(state="open").sessions] == ["p"]
            assert [s.id for s in client.subagents("p").sessions] == ["p.c"]
            state = client.session("p")
            assert (state.header.id, state.head_seq, state.title, state.last_event_at) == ("p", 29, "m0", 29)
            assert client.session("p", child="p.c").header.parentSession == "p"
            assert list(client.follow("p", until="caught_up")) == events
            assert list(client.follow("p", after=9, until="caught_up")) == events[10:]
            assert list(client.follow("p", after=29, idle=0.2)) == []

        async def main() -> None:
            async with AsyncHistoryClient(running.url) as client:
                assert [s.id for s in (await client.list_sessions()).sessions] == ["p", "q"]
                assert [s.id for s in (await client.subagents("p", state="closed")).sessions] == []
                assert (await client.session("p", child="p.c")).head_seq == -1
                heard: list[int] = []
                follow = client.follow("p", after=19, until="caught_up", on_caught_up=heard.append)
                assert [e async for e in follow] == events[20:] and heard == [29]
                assert [e async for e in client.follow("p", after=29, idle=0.2)] == []

        anyio.run(main)


def test_both_clients_search_a_page_at_a_time_and_name_a_childs_parent() -> None:
    with serve_in_thread(Settings(store_url="memory://")) as running:
        with HistoryClient(running.url) as client:
            client.create_session(SessionHeader(id="p", createdAt=2))
            client.create_session(SessionHeader(id="p.c", createdAt=3, parentSession="p", origin="subagent"))
            client.append("p", messages(3, text="the rate limit"))
            client.append("p.c", [Event("user/message", 0, 7, {"text": "a rate limit"})])
            first = client.search("rate limit", limit=3)
            assert len(first.hits) == 3 and first.next_cursor is not None
            rest = client.search("rate limit", limit=3, cursor=first.next_cursor)
            hits = first.hits + rest.hits
            assert rest.next_cursor is None and sorted((h.session, h.seq) for h in hits) == [
                ("p", 0),
                ("p", 1),
                ("p", 2),
                ("p.c", 0),
            ]
            child = next(h for h in hits if h.session == "p.c")
            assert (child.parent, child.kind, child.time) == ("p", "user", 7)
            assert child.snippet == ["a ", "rate", " ", "limit", ""]
            with pytest.raises(ServiceError) as refused:
                client.search("!!")
            assert (refused.value.status_code, refused.value.code) == (400, "invalid_parameter")

        async def main() -> None:
            async with AsyncHistoryClient(running.url) as client:
                found = await client.search("rate", state="open", since=7, until=8)
                assert [(h.session, h.seq) for h in found.hits] == [("p.c", 0)]

        anyio.run(main)

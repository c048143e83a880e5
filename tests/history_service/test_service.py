"""Hostile input on every store, through a real server: what is accepted reads back, and failures leak nothing."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from codec import (
    Event,
    SessionHeader,
    check_page,
    decode_follow_snapshot,
    decode_page,
    encode,
    iter_page_events,
    read_session_log,
)
from codec.events import MAX_DEPTH, MAX_SESSION_ID
from history_client import HistoryClient
from history_service.answers import ERRORS
from history_service.cli.program import main
from history_service.errors import NotOwner
from history_service.pages import PageQuery
from history_service.service import HistoryService
from history_service.settings import Settings
from persistence import JsonlStore, MemoryStore, open_store
from testing.events import plain, text
from testing.servers import serve_in_thread
from testing.stores import BACKENDS, emptied_backend_url

JSON = {"Content-Type": "application/json"}
# An id of the longest kind the rule allows, whose JSONL directory name would be 1,000 characters escaped.
LONG_ID = (".:@" * MAX_SESSION_ID)[:MAX_SESSION_ID]


def store_url(backend: str, tmp_path: Path) -> str:
    return anyio.run(emptied_backend_url, backend, tmp_path)


@pytest.fixture(params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[httpx.Client, str]]:
    url = store_url(request.param, tmp_path)
    with serve_in_thread(Settings(store_url=url)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        yield http, url


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def first_frame(http: httpx.Client, path: str, **params: Any) -> tuple[str, bytes]:
    with http.stream("GET", path, params=params) as response:
        assert response.status_code == 200, response.read()
        event = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                return event, line[6:].encode()
    raise AssertionError("the stream ended before a frame")


def test_data_at_the_depth_limit_reads_back_through_every_path(served: tuple[httpx.Client, str]) -> None:
    """F5: data nested 64 levels is accepted and reads back from pages, raw pages, follow and the SDK; 65 is not."""
    http, _ = served
    assert http.post("/v1/sessions", json={"id": "deep", "createdAt": 0}).status_code == 201
    events = [
        plain(0, "tool/result", nested(MAX_DEPTH)),
        *(text(seq, seq, "x") for seq in range(1, 5)),
        plain(5, "user/message", {"content": nested(MAX_DEPTH - 1)}, surfaceOp="append"),
    ]
    response = http.post("/v1/sessions/deep/events", content=encode({"events": events}), headers=JSON)
    assert response.status_code == 201, response.text
    too_deep = {"type": "x", "seq": 6, "time": 0, "data": nested(MAX_DEPTH + 1)}
    response = http.post("/v1/sessions/deep/events", json={"events": [too_deep]})
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_event"

    for params in ({}, {"expand": "raw"}, {"through": 5}):
        response = http.get("/v1/sessions/deep/page", params=params)
        assert response.status_code == 200, response.text
        assert list(iter_page_events(check_page(decode_page(response.content)).records)) == events
    kind, data = first_frame(http, "/v1/sessions/deep/follow")
    snapshot = decode_follow_snapshot(data)
    assert kind == "snapshot" and snapshot.cursor == 5
    kind, data = first_frame(http, "/v1/sessions/deep/follow", after=-1)
    assert kind == "event" and json.loads(data)["data"] == nested(MAX_DEPTH)
    with HistoryClient(str(http.base_url)) as client:
        assert list(client.iter_history("deep")) == events


def test_the_longest_ids_work_on_every_path_and_one_more_character_is_refused(
    served: tuple[httpx.Client, str],
) -> None:
    """F4 and F7: every id the rule accepts works on every store; longer ones are a 422, never a 5xx."""
    http, _ = served
    child = {"id": LONG_ID, "createdAt": 0, "parentSession": "p", "origin": "subagent"}
    for header in ({"id": "p", "createdAt": 0}, child, {"id": "x" * MAX_SESSION_ID, "createdAt": 1}):
        assert http.post("/v1/sessions", json=header).status_code == 201, header
    for session in (LONG_ID, "x" * MAX_SESSION_ID):
        response = http.post(f"/v1/sessions/{session}/events", json={"events": [encode_event(plain(0))]})
        assert response.status_code == 201, response.text
    for path in (f"/v1/sessions/p/subagents/{LONG_ID}", "/v1/sessions/" + "x" * MAX_SESSION_ID):
        assert http.get(f"{path}/page").status_code == 200
        assert first_frame(http, f"{path}/follow")[0] == "snapshot"
        assert http.get(path).json()["headSeq"] == 0
    for path in (f"/v1/sessions/p/subagents/{LONG_ID}x", "/v1/sessions/" + "x" * (MAX_SESSION_ID + 1)):
        for suffix in ("/page", "/follow", ""):
            response = http.get(path + suffix)
            assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_session_id"
    response = http.post("/v1/sessions", json={**child, "id": LONG_ID + "x"})
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_session_id"


def encode_event(event: Event) -> Any:
    return json.loads(encode(event))


def test_a_corrupt_log_answers_503_without_a_path_and_logs_the_detail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """F13: no server path or internal detail in an error body; the server log has them."""
    root = tmp_path / "logs"
    url = f"jsonl:///{root}"

    async def write() -> None:
        store = await open_store(url, create=True)
        await store.create_session(SessionHeader(id="s", createdAt=0))
        await store.append("s", [plain(0), plain(1, "note", {"k": "v"}), plain(2)])
        await store.close()

    anyio.run(write)
    log = root / "s" / "session.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"note"', b'"not"}'))
    (root / "s" / "index.jsonl").unlink()
    with serve_in_thread(Settings(store_url=url)) as server, httpx.Client(base_url=server.url) as http:
        with caplog.at_level(logging.ERROR, logger="history_service"):
            response = http.get("/v1/sessions/s/page")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "store_unavailable"
    assert str(tmp_path) not in response.text and "/" not in response.json()["error"]["message"]
    assert str(log) in caplog.text


def test_an_export_of_depth_limited_data_imports_back(tmp_path: Path) -> None:
    """F5's last read path: export, then import into a fresh store, gives the same log."""
    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"jsonl:///{tmp_path / 'b'}"

    async def write() -> None:
        store = await open_store(source, create=True)
        await store.create_session(SessionHeader(id="deep", createdAt=0))
        await store.append(
            "deep", [plain(0, "tool/result", nested(MAX_DEPTH)), *(text(s, s, "x") for s in range(1, 5))]
        )
        await store.close()

    anyio.run(write)
    exported = io.StringIO()
    assert main(["export", "--store", source, "deep"], out=exported, err=io.StringIO()) == 0
    log = tmp_path / "deep.jsonl"
    log.write_text(exported.getvalue())
    assert main(["import", "--store", target, str(log)], out=io.StringIO(), err=io.StringIO()) == 0
    again = io.StringIO()
    assert main(["export", "--store", target, "deep"], out=again, err=io.StringIO()) == 0
    assert again.getvalue() == exported.getvalue()
    assert read_session_log(again.getvalue().encode()).events[0].data == nested(MAX_DEPTH)


# Per-session state is bounded (issue 13): idle sessions give theirs back.

CACHE = 20


@pytest.mark.anyio
@pytest.mark.parametrize("backend", BACKENDS)
async def test_idle_session_state_is_evicted_past_its_bound(backend: str, tmp_path: Path) -> None:
    url = await emptied_backend_url(backend, tmp_path)
    store = await open_store(url, create=True, session_cache=CACHE)
    service = HistoryService(Settings(store_url=url, session_cache=CACHE), store)
    latest = PageQuery(through=None, before=None, max_messages=5, max_bytes=1 << 20)
    fixed = PageQuery(through=0, before=None, max_messages=5, max_bytes=1 << 20)
    try:
        for k in range(10 * CACHE):
            await service.create("local", SessionHeader(id=f"s{k}", createdAt=k))
            await service.append("local", f"s{k}", [plain(0, "user/message", {"text": f"q{k}"}, surfaceOp="append")])
            await service.page("local", f"s{k}", None, latest)
            await service.page("local", f"s{k}", None, fixed)
        assert service.sessions_known <= CACHE
        assert service.sessions_appending == 0 and service.hub.followed == 0
        kept = {"JsonlStore": ("_states", "_headers", "_owners"), "SqlStore": ("_tails",)}
        for name in kept.get(type(store).__name__, ()):
            assert len(getattr(store, name)) <= CACHE, name
        if isinstance(store, JsonlStore):
            assert len(store._locks) == 0
        # An evicted session reads back whole, and takes an append where it left off.
        await service.append("local", "s0", [plain(1)])
        page = decode_page((await service.page("local", "s0", None, latest)).body.join())
        assert [(e.seq, e.type) for e in iter_page_events(page.records)] == [(0, "user/message"), (1, "turn/start")]
    finally:
        await store.close()


@pytest.mark.anyio
async def test_eviction_never_breaks_an_open_follow(tmp_path: Path) -> None:
    settings = Settings(store_url=f"jsonl:///{tmp_path / 'logs'}", session_cache=1, ping_interval=0.5)
    with serve_in_thread(settings) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            for name in ("followed", "other0", "other1", "other2"):
                assert (await client.post("/v1/sessions", json={"id": name, "createdAt": 0})).status_code == 201
            async with client.stream("GET", "/v1/sessions/followed/follow") as stream:
                lines = stream.aiter_lines()
                assert await anext(lines) == "retry: 1000"
                while not (await anext(lines)).startswith("data: "):
                    pass
                # Other sessions push the followed one's state out of every cache.
                for name in ("other0", "other1", "other2"):
                    body = encode({"events": [plain(0)]})
                    assert (await client.post(f"/v1/sessions/{name}/events", content=body, headers=JSON)).is_success
                    assert (await client.get(f"/v1/sessions/{name}/page")).status_code == 200
                body = encode({"events": [plain(0, "note", {"n": 7})]})
                assert (await client.post("/v1/sessions/followed/events", content=body, headers=JSON)).is_success
                async for line in lines:
                    if line.startswith("data: "):
                        assert json.loads(line[6:])["data"] == {"n": 7}
                        break


@pytest.mark.anyio
async def test_a_caller_who_may_not_read_a_session_costs_no_record_read(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    reads: list[str] = []
    original = store.read_page

    async def counted(session_id: str, **bounds: Any) -> Any:
        reads.append(session_id)
        return await original(session_id, **bounds)

    monkeypatch.setattr(store, "read_page", counted)
    latest = PageQuery(through=None, before=None, max_messages=5, max_bytes=1 << 20)
    await HistoryService(Settings(), store).create("bob", SessionHeader(id="b", createdAt=0))
    # A fresh service knows no owner yet, and one that has learnt it: neither reads bob's records for alice.
    for service in (HistoryService(Settings(), store),) * 2:
        with pytest.raises(NotOwner) as refused:
            await service.page("alice", "b", None, latest)
        assert ERRORS[type(refused.value)].status == 404
    assert reads == []
    await HistoryService(Settings(), store).page("bob", "b", None, latest)
    assert reads == ["b"]

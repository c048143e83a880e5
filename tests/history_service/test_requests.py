"""Request bodies are measured before they are decoded: a hostile body costs bounded memory and blocks no one."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from codec import encode
from history_service.answers import ERRORS
from history_service.errors import InvalidParameter
from history_service.requests import cursor_for, list_cursor
from persistence import SessionKey
from testing.events import plain
from testing.servers import ServerProcess

JSON = {"Content-Type": "application/json"}
MEMBERS = 4_000_000


def f1_body() -> bytes:
    """The hostile review's F1: one packed text-chunks row of 4,000,000 empty texts, about 20 MB."""
    head = b'{"events":[{"type":"text-chunks","seq0":1,"time0":0,"data":{"turn":1,"step":1,"index":0,"dt":['
    return head + b"0," * (MEMBERS - 1) + b'0],"texts":[' + b'"",' * (MEMBERS - 1) + b'""]}}]}'


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    if not Path("/proc/self/status").exists():
        pytest.skip("peak RSS is read from /proc, which this system lacks")
    process = ServerProcess(f"sqlite:///{tmp_path / 'h.db'}")
    process.start()
    try:
        yield process
    finally:
        process.stop()


async def refuse_while_serving(url: str, body: bytes, headers: dict[str, str]) -> tuple[httpx.Response, list[int]]:
    """Send ``body`` and, until its answer arrives, keep asking /healthz; returns both."""
    answered = anyio.Event()
    health: list[int] = []
    result: dict[str, httpx.Response] = {}

    async def hostile(client: httpx.AsyncClient) -> None:
        result["response"] = await client.post("/v1/sessions/s/events", content=body, headers=headers)
        answered.set()

    async def probe(client: httpx.AsyncClient) -> None:
        while not answered.is_set():
            health.append((await client.get("/healthz")).status_code)

    async with httpx.AsyncClient(base_url=url, timeout=60) as one, httpx.AsyncClient(base_url=url, timeout=60) as two:
        async with anyio.create_task_group() as group:
            group.start_soon(hostile, one)
            group.start_soon(probe, two)
    return result["response"], health


@pytest.mark.parametrize(
    ("name", "body", "headers"),
    [
        ("f1-row", f1_body(), JSON),
        ("f1-row-gzip", gzip.compress(f1_body(), compresslevel=1), {**JSON, "Content-Encoding": "gzip"}),
        ("ten-million-items", b'{"events":[' + b"1," * 9_999_999 + b"1]}", JSON),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_a_hostile_body_is_refused_in_bounded_memory_while_others_are_served(
    server: ServerProcess, name: str, body: bytes, headers: dict[str, str]
) -> None:
    """F1: counted before anything is expanded; peak RSS grows by less than 50 MB; /healthz keeps answering."""
    with httpx.Client(base_url=server.url, timeout=60) as http:
        assert http.post("/v1/sessions", json={"id": "s", "createdAt": 0}).status_code == 201
        assert http.post("/v1/sessions/s/events", json={"events": [encode_plain(0)]}).status_code == 201
        assert http.get("/v1/sessions/s/page").status_code == 200
    assert server.process is not None
    before = peak_rss(server.process.pid)
    response, health = anyio.run(refuse_while_serving, server.url, body, headers)
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] in ("batch_too_large", "body_too_large")
    assert health and set(health) == {200}
    assert peak_rss(server.process.pid) - before < 50 * 1024 * 1024
    with httpx.Client(base_url=server.url) as http:
        assert http.get("/v1/sessions/s").json()["headSeq"] == 0


def encode_plain(seq: int) -> object:
    return json.loads(encode(plain(seq)))


def test_a_listing_cursor_round_trips_and_a_forged_one_is_refused() -> None:
    key = SessionKey(1_700_000_000_000, "{{sessionId}}.child-1")
    assert list_cursor(cursor_for(key)) == key
    assert list_cursor(None) is None
    huge = cursor_for(SessionKey(2**63 + 5, "s"))
    nul = cursor_for(SessionKey(0, "a\x00b"))
    for forged in ["", "!!", "W10", "WyJhIiwiYiJd", cursor_for(key)[:-3], huge, nul, cursor_for(SessionKey(0, ".."))]:
        with pytest.raises(InvalidParameter) as refused:
            list_cursor(forged)
        answer = ERRORS[type(refused.value)]
        assert answer.status == 400 and answer.code == "invalid_parameter"

"""The client against the service's own wire: golden page files and every corpus log decode exactly."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import msgspec
import pytest

from codec import SessionHeader, encode, read_session_log
from history_client import AsyncHistoryClient, read_page
from history_service.app import create_app
from persistence import MemoryStore
from testing.asgi import serving
from testing.corpus import corpus_logs
from testing.golden import GOLDEN_DIR
from testing.seeding import SCENARIOS, SEEDED, seed

pytestmark = pytest.mark.anyio


class GoldenLine(msgspec.Struct):
    path: str
    status: int
    body: msgspec.Raw


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_golden_pages_decode_to_the_fixture_events(scenario: str) -> None:
    store = MemoryStore()
    lines = (GOLDEN_DIR / "service" / f"{scenario}.pages.jsonl").read_bytes().splitlines()
    async with serving(create_app(SEEDED, store=store)) as http:
        await seed(http, **SCENARIOS[scenario])
        for line in lines:
            golden = msgspec.json.decode(line, type=GoldenLine)
            body = bytes(golden.body)
            if body.startswith(b'{"sha256"'):
                # Large bodies are pinned by hash: fetch the same page and prove it is the pinned one.
                body = (await http.get(golden.path)).content
                assert encode({"sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}) == bytes(golden.body)
            url = urlsplit(golden.path)
            query = {name: int(values[0]) for name, values in parse_qs(url.query).items()}
            page = read_page(body, through=query.get("through"), before=query.get("before"))
            session_id = url.path.split("/")[-2]
            stored = await store.read_events(session_id, page.from_seq, page.to_seq)
            assert list(page.events()) == stored, golden.path


@pytest.mark.parametrize("path", corpus_logs())
async def test_every_corpus_log_decodes_exactly_through_the_client(path: Path) -> None:
    log = read_session_log(path.read_bytes())
    store = MemoryStore()
    child = None
    session = log.header.id
    if log.header.origin == "subagent" and isinstance(log.header.parentSession, str):
        await store.create_session(SessionHeader(id=log.header.parentSession, createdAt=0))
        session, child = log.header.parentSession, log.header.id
    await store.create_session(log.header)
    await store.append(log.header.id, log.events)
    async with serving(create_app(SEEDED, store=store)) as http:
        client = AsyncHistoryClient(http_client=http, max_messages=3)
        assert [event async for event in client.iter_history(session, child=child)] == log.events
        pages = [page async for page in client.iter_pages(session, child=child)]
        assert [event for page in reversed(pages) for event in page.events()] == log.events
        assert encode(log.events) == encode([event for page in reversed(pages) for event in page.events()])

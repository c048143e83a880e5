"""Paging backwards from the head to seq 0, through HTTP, rebuilds exactly the stored events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from codec import Event, check_page, decode_page, iter_page_events, read_session_log
from history_service.app import create_app
from persistence import HistoryStore, MemoryStore
from testing.asgi import serving
from testing.corpus import corpus_logs
from testing.seeding import SEEDED, seed

pytestmark = pytest.mark.anyio


async def page_back(
    client: httpx.AsyncClient, store: HistoryStore, base: str, session_id: str, max_messages: int
) -> list[Event]:
    head = await store.head_seq(session_id)
    response = await client.get(f"{base}?through={head}&maxMessages={max_messages}")
    events: list[Event] = []
    while True:
        assert response.status_code == 200, response.text
        page = check_page(decode_page(response.content))
        assert page.toSeq == (head + 1 if not events else events[0].seq)
        cuts = await store.page_cuts(session_id, to_seq=page.toSeq, max_messages=max_messages)
        assert page.fromSeq in cuts, (page.fromSeq, cuts)
        events = list(iter_page_events(page.records)) + events
        if not page.hasMore:
            return events
        response = await client.get(f"{base}?before={page.fromSeq}&maxMessages={max_messages}")


SCENARIOS: list[dict[str, Any]] = [
    {"scenario": "multi-turn", "seed": 4, "turns": 6},
    {"scenario": "compaction", "seed": 5},
    {"scenario": "subagent", "seed": 6},
    {"scenario": "dsh-synthetic"},
]


@pytest.mark.parametrize("request_body", SCENARIOS, ids=[s["scenario"] for s in SCENARIOS])
@pytest.mark.parametrize("max_messages", [1, 4])
async def test_paging_back_is_exact_for_every_scenario(
    client: httpx.AsyncClient, store: HistoryStore, request_body: dict[str, Any], max_messages: int
) -> None:
    for session in await seed(client, **request_body):
        session_id = session["id"]
        if ".child-" in session_id:
            parent = session_id.rsplit(".", 1)[0] if "grandchild" in session_id else session_id.split(".child-")[0]
            base = f"/v1/sessions/{parent}/subagents/{session_id}/page"
        else:
            base = f"/v1/sessions/{session_id}/page"
        stored = await store.read_events(session_id, 0, session["headSeq"] + 1)
        assert await page_back(client, store, base, session_id, max_messages) == stored


@pytest.mark.parametrize("path", corpus_logs())
async def test_paging_back_is_exact_for_every_corpus_log(path: Path) -> None:
    log = read_session_log(path.read_bytes())
    store = MemoryStore()
    await store.create_session(log.header)
    await store.append(log.header.id, log.events)
    async with serving(create_app(SEEDED, store=store)) as client:
        if log.header.origin == "subagent" and isinstance(log.header.parentSession, str):
            from codec import SessionHeader

            await store.create_session(SessionHeader(id=log.header.parentSession, createdAt=0))
            base = f"/v1/sessions/{log.header.parentSession}/subagents/{log.header.id}/page"
        else:
            base = f"/v1/sessions/{log.header.id}/page"
        for max_messages in (1, 3):
            assert await page_back(client, store, base, log.header.id, max_messages) == log.events

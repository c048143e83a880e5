"""`history_service.cli.demo`: the demo reads as a coding agent's session, and round-trips exactly."""

from __future__ import annotations

import json

import pytest

from codec import Event, encode
from history_service.cli.demo import DEMO_CHILD, DEMO_SESSION, demo_sessions
from persistence import MemoryStore, subagent_parent

pytestmark = pytest.mark.anyio


def tool_results(events: list[Event]) -> list[tuple[str, bool]]:
    out = []
    for event in events:
        if event.type == "tool/result":
            (nested,) = event.data["message"]["content"]
            out.append(("".join(part["text"] for part in nested["content"]), nested["isError"]))
    return out


def test_the_demo_is_a_coding_agent_at_work() -> None:
    (parent, events), (child, child_events) = demo_sessions()
    assert parent.id == DEMO_SESSION and child.id == DEMO_CHILD and subagent_parent(child) == DEMO_SESSION
    calls = [e.data["name"] for e in events if e.type == "tool/call"]
    assert calls == ["bash", "read_file", "bash", "subagent", "bash"]
    results = tool_results(events)
    assert [error for _, error in results] == [False, False, True, False, False]
    assert "assert 5 == 15" in results[2][0] and DEMO_CHILD in results[3][0]
    users = [e for e in events if e.type == "user/message"]
    assert [u.data["source"]["kind"] for u in users] == ["user", "plugin"]
    final = [e for e in events if e.type == "assistant/message"][-1]
    assert [block["type"] for block in final.data["content"]] == ["text"] and "Fixed." in final.data["content"][0][
        "text"
    ]
    assert all(e.data.get("usage") for e in events if e.type == "assistant/message")
    arguments = [
        json.loads(block["arguments"])
        for e in events
        if e.type == "assistant/message"
        for block in e.data["content"]
        if block["type"] == "tool-call"
    ]
    assert arguments[1] == {"path": "shop/cart.py"}
    assert tool_results(child_events)


async def test_the_demo_round_trips_through_a_store_exactly() -> None:
    store = MemoryStore()
    for header, events in demo_sessions():
        await store.create_session(header)
        await store.append(header.id, events)
        assert [encode(e) for e in await store.read_events(header.id, 0, len(events))] == [encode(e) for e in events]
    assert [h.id for h in await store.children(DEMO_SESSION)] == [DEMO_CHILD]

"""Golden wire contracts (DeerFlow-style) for every seeder scenario, the same on every backend.

Page goldens hold the exact response bodies (bodies over 64 KiB by SHA-256 and length);
follow goldens hold frames reduced to ``[event, sorted data keys]``. Regenerate with
``HISTORY_WRITE_GOLDEN=1``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from codec import encode
from history_service.service import HistoryService
from tests.codec.helpers import plain
from tests.conftest import GOLDEN_DIR, write_golden
from tests.history_service.conftest import seed

pytestmark = pytest.mark.anyio

JSON = {"Content-Type": "application/json"}

GOLDEN = GOLDEN_DIR / "service"
INLINE_LIMIT = 64 * 1024
EXPLICIT = (GOLDEN_DIR / "codec" / "text-turn.events.jsonl").read_bytes().splitlines()

SCENARIOS: dict[str, dict[str, Any]] = {
    "multi-turn": {"scenario": "multi-turn", "seed": 1, "turns": 4},
    "subagent": {"scenario": "subagent", "seed": 2},
    "compaction": {"scenario": "compaction", "seed": 3},
    "explicit": {
        "scenario": "explicit",
        "header": json.loads(EXPLICIT[0]),
        "events": [json.loads(line) for line in EXPLICIT[1:]],
    },
    "dsh-synthetic": {"scenario": "dsh-synthetic"},
}


def queries(head: int) -> list[str]:
    middle = head // 2
    return [
        "",
        "?maxMessages=1",
        "?maxMessages=3",
        "?maxBytes=2000",
        f"?before={middle}",
        f"?through={middle}&maxMessages=2",
        "?before=0",
    ]


def golden_line(path: str, response: httpx.Response) -> bytes:
    body = response.content
    if len(body) > INLINE_LIMIT:
        body = encode({"sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)})
    return b'{"path":%b,"status":%d,"body":%b}\n' % (encode(path), response.status_code, body)


def check(name: str, data: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    path = GOLDEN / name
    if write_golden():
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        with capsys.disabled():
            print(f"\nHISTORY_WRITE_GOLDEN=1: wrote tests/golden/service/{name}")
    assert data == path.read_bytes(), f"{name} differs from its golden"


def page_paths(sessions: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """The page address of each seeded session: children through their parent."""
    out = []
    for session in sessions:
        session_id = session["id"]
        if ".child-1.grandchild" in session_id:
            parent, _, child = session_id.rpartition(".grandchild")[0], None, session_id
            out.append((f"/v1/sessions/{parent}/subagents/{child}/page", session["headSeq"]))
        elif ".child-" in session_id:
            parent = session_id.split(".child-")[0]
            out.append((f"/v1/sessions/{parent}/subagents/{session_id}/page", session["headSeq"]))
        else:
            out.append((f"/v1/sessions/{session_id}/page", session["headSeq"]))
    return out


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_page_responses_match_golden(
    client: httpx.AsyncClient, scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = await seed(client, **SCENARIOS[scenario])
    lines = []
    for base, head in page_paths(sessions):
        for query in queries(head):
            response = await client.get(base + query)
            assert response.status_code == 200, response.text
            lines.append(golden_line(base + query, response))
    check(f"{scenario}.pages.jsonl", b"".join(lines), capsys)


def shapes(body: bytes) -> list[list[Any]]:
    """Frames reduced to [event name, sorted data keys]; comments and retry lines are dropped."""
    out: list[list[Any]] = []
    event = None
    for line in body.decode().split("\n"):
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: ") :])
            out.append([event, sorted(data) if isinstance(data, dict) else None])
    return out


async def follow_body(client: httpx.AsyncClient, url: str, head: int, headers: dict[str, str] | None = None) -> bytes:
    service: HistoryService = client.app_state["service"]  # type: ignore[attr-defined]
    result: dict[str, bytes] = {}

    async def read() -> None:
        result["body"] = (await client.get(url, headers=headers or {})).content

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        with anyio.fail_after(10):
            while service.hub.channel("multi-turn-1").followers == 0:
                await anyio.sleep(0.01)
        extra = [plain(head + 1 + k, "note", {"k": k}) for k in range(3)]
        response = await client.post(
            "/v1/sessions/multi-turn-1/events", content=encode({"events": extra}), headers=JSON
        )
        assert response.status_code == 201
        with anyio.fail_after(10):
            while service.hub.channel("multi-turn-1").next_seq <= head + 3:
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)
        service.hub.close()
    return result["body"]


async def test_follow_frames_match_golden(client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]) -> None:
    (session,) = await seed(client, **SCENARIOS["multi-turn"])
    head = session["headSeq"]
    fresh = await follow_body(client, "/v1/sessions/multi-turn-1/follow", head)
    assert fresh.startswith(b"retry: ")
    check("multi-turn.follow-fresh.json", encode(shapes(fresh)), capsys)


async def test_resumed_follow_frames_match_golden(
    client: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]
) -> None:
    (session,) = await seed(client, **SCENARIOS["multi-turn"])
    head = session["headSeq"]
    resumed = await follow_body(client, "/v1/sessions/multi-turn-1/follow", head, {"Last-Event-ID": str(head - 5)})
    ids = [int(line[4:]) for line in resumed.decode().split("\n") if line.startswith("id: ")]
    assert ids == list(range(head - 4, head + 4))
    check("multi-turn.follow-resume.json", encode(shapes(resumed)), capsys)


def test_golden_files_are_ours() -> None:
    """Goldens hold only our seeded data: nothing from the corpus."""
    for path in sorted(Path(GOLDEN).glob("*")):
        assert b"33333333-3333-4333" not in path.read_bytes()

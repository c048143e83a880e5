"""Golden wire contracts (DeerFlow-style) for every seeder scenario, the same on every backend.

Page goldens hold the exact response bodies (bodies over 64 KiB by SHA-256 and length);
follow goldens hold frames reduced to ``[event, sorted data keys]``. Regenerate with
``HISTORY_WRITE_GOLDEN=1``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from codec import encode, read_header
from persistence import HistoryStore
from testing.corpus import CORPUS_ENV, corpus_dir
from testing.events import plain
from testing.golden import GOLDEN_DIR, check_golden
from testing.seeding import SCENARIOS, SEEDED, seed
from testing.servers import ThreadServer, serve_in_thread
from testing.wire import id_seq

pytestmark = pytest.mark.anyio

JSON = {"Content-Type": "application/json"}

GOLDEN = GOLDEN_DIR / "service"
INLINE_LIMIT = 64 * 1024


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
    check_golden(GOLDEN / f"{scenario}.pages.jsonl", b"".join(lines), capsys)


def shapes(body: bytes, incarnation: str) -> list[list[Any]]:
    """Frames reduced to [id, event name, sorted data keys]; comments and retry lines are dropped.

    An id is kept as ``<incarnation>:<seq>`` with the session's incarnation (random) named so.
    """
    out: list[list[Any]] = []
    event, frame_id = None, None
    for line in body.decode().split("\n"):
        if line.startswith("id: "):
            frame_id = line[len("id: ") :].replace(f"{incarnation}:", "<incarnation>:")
        elif line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: ") :])
            out.append([frame_id, event, sorted(data) if isinstance(data, dict) else None])
            frame_id = None
    return out


async def follow_body(base: str, path: str, head: int, headers: dict[str, str] | None = None) -> bytes:
    """The frames of one follow stream: its opening, then three events appended once it is open, to their end."""
    body = bytearray()
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        async with http.stream("GET", path, headers=headers or {}) as response:
            lines = response.aiter_lines()
            async for line in lines:
                body += line.encode() + b"\n"
                if line.startswith("event: "):
                    break  # the stream is open: the opening frame (or the first resumed event) is here
            extra = [plain(head + 1 + k, "note", {"k": k}) for k in range(3)]
            appended = await http.post(
                "/v1/sessions/multi-turn-1/events", content=encode({"events": extra}), headers=JSON
            )
            assert appended.status_code == 201
            async for line in lines:
                body += line.encode() + b"\n"
                if line.startswith("id: ") and id_seq(line[4:]) == head + 3:
                    body += (await anext(lines)).encode() + b"\n"  # its event line
                    body += (await anext(lines)).encode() + b"\n"  # its data line
                    break
    return bytes(body)


@pytest.fixture
def live(store: HistoryStore) -> Iterator[ThreadServer]:
    with serve_in_thread(SEEDED, store=store) as server:
        yield server


async def seed_live(base: str) -> tuple[int, str]:
    """The seeded session's head and incarnation."""
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        sessions = await seed(http, **SCENARIOS["multi-turn"])
        header = (await http.get("/v1/sessions/multi-turn-1")).json()["header"]
    head: int = sessions[0]["headSeq"]
    return head, header["incarnation"]


async def test_follow_frames_match_golden(live: ThreadServer, capsys: pytest.CaptureFixture[str]) -> None:
    head, incarnation = await seed_live(live.url)
    fresh = await follow_body(live.url, "/v1/sessions/multi-turn-1/follow", head)
    assert fresh.startswith(b"retry: ")
    check_golden(GOLDEN / "multi-turn.follow-fresh.json", encode(shapes(fresh, incarnation)), capsys)


async def test_resumed_follow_frames_match_golden(live: ThreadServer, capsys: pytest.CaptureFixture[str]) -> None:
    head, incarnation = await seed_live(live.url)
    path = "/v1/sessions/multi-turn-1/follow"
    resumed = await follow_body(live.url, path, head, {"Last-Event-ID": f"{incarnation}:{head - 5}"})
    ids = [line[4:] for line in resumed.decode().split("\n") if line.startswith("id: ")]
    assert ids == [f"{incarnation}:{seq}" for seq in range(head - 4, head + 4)]
    check_golden(GOLDEN / "multi-turn.follow-resume.json", encode(shapes(resumed, incarnation)), capsys)


def test_golden_files_are_ours() -> None:
    """Goldens hold only our seeded data: no session id of the corpus, read where it lives (HISTORY_CORPUS_DIR)."""
    root = corpus_dir()
    if root is None or not root.is_dir():
        pytest.skip(f"{CORPUS_ENV} is not set to the corpus; this check reads its session ids there")
    ids = {read_header(log.read_bytes().split(b"\n", 1)[0]).id.encode() for log in root.glob("*/session*.jsonl")}
    assert ids
    for path in sorted(Path(GOLDEN).glob("*")):
        held = path.read_bytes()
        assert not [found for found in ids if len(found) > 8 and b"{{" not in found and found in held], path

"""The JavaScript client's `search` against the Python client's, on one real service.

Both clients walk every page of the same searches (their cursors passed back as each was
given), with the filters each takes: the hits must be the same, page for page, and so must
the service's refusals (a query with no word in it, and a JSONL store, which keeps no index).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from history_client import HistoryClient, ServiceError
from history_service.settings import Settings
from testing.servers import serve_in_thread

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH (scripts/with-node installs Debian's nodejs)")

INDEX = (Path(__file__).resolve().parents[2] / "clients" / "js" / "src" / "index.js").as_uri()
# Each search of the list on stdin, every page of it: its pages, or the error that refused it.
WALK = f"""
import {{ readFileSync }} from "node:fs";
import {{ HistoryClient, ServiceError }} from {json.dumps(INDEX)};
const {{ url, searches }} = JSON.parse(readFileSync(0, "utf8"));
const client = new HistoryClient(url);
const out = [];
for (const {{ q, options }} of searches) {{
  const pages = [];
  try {{
    let cursor;
    do {{
      const page = await client.search(q, {{ ...options, cursor }});
      pages.push(page);
      cursor = page.nextCursor ?? undefined;
    }} while (cursor !== undefined);
    out.push({{ pages }});
  }} catch (error) {{
    if (!(error instanceof ServiceError)) throw error;
    out.push({{ error: [error.status, error.code, error.message] }});
  }}
}}
console.log(JSON.stringify(out));
"""
T0 = 1_700_000_000_000
SEARCHES: list[dict[str, Any]] = [
    {"q": "rate limit", "options": {"limit": 2}},
    {"q": '"rate limit"', "options": {"limit": 1, "state": "closed"}},
    {"q": "rate limit", "options": {"limit": 3, "state": "open", "since": T0 + 2, "until": T0 + 40}},
    {"q": "retr*", "options": {}},
    {"q": "限流", "options": {"limit": 2}},
    {"q": "nothing-like-it", "options": {}},
    {"q": "!!", "options": {}},
]


def said(seq: int, text: str) -> dict[str, Any]:
    return {"type": "user/message", "seq": seq, "time": T0 + seq, "data": {"text": text}}


def delta(seq: int, text: str) -> dict[str, Any]:
    chunk = {"type": "text-delta", "index": 0, "text": text}
    return {"type": "assistant/chunk", "seq": seq, "time": T0 + seq, "data": {"turn": 1, "step": 1, "chunk": chunk}}


def fill(url: str) -> None:
    """Sessions whose passages match the searches above in several ways: open and closed, a child, streamed text."""
    with httpx.Client(base_url=url, timeout=30) as http:
        for n in range(5):
            session = f"s{n}"
            assert http.post("/v1/sessions", json={"id": session, "createdAt": T0 + n}).status_code == 201
            events = [said(0, f"Why does the rate limit trip {n}?"), delta(1, "The rate "), delta(2, f"limit: {n}/s")]
            events += [said(3 + k, f"retry {k}: the limit of the rate, 限流 {k}") for k in range(n * 10)]
            assert http.post(f"/v1/sessions/{session}/events", json={"events": events}).status_code == 201
        assert http.post("/v1/sessions/s1/close").status_code == 200
        child = {"id": "s2.w", "createdAt": T0, "parentSession": "s2", "origin": "subagent"}
        assert http.post("/v1/sessions", json=child).status_code == 201
        events = [said(0, "A worker asks about the rate limit"), said(1, "retrying 限流")]
        assert http.post("/v1/sessions/s2.w/events", json={"events": events}).status_code == 201


def javascript(url: str) -> list[Any]:
    assert NODE is not None
    given = json.dumps({"url": url, "searches": SEARCHES})
    run = subprocess.run(
        [NODE, "--input-type=module", "-e", WALK], input=given, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    found: list[Any] = json.loads(run.stdout)
    return found


def python(url: str) -> list[Any]:
    out: list[Any] = []
    with HistoryClient(url) as client:
        for search in SEARCHES:
            pages = []
            cursor = None
            try:
                while True:
                    page = client.search(search["q"], cursor=cursor, **search["options"])
                    pages.append(msgspec.to_builtins(page))
                    if page.next_cursor is None:
                        break
                    cursor = page.next_cursor
            except ServiceError as exc:
                out.append({"error": [exc.status_code, exc.code, exc.message]})
                continue
            out.append({"pages": pages})
    return out


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path_factory.mktemp('search') / 'h.db'}"
    with serve_in_thread(Settings(store_url=store)) as server:
        fill(server.url)
        yield server.url


def test_every_page_of_every_search_is_the_same_from_both_clients(service: str) -> None:
    wanted = python(service)
    assert javascript(service) == wanted
    # The searches reach what they are meant to: pages walked by cursor, a child's hit, filters, a refusal.
    walked = dict(zip((s["q"] + json.dumps(s["options"]) for s in SEARCHES), wanted, strict=True))
    assert len(walked['rate limit{"limit": 2}']["pages"]) >= 3
    hits = [hit for page in walked['rate limit{"limit": 2}']["pages"] for hit in page["hits"]]
    assert {"session": "s2.w", "parent": "s2"}.items() <= next(h for h in hits if h["session"] == "s2.w").items()
    assert {hit["kind"] for hit in hits} == {"user", "assistant"}
    closed_pages = walked['"rate limit"{"limit": 1, "state": "closed"}']["pages"]
    closed = [hit["session"] for page in closed_pages for hit in page["hits"]]
    assert closed and set(closed) == {"s1"}
    assert walked["!!{}"]["error"][:2] == [400, "invalid_parameter"]
    assert walked["nothing-like-it{}"] == {"pages": [{"hits": [], "nextCursor": None}]}


def test_a_store_without_an_index_refuses_both_clients_alike(tmp_path: Path) -> None:
    with serve_in_thread(Settings(store_url=f"jsonl:///{tmp_path}")) as server:
        wanted = python(server.url)
        assert javascript(server.url) == wanted
    # The query with no word is refused as any bad parameter is; every other one, as the store cannot search.
    refusals = [tuple(answer["error"][:2]) for answer in wanted]
    assert refusals == [(400, "invalid_parameter") if s["q"] == "!!" else (501, "search_unsupported") for s in SEARCHES]

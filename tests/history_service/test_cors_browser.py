"""CORS in real Chromium, its web security on: a UI on a second local origin reads and follows the service.

The page (``cross_origin/index.html``) is served by a static server on another port of
127.0.0.1, with the JavaScript client beside it. From the origin the service allows, it
reads a seeder session's whole history and follows it across a SIGKILL and restart of the
server, with no token and with one; every event arrives exactly once, byte for byte what the
Python client reads. From an origin the service does not allow, the browser refuses the
answers. The browser's own ``EventSource`` follows across a restart too. Each test leaves
a screenshot in ``test-output/``.
"""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from codec import encode
from history_client import HistoryClient
from history_service.assets import JS_CLIENT_DIR
from testing.browser import checked_page, launch, missing_reason, screenshot
from testing.servers import ServerProcess, serve_directory

if missing_reason() is not None:
    pytest.skip(missing_reason() or "", allow_module_level=True)

from playwright.sync_api import Browser, Page  # noqa: E402

PAGE = Path(__file__).resolve().parent / "cross_origin" / "index.html"
TIMEOUT_MS = 30_000
TOKEN, PRINCIPAL = "cors-token", "alice"


@dataclass
class Origins:
    allowed: str
    other: str


@dataclass
class Service:
    server: ServerProcess
    auth: str
    token: str | None = None
    principal: str | None = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def page_auth(self) -> dict[str, str]:
        """What the page passes to its HistoryClient."""
        return {"token": self.token, "principal": self.principal} if self.token and self.principal else {}

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "X-Principal": f"{self.principal}"} if self.token else {}


@pytest.fixture(scope="module")
def origins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Origins]:
    """The page and the client, served by two static servers: two origins that differ only by port."""
    root = tmp_path_factory.mktemp("origin")
    shutil.copy(PAGE, root / "index.html")
    (root / "lib").symlink_to(JS_CLIENT_DIR, target_is_directory=True)
    with serve_directory(root) as allowed, serve_directory(root) as other:
        yield Origins(allowed, other)


@pytest.fixture(scope="module", params=["none", "token"])
def service(
    request: pytest.FixtureRequest, origins: Origins, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    env = {
        "HISTORY_ENABLE_TEST_SEED": "1",
        "HISTORY_CORS_ORIGINS": origins.allowed,
        # Resumes come quickly after the restart: EventSource waits what `retry:` says.
        "HISTORY_RETRY_MS": "100",
    }
    token = request.param == "token"
    if token:
        env.update({"HISTORY_AUTH": "token", "HISTORY_SERVICE_TOKENS": TOKEN})
    server = ServerProcess(f"sqlite:///{tmp_path_factory.mktemp('cors') / 'cors.db'}", env=env)
    made = Service(server, request.param, TOKEN if token else None, PRINCIPAL if token else None)
    made.server.start()
    try:
        assert httpx.get(f"{made.url}/v1/sessions").status_code == (401 if token else 200)
        yield made
    finally:
        made.server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch() as opened:
        yield opened


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    with checked_page(browser, f"cors-{request.node.name}") as opened:
        yield opened


def open_page(page: Page, origin: str) -> None:
    page.goto(f"{origin}/index.html")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)


def seed(service: Service, session: str) -> None:
    body = {"scenario": "multi-turn", "seed": 1, "turns": 4, "sessionId": session}
    response = httpx.post(f"{service.url}/v1/test-only/seed", json=body, headers=service.headers, timeout=60)
    assert response.status_code == 201, response.text


def stored(service: Service, session: str) -> list[str]:
    """The session's events as the Python client reads them, each in the service's canonical JSON."""
    with HistoryClient(service.url, token=service.token, principal=service.principal) as history:
        return [encode(event).decode() for event in history.iter_history(session)]


def append_deltas(service: Service, session: str, seqs: range) -> None:
    for seq in seqs:
        chunk = {"type": "text-delta", "index": 0, "text": f"{seq} "}
        event = {"type": "assistant/chunk", "seq": seq, "time": seq, "data": {"turn": 9, "step": 1, "chunk": chunk}}
        response = httpx.post(
            f"{service.url}/v1/sessions/{session}/events", json={"events": [event]}, headers=service.headers
        )
        assert response.status_code == 201, response.text


def last_seq(events: list[str]) -> int:
    return int(json.loads(events[-1])["seq"])


def test_a_page_on_an_allowed_origin_reads_the_whole_history(service: Service, origins: Origins, page: Page) -> None:
    session = f"read-{service.auth}"
    seed(service, session)
    open_page(page, origins.allowed)
    read = page.evaluate("([base, s, auth]) => readHistory(base, s, auth)", [service.url, session, service.page_auth])
    expected = stored(service, session)
    assert len(expected) > 10
    assert read == expected


def test_a_page_on_an_allowed_origin_follows_across_a_sigkill_and_restart(
    service: Service, origins: Origins, page: Page
) -> None:
    session = f"follow-{service.auth}"
    seed(service, session)
    head = last_seq(stored(service, session))
    open_page(page, origins.allowed)
    page.evaluate("([base, s, auth]) => follow(base, s, auth)", [service.url, session, service.page_auth])
    reached = """n => window.followed.error !== null || window.followed.events.some((e) => JSON.parse(e).seq === n)"""
    page.wait_for_function(reached, arg=head, timeout=TIMEOUT_MS)

    append_deltas(service, session, range(head + 1, head + 2))
    page.wait_for_function(reached, arg=head + 1, timeout=TIMEOUT_MS)
    # Appended and acknowledged, then the server dies: the page may not have heard of all of them.
    append_deltas(service, session, range(head + 2, head + 11))
    service.server.restart(signal.SIGKILL)
    append_deltas(service, session, range(head + 11, head + 21))
    page.wait_for_function(reached, arg=head + 20, timeout=TIMEOUT_MS)
    followed = page.evaluate("() => { window.followed.stop(); return window.followed; }")

    assert followed["error"] is None
    events = followed["events"]
    first = int(json.loads(events[0])["seq"])
    # The snapshot's tail page, then every event after it: once each, in order, as stored.
    assert 0 < first <= head
    assert events == [event for event in stored(service, session) if json.loads(event)["seq"] >= first]
    assert last_seq(events) == head + 20
    assert "lost" in followed["changes"], followed["changes"]


def test_a_page_on_another_origin_is_refused_by_the_browser(service: Service, origins: Origins, page: Page) -> None:
    session = f"refused-{service.auth}"
    seed(service, session)
    blocked: list[str] = []
    page.on("console", lambda message: blocked.append(message.text) if "CORS policy" in message.text else None)
    open_page(page, origins.other)
    outcome = page.evaluate("([base, s, auth]) => tryRefused(base, s, auth)", [service.url, session, service.page_auth])
    # The browser, not the page, decides: a network error, whatever the service answered.
    assert outcome == {"fetch": "TypeError: Failed to fetch", "client": "TransportError (TypeError)"}
    assert blocked and all(origins.other in line for line in blocked), blocked
    screenshot(page, f"cors-refused-from-{service.auth}")
    # The same page, from the origin the service allows, is answered.
    open_page(page, origins.allowed)
    assert page.evaluate("([base, s, auth]) => readHistory(base, s, auth)", [service.url, session, service.page_auth])


@pytest.mark.parametrize("service", ["none"], indirect=True)
def test_a_native_event_source_follows_across_a_sigkill_and_restart(
    service: Service, origins: Origins, page: Page
) -> None:
    session = "event-source"
    seed(service, session)
    head = last_seq(stored(service, session))
    open_page(page, origins.allowed)
    # after=-1 replays the whole session; a resume then sends Last-Event-ID, which wins over it.
    page.evaluate("url => listen(url)", f"{service.url}/v1/sessions/{session}/follow?after=-1")
    reached = "n => window.listened.seqs.includes(n)"
    page.wait_for_function(reached, arg=head, timeout=TIMEOUT_MS)

    append_deltas(service, session, range(head + 1, head + 11))
    service.server.restart(signal.SIGKILL)
    append_deltas(service, session, range(head + 11, head + 21))
    page.wait_for_function(reached, arg=head + 20, timeout=TIMEOUT_MS)
    listened: dict[str, Any] = page.evaluate("() => { window.listened.stop(); return window.listened; }")

    assert listened["seqs"] == list(range(head + 21))
    # Every id names the session's one incarnation (§5.1): what EventSource sent back on its reconnect.
    incarnation = listened["ids"][0].split(":")[0]
    assert listened["ids"] == [f"{incarnation}:{seq}" for seq in listened["seqs"]]
    assert [json.loads(event)["seq"] for event in stored(service, session)] == listened["seqs"]
    # The stream dropped and the browser opened it again, resuming where it was.
    assert listened["drops"] >= 1 and listened["opens"] >= 2, listened
    assert listened["frames"] == []

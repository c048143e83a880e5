"""The viewer in real Chromium, against a real service process with the test seeder.

What the viewer renders is compared with what the store holds: the same conversation items (a run
of one block's deltas joined, a user message, a tool result, a turn marker), in seq order, each
exactly once, after scrolling up through every page; live tokens in place, across a SIGKILL
and restart of the server; a burst of 3,000 live events whole, in order, with its hidden
markers, in at most one DOM update an animation frame; the same items whatever the response's
content coding, and from a packed follow (gzip, a records frame a write) as from an unpacked one,
live events of every kind; token auth from the login form; "session ended", when a live session is
closed and on opening a closed one; and "session deleted", when a live session is deleted.
What a chat UI has, on the seeded scenarios and the demo: each item's time
(a ``<time datetime>`` of its first event's time) and each step's token usage (the numbers its
usage chunk gives), outside the body; copy buttons that copy exactly the text shown; find with
its count; jump-to-end; the dark scheme.
Each test leaves a screenshot in ``test-output/``. The harness's other events (cards, raw rows, the
bookkeeping accounted on the items) and the real corpus are tests/history_service/test_viewer_timeline.py's.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
import pytest
from msgspec import UNSET
from prometheus_client.parser import text_string_to_metric_families

from codec import Event, ReplaceOp, encode
from history_client import HistoryClient
from history_service.cli.demo import DEMO_CHILD, DEMO_SESSION
from testing.browser import OUTPUT_DIR, checked_page, launch, missing_reason, screenshot
from testing.docs_screenshots import SCHEMES, VIEWPORT, make_screenshots
from testing.seeding import SCENARIOS
from testing.servers import ServerProcess

if missing_reason() is not None:
    pytest.skip(missing_reason() or "", allow_module_level=True)

from playwright.sync_api import Browser, Page  # noqa: E402

JSON = {"Content-Type": "application/json"}
SEED_ENV = {"HISTORY_ENABLE_TEST_SEED": "1"}
TIMEOUT_MS = 60_000
DELTA_KINDS = {"text-delta": "text", "reasoning-delta": "reasoning", "tool-call-delta": "tool"}

Item = tuple[str, int, int, str]
Seeded = tuple[str, dict[str, list[dict[str, Any]]]]


def event_item(event: dict[str, Any]) -> tuple[str, str, int, str] | None:
    """The viewer's rule (history_service/viewer/timeline.js), written again from the protocol's shapes."""
    data, seq, kind = event["data"], event["seq"], event["type"]
    if kind == "assistant/chunk" and isinstance(data, dict) and isinstance(data.get("chunk"), dict):
        chunk = data["chunk"]
        block = DELTA_KINDS.get(chunk.get("type"))
        text = chunk.get("argumentsDelta" if block == "tool" else "text")
        if block is None or not isinstance(text, str):
            return None
        key = json.dumps([block, data.get("turn"), data.get("step"), chunk.get("index"), chunk.get("id")])
        return block, key, seq, text
    if kind == "user/message" and isinstance(data, dict):
        text = data["text"] if isinstance(data.get("text"), str) else message_text(data.get("content"))
        source = data.get("source")
        if isinstance(source, dict) and isinstance(source.get("kind"), str) and source["kind"] != "user":
            return "context", "", seq, text
        return "user", "", seq, text
    if kind == "assistant/message" and isinstance(data, dict) and not event.get("sourceEventSeqs"):
        message = data["message"] if isinstance(data.get("message"), dict) else data
        text = message["text"] if isinstance(message.get("text"), str) else message_text(message.get("content"))
        return "assistant", "", seq, text
    if kind == "tool/result" and isinstance(data, dict):
        message = data["message"] if isinstance(data.get("message"), dict) else data
        return "tool-result", "", seq, message_text(message.get("content"))
    if kind == "turn/start" and isinstance(data, dict) and "turn" in data:
        return "turn", "", seq, str(data["turn"])
    return None


def message_text(content: Any) -> str:
    """Text parts, and the text nested in tool-result parts (the harness's shape), one a line."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part, dict) and part.get("type") == "tool-result":
            texts.append(message_text(part.get("content")))
    return "\n".join(texts)


def expected_items(events: list[Event]) -> list[Item]:
    items: list[list[Any]] = []
    last_key = ""
    for event in events:
        found = event_item(msgspec.json.decode(encode(event)))
        if found is None:
            continue
        kind, key, seq, text = found
        if key and key == last_key and items[-1][2] + 1 == seq:
            items[-1][2] = seq
            items[-1][3] += text
        else:
            items.append([kind, seq, seq, text])
        last_key = key
    return [(kind, seq0, seq1, text) for kind, seq0, seq1, text in items]


def hidden_items(events: list[Event], items: list[Item]) -> dict[int, str]:
    """Which items an edit (``conversationOp``) or a replacement (``surfaceOp``) hides, by first seq."""
    ranges = []
    for event in events:
        op = event.conversationOp if event.conversationOp is not UNSET else event.surfaceOp
        if isinstance(op, ReplaceOp):
            ranges.append((op.start, op.end, "edited out" if event.conversationOp is not UNSET else "replaced"))
    hidden = {}
    for _, seq0, seq1, _ in items:
        why = next((why for start, end, why in ranges if seq0 <= end and seq1 >= start), None)
        if why is not None:
            hidden[seq0] = why
    return hidden


# The conversation's items: what `event_item` describes. The harness's other events are cards and raw
# rows, and its bookkeeping is accounted on these items (tests/history_service/test_viewer_timeline.py).
CONVERSATION = ", ".join(
    f"#timeline > .item[data-kind='{kind}']"
    for kind in ("text", "reasoning", "tool", "user", "assistant", "tool-result", "context", "turn")
)


def rendered_hidden(page: Page) -> dict[int, str]:
    marked = page.evaluate(
        f'() => Array.from(document.querySelectorAll("{CONVERSATION}")).filter((el) => el.dataset.hidden)'
        ".map((el) => [Number(el.dataset.seq0), el.dataset.hidden])"
    )
    return dict(marked)


def rendered_items(page: Page) -> list[Item]:
    rows = page.evaluate(
        f"""() => Array.from(document.querySelectorAll("{CONVERSATION}")).map((el) => [
            el.dataset.kind, Number(el.dataset.seq0), Number(el.dataset.seq1), el.querySelector('.body').textContent,
        ])"""
    )
    return [tuple(row) for row in rows]


def stored_events(url: str, session: str, child: str | None = None, **client: Any) -> list[Event]:
    with HistoryClient(url, **client) as history:
        return list(history.iter_history(session, child=child))


SCROLL_UP = (
    "() => { const s = document.getElementById('scroller'); s.scrollTop = 0; s.dispatchEvent(new Event('scroll')); }"
)
TIMELINE = "() => ({...document.getElementById('timeline').dataset})"
# An older page has arrived (or there is none left): the oldest seq shown moved.
MOVED = """before => {
    const shown = document.getElementById('timeline').dataset;
    return shown.loading !== 'true' && (shown.from !== before || shown.hasMore !== 'true');
}"""


def scroll_to_start(page: Page) -> int:
    """Scroll to the top until the first page is loaded; returns how many times that took."""
    loads = 0
    while (shown := page.evaluate(TIMELINE))["hasMore"] == "true":
        page.evaluate(SCROLL_UP)
        page.wait_for_function(MOVED, arg=shown["from"], timeout=TIMEOUT_MS)
        loads += 1
    return loads


def settle(page: Page) -> None:
    """Wait until the viewer has no page load in flight."""
    page.wait_for_function("() => document.getElementById('timeline').dataset.loading !== 'true'")


def open_viewer(page: Page, url: str, query: str) -> None:
    page.goto(f"{url}/viewer/?{query}")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch() as opened:
        yield opened


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    # A short window, so that a few pages fill it and the rest come by scrolling.
    with checked_page(browser, request.node.name) as opened:
        yield opened


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """One service with every seeder scenario; the sessions each one made."""
    server = ServerProcess(f"sqlite:///{tmp_path_factory.mktemp('viewer') / 'viewer.db'}", env=SEED_ENV)
    server.start()
    try:
        made = {}
        for name, body in SCENARIOS.items():
            response = httpx.post(f"{server.url}/v1/test-only/seed", json=body, timeout=300)
            assert response.status_code == 201, response.text
            made[name] = response.json()["sessions"]
        yield server.url, made
    finally:
        server.stop()


def viewer_cases() -> list[tuple[str, int]]:
    return [(name, 0) for name in SCENARIOS] + [("subagent", 1), ("subagent", 3)]


def seeded_session(made: dict[str, list[dict[str, Any]]], scenario: str, which: int) -> tuple[str, str | None]:
    """One session a scenario made, and its parent when it is a subagent child."""
    session = made[scenario][which]["id"]
    return session, session.rsplit(".", 1)[0] if which else None


def seeded_query(session: str, parent: str | None, page_size: int) -> str:
    return f"session={session}&pageSize={page_size}" + (f"&parent={parent}" if parent else "")


@pytest.mark.parametrize(("scenario", "which"), viewer_cases())
def test_the_viewer_renders_every_stored_event_once_in_order(
    seeded: Seeded, page: Page, scenario: str, which: int
) -> None:
    url, made = seeded
    session, parent = seeded_session(made, scenario, which)
    open_viewer(page, url, seeded_query(session, parent, 1))
    first = rendered_items(page)
    loads = scroll_to_start(page)

    shown = rendered_items(page)
    events = stored_events(url, parent or session, session if parent else None)
    assert shown == expected_items(events)
    hidden = hidden_items(events, shown)
    assert rendered_hidden(page) == hidden
    if scenario == "compaction":
        assert set(hidden.values()) == {"edited out", "replaced"}
    # Older pages went above newer ones: what the first page showed is the end of the list.
    assert shown[len(shown) - len(first) :] == first
    seqs = [seq for _, seq0, seq1, _ in shown for seq in (seq0, seq1)]
    assert seqs == sorted(seqs) and len({seq0 for _, seq0, _, _ in shown}) == len(shown)
    if scenario == "multi-turn":
        assert loads >= 2, "one message a page should take several scrolls"


def test_scrolling_up_keeps_the_reader_in_place(seeded: Seeded, page: Page) -> None:
    url, made = seeded
    session = made["multi-turn"][0]["id"]
    open_viewer(page, url, f"session={session}&pageSize=1")
    settle(page)
    shown = page.evaluate(TIMELINE)
    assert shown["hasMore"] == "true"
    seq0 = page.locator("#timeline > .item").first.get_attribute("data-seq0")
    # Scroll to the top and note where the first item is, before the older page can arrive.
    top = page.evaluate(
        """seq0 => {
            const scroller = document.getElementById('scroller');
            scroller.scrollTop = 0;
            const y = document.querySelector(`#timeline > .item[data-seq0='${seq0}']`).getBoundingClientRect().y;
            scroller.dispatchEvent(new Event('scroll'));
            return y;
        }""",
        seq0,
    )
    page.wait_for_function(MOVED, arg=shown["from"], timeout=TIMEOUT_MS)
    same = page.locator(f"#timeline > .item[data-seq0='{seq0}']")
    assert same.count() == 1
    moved = same.bounding_box()
    assert moved is not None
    # The new rows went above: the item the reader saw is still where it was on screen.
    assert abs(moved["y"] - top) <= 2, (top, moved)


def delta(seq: int, text: str) -> dict[str, Any]:
    chunk = {"type": "text-delta", "index": 0, "text": text}
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": 1_700_000_000_000 + seq,
        "data": {"turn": 1, "step": 1, "chunk": chunk},
    }


def append(url: str, session: str, events: list[dict[str, Any]], headers: dict[str, str] | None = None) -> None:
    response = httpx.post(f"{url}/v1/sessions/{session}/events", json={"events": events}, headers=headers, timeout=30)
    assert response.status_code in (200, 201), response.text


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(f"sqlite:///{tmp_path / 'live.db'}", env={"HISTORY_RETRY_MS": "100"})
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_live_tokens_appear_in_place_and_resume_after_a_restart(live_server: ServerProcess, page: Page) -> None:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": "live", "createdAt": 0}).status_code == 201
    user = {"id": "u", "role": "user", "content": [{"type": "text", "text": "count to forty"}]}
    append(url, "live", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}])
    append(url, "live", [{"type": "user/message", "seq": 1, "time": 1, "data": user, "surfaceOp": "append"}])
    open_viewer(page, url, "session=live")
    page.evaluate(
        """() => {
            window.statusHistory = [];
            const status = document.getElementById('status');
            new MutationObserver(() => window.statusHistory.push(status.dataset.state))
                .observe(status, {attributes: true, attributeFilter: ['data-state']});
        }"""
    )
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)

    tokens = [f"{n} " for n in range(40)]
    for k in range(20):
        append(url, "live", [delta(2 + k, tokens[k])])
    page.wait_for_function("() => document.getElementById('timeline').dataset.cursor === '21'", timeout=TIMEOUT_MS)
    block = page.locator("#timeline > .item.text")
    assert block.count() == 1 and block.locator(".body").text_content() == "".join(tokens[:20])
    handle = block.element_handle()

    live_server.restart(signal.SIGKILL)
    for k in range(20, 40):
        append(url, "live", [delta(2 + k, tokens[k])])
    # A message that no delta built is shown itself.
    said = {"message": {"role": "assistant", "content": [{"type": "text", "text": "done counting"}]}}
    append(url, "live", [{"type": "assistant/message", "seq": 42, "time": 42, "data": said, "surfaceOp": "append"}])
    page.wait_for_function("() => document.getElementById('timeline').dataset.cursor === '42'", timeout=TIMEOUT_MS)
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)

    # The tokens joined the very element that showed the first ones: in place, none twice, none missing.
    assert handle.evaluate("el => el.isConnected")
    assert handle.evaluate("el => el.querySelector('.body').textContent") == "".join(tokens)
    assert rendered_items(page) == expected_items(stored_events(url, "live"))
    assert rendered_items(page)[-1] == ("assistant", 42, 42, "done counting")
    assert "reconnecting" in page.evaluate("() => window.statusHistory")


def is_follow(address: str) -> bool:
    return urlsplit(address).path.endswith("/follow")


def watch_follows(page: Page) -> list[str]:
    """The address of every follow stream the page opens from now on (a packed one has a query)."""
    follows: list[str] = []
    page.on("request", lambda request: follows.append(request.url) if is_follow(request.url) else None)
    return follows


def close(url: str, session: str) -> dict[str, Any]:
    response = httpx.post(f"{url}/v1/sessions/{session}/close", timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_live_session_shows_it_ended_when_it_is_closed(live_server: ServerProcess, page: Page) -> None:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": "ending", "createdAt": 0}).status_code == 201
    append(url, "ending", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}])
    follows = watch_follows(page)
    open_viewer(page, url, "session=ending")
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
    append(url, "ending", [delta(1 + k, f"{k} ") for k in range(5)])
    assert close(url, "ending")["headSeq"] == 5
    page.wait_for_selector("#status[data-state='ended']", timeout=TIMEOUT_MS)
    page.wait_for_function("() => document.getElementById('timeline').dataset.cursor === '5'", timeout=TIMEOUT_MS)
    assert page.text_content("#status") == "session ended"
    assert rendered_items(page) == expected_items(stored_events(url, "ending"))
    # The end is final: the stream was not opened again.
    assert len(follows) == 1, follows
    screenshot(page, "session-ended")


def test_a_closed_session_opens_as_ended(live_server: ServerProcess, page: Page) -> None:
    url = live_server.url
    with httpx.Client(timeout=30) as http:
        assert http.post(f"{url}/v1/sessions", json={"id": "done", "createdAt": 0}).status_code == 201
        child = {"id": "done.w", "createdAt": 1, "parentSession": "done", "origin": "subagent"}
        assert http.post(f"{url}/v1/sessions", json=child).status_code == 201
    append(url, "done", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}])
    append(url, "done.w", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 2}}])
    closed_at = close(url, "done")["closedAt"]
    follows = watch_follows(page)
    open_viewer(page, url, "session=done")
    page.wait_for_selector("#status[data-state='ended']", timeout=TIMEOUT_MS)
    assert page.text_content("#status") == "session ended"
    shown_at = page.evaluate("ms => `closed ${new Date(ms).toLocaleString()}`", closed_at)
    assert page.get_attribute("#status", "title") == shown_at
    assert rendered_items(page) == [("turn", 0, 0, "1")]
    # Its header said it was closed, and its tail page reached the final head: nothing to follow.
    assert follows == []
    # Closing a parent leaves its children open: the child is followed live.
    open_viewer(page, url, "parent=done&session=done.w")
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
    assert rendered_items(page) == [("turn", 0, 0, "2")]


def delete(url: str, session: str) -> None:
    response = httpx.delete(f"{url}/v1/sessions/{session}", timeout=30)
    assert response.status_code == 204, response.text


def test_a_live_session_shows_it_was_deleted_when_it_is_deleted(live_server: ServerProcess, page: Page) -> None:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": "going", "createdAt": 0}).status_code == 201
    append(url, "going", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}])
    follows = watch_follows(page)
    open_viewer(page, url, "session=going")
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
    append(url, "going", [delta(1 + k, f"{k} ") for k in range(5)])
    page.wait_for_function("() => document.getElementById('timeline').dataset.cursor === '5'", timeout=TIMEOUT_MS)
    shown = rendered_items(page)
    assert shown == [("turn", 0, 0, "1"), ("text", 1, 5, "0 1 2 3 4 ")]

    delete(url, "going")
    page.wait_for_selector("#status[data-state='deleted']", timeout=TIMEOUT_MS)
    assert page.text_content("#status") == "session deleted"
    # What was shown stays, with no error over it; the delete is final: the stream was not opened again.
    assert rendered_items(page) == shown
    assert page.is_hidden("#error")
    assert len(follows) == 1, follows
    screenshot(page, "session-deleted")


@pytest.fixture(scope="module")
def coded_session(seeded: Seeded) -> tuple[str, str, list[Item]]:
    url, made = seeded
    session = made["multi-turn"][0]["id"]
    return url, session, expected_items(stored_events(url, session))


@pytest.mark.parametrize("coding", ["identity", "gzip", "br", "zstd"])
def test_every_response_coding_renders_the_same(
    coded_session: tuple[str, str, list[Item]], page: Page, coding: str
) -> None:
    url, session, expected = coded_session
    codings: list[str] = []
    # Chromium chooses Accept-Encoding itself (zstd first); a context-wide header overrides it.
    page.context.set_extra_http_headers({"Accept-Encoding": coding})
    page.on(
        "response",
        lambda response: (
            codings.append(response.headers.get("content-encoding", "identity"))
            if "/v1/sessions/" in response.url
            else None
        ),
    )
    open_viewer(page, url, f"session={session}&pageSize=2")
    scroll_to_start(page)
    assert rendered_items(page) == expected
    # Pages under 1 KiB go uncoded; every larger one came in the coding asked for.
    assert coding in codings and set(codings) <= {coding, "identity"}, codings


def test_token_auth_through_the_login_form(tmp_path: Path, page: Page) -> None:
    env = {**SEED_ENV, "HISTORY_AUTH": "token", "HISTORY_SERVICE_TOKENS": "right-token"}
    server = ServerProcess(f"sqlite:///{tmp_path / 'auth.db'}", env=env)
    server.start()
    try:
        auth = {"Authorization": "Bearer right-token", "X-Principal": "alice"}
        response = httpx.post(f"{server.url}/v1/test-only/seed", json=SCENARIOS["multi-turn"], headers=auth)
        assert response.status_code == 201, response.text
        session = response.json()["sessions"][0]["id"]

        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.goto(f"{server.url}/viewer/?session={session}")
        page.wait_for_selector("#login:not([hidden])", timeout=TIMEOUT_MS)
        page.fill("#token", "wrong-token")
        page.fill("#principal", "alice")
        page.click("#login button[type=submit]")
        page.wait_for_selector("#error:not([hidden])", timeout=TIMEOUT_MS)
        message = page.text_content("#error") or ""
        assert "token was refused" in message and "401" in message, message
        assert page.is_visible("#login")

        page.fill("#token", "right-token")
        page.click("#login button[type=submit]")
        page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
        page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
        expected = expected_items(stored_events(server.url, session, token="right-token", principal="alice"))
        assert rendered_items(page)[-1] == expected[-1]
        scroll_to_start(page)
        assert rendered_items(page) == expected
        # The token travels only in the Authorization header: never in an address, never in the page.
        assert requested and not [address for address in requested if "token" in address]
        assert "right-token" not in page.content()
        assert page.evaluate("() => sessionStorage.getItem('history.token')") == "right-token"
    finally:
        server.stop()


BURST = 3_000
BURST_BATCH = 100


def user_message(seq: int, surface_op: Any = "append") -> dict[str, Any]:
    data = {"id": f"u{seq}", "role": "user", "content": [{"type": "text", "text": f"message {seq}"}]}
    return {"type": "user/message", "seq": seq, "time": seq, "data": data, "surfaceOp": surface_op}


def replace(start: int, end: int) -> dict[str, Any]:
    return {"op": "replace", "start": start, "end": end}


BURSTS = {
    "user messages": lambda seq: user_message(seq),
    # Each hides seqs far past the session's head: a range to index that matches no item.
    "replacements that match nothing": lambda seq: user_message(seq, replace(10**9 + seq, 10**9 + seq)),
    # Each hides the item before it: every item but the last is marked as the burst arrives.
    "replacements of the one before": lambda seq: user_message(seq, replace(seq - 1, seq - 1)),
    "text deltas": lambda seq: delta(seq, f"{seq} "),
}

# Counts the timeline's DOM updates (one mutation-observer callback each) and, at each, the
# animation frames so far: a viewer that applies live events once a frame has no more updates
# than frames, however many events a burst brought.
COUNT_UPDATES = """() => {
    const seen = window.burstSeen = {frames: 0, updates: 0, framesAtLastUpdate: 0};
    const tick = () => { seen.frames++; requestAnimationFrame(tick); };
    requestAnimationFrame(tick);
    const all = {childList: true, subtree: true, characterData: true, attributes: true};
    new MutationObserver(() => { seen.updates++; seen.framesAtLastUpdate = seen.frames; })
        .observe(document.getElementById('timeline'), all);
}"""
AT_BOTTOM = """() => {
    const s = document.getElementById('scroller');
    return s.scrollTop + s.clientHeight >= s.scrollHeight - 4;
}"""


@pytest.mark.parametrize("burst", list(BURSTS))
def test_a_live_burst_appears_whole_and_in_order_one_update_a_frame(
    live_server: ServerProcess, page: Page, burst: str
) -> None:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": "burst", "createdAt": 0}).status_code == 201
    append(url, "burst", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}])
    open_viewer(page, url, "session=burst")
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
    page.evaluate(COUNT_UPDATES)

    events = [BURSTS[burst](1 + k) for k in range(BURST)]
    with httpx.Client(timeout=30) as http:
        for k in range(0, BURST, BURST_BATCH):
            response = http.post(f"{url}/v1/sessions/burst/events", json={"events": events[k : k + BURST_BATCH]})
            assert response.status_code in (200, 201), response.text
    page.wait_for_function(
        f"() => document.getElementById('timeline').dataset.cursor === '{BURST}'", timeout=10 * TIMEOUT_MS
    )

    shown = rendered_items(page)
    stored = stored_events(url, "burst")
    assert shown == expected_items(stored)
    assert len(shown) == (2 if burst == "text deltas" else 1 + BURST)
    assert [seq0 for _, seq0, _, _ in shown] == sorted({seq0 for _, seq0, _, _ in shown})
    hidden = hidden_items(stored, shown)
    assert rendered_hidden(page) == hidden
    # The turn marker and every message but the last, or none.
    assert len(hidden) == (BURST if burst == "replacements of the one before" else 0)
    # Live follow: the reader was at the bottom, and still is.
    assert page.evaluate(AT_BOTTOM)
    seen = page.evaluate("() => window.burstSeen")
    assert 0 < seen["updates"] <= seen["framesAtLastUpdate"] + 1, seen


def rendered_results(page: Page) -> list[tuple[int, str, bool]]:
    """Each tool result on screen: its seq, its text, and whether it is marked as an error."""
    rows = page.evaluate(
        """() => Array.from(document.querySelectorAll('#timeline > .item.tool-result')).map((el) => [
            Number(el.dataset.seq0), el.querySelector('.body').textContent, el.dataset.error === 'true',
        ])"""
    )
    return [tuple(row) for row in rows]


TOOL_KINDS = ("tool", "tool-result")
PARENT = "gen-parent"
CHILD = "0f0f0f0f-1111-4222-8333-444444444444"


def harness_result(seq: int, call: str, text: str, error: bool) -> dict[str, Any]:
    part = {"type": "tool-result", "toolCallId": call, "content": [{"type": "text", "text": text}], "isError": error}
    message = {"source": {"kind": "tool", "callId": call}, "content": [part], "role": "user", "id": f"r{seq}"}
    return {"type": "tool/result", "seq": seq, "time": seq, "data": {"turn": 1, "step": 1, "message": message}}


def generated_events() -> list[dict[str, Any]]:
    """A turn as the harness writes one: context, reasoning, text, a subagent call, results (one failed)."""
    args = {"description": "count", "prompt": "Count to three.", "run_in_background": True}
    arguments = json.dumps(args)
    user = {"id": "u", "role": "user", "content": [{"type": "text", "text": "hello"}], "source": {"kind": "user"}}
    context: dict[str, Any] = {"id": "c", "role": "user", "source": {"kind": "plugin", "plugin": "system-prompt"}}
    context["content"] = [{"type": "text", "text": "Current runtime context."}]

    def chunk(seq: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"type": "assistant/chunk", "seq": seq, "time": seq, "data": {"turn": 1, "step": 1, "chunk": body}}

    call = {"type": "tool-call-delta", "index": 2, "id": "call-1", "name": "subagent"}
    return [
        {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}},
        {"type": "user/message", "seq": 1, "time": 1, "data": user, "surfaceOp": "append"},
        {"type": "user/message", "seq": 2, "time": 2, "data": context, "surfaceOp": "append"},
        chunk(3, {"type": "reasoning-delta", "index": 0, "text": "I should delegate."}),
        chunk(4, {"type": "text-delta", "index": 1, "text": "Delegating now."}),
        chunk(5, {**call, "argumentsDelta": arguments[:20]}),
        chunk(6, {**call, "argumentsDelta": arguments[20:]}),
        harness_result(7, "call-1", f"started subagent {CHILD}", False),
        harness_result(8, "call-2", "Error: tool call aborted", True),
    ]


@pytest.fixture
def generated(live_server: ServerProcess) -> str:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": PARENT, "createdAt": 0}).status_code == 201
    append(url, PARENT, generated_events())
    child = {"id": CHILD, "createdAt": 1, "parentSession": PARENT, "origin": "subagent"}
    assert httpx.post(f"{url}/v1/sessions", json=child).status_code == 201, "child"
    append(url, CHILD, [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 7}}])
    return url


def test_generated_events_show_results_errors_labels_arguments_context_and_child_links(
    generated: str, page: Page
) -> None:
    url = generated
    open_viewer(page, url, f"session={PARENT}")
    events = stored_events(url, PARENT)
    assert rendered_items(page) == expected_items(events)
    assert rendered_results(page) == [
        (7, f"started subagent {CHILD}", False),
        (8, "Error: tool call aborted", True),
    ]
    failed = page.locator("#timeline > .item.tool-result[data-error='true']")
    assert failed.locator(".label").text_content() == "Tool result: error"
    assert page.locator("#timeline > .item.text .label").text_content() == "Assistant"
    reasoning = page.locator("#timeline > details.item.reasoning")
    assert reasoning.locator("summary").text_content() == "Reasoning"
    assert reasoning.get_attribute("open") is None
    context = page.locator("#timeline > details.item.context")
    assert context.locator("summary").text_content() == "Context: plugin"
    assert context.get_attribute("open") is None and page.locator("#timeline > .item.user").count() == 1
    tool = page.locator("#timeline > .item.tool")
    arguments = {"description": "count", "prompt": "Count to three.", "run_in_background": True}
    assert tool.locator("pre.pretty").text_content() == json.dumps(arguments, indent=2)
    assert tool.locator("pre.pretty").is_visible() and not tool.locator("pre.body").is_visible()
    # The call and its result both link to the child; the link opens it, read through its parent.
    for kind in TOOL_KINDS:
        page.locator(f"#timeline > .item.{kind} a.child[data-child='{CHILD}']").first.wait_for(timeout=TIMEOUT_MS)
    screenshot(page, "generated-parent")
    page.locator("#timeline > .item.tool a.child").click()
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    assert page.text_content("#title") == f"{PARENT} › {CHILD}"
    assert rendered_items(page) == [("turn", 0, 0, "7")]


def test_a_live_tool_call_is_formatted_once_its_arguments_parse(live_server: ServerProcess, page: Page) -> None:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": "args", "createdAt": 0}).status_code == 201
    append(url, "args", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}])
    open_viewer(page, url, "session=args")
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
    call = {"type": "tool-call-delta", "index": 0, "id": "c", "name": "bash"}
    for seq, piece in ((1, '{"command": '), (2, '"ls -la"}')):
        chunk = {**call, "argumentsDelta": piece}
        append(
            url,
            "args",
            [{"type": "assistant/chunk", "seq": seq, "time": seq, "data": {"turn": 1, "step": 1, "chunk": chunk}}],
        )
        page.wait_for_function(f"() => document.getElementById('timeline').dataset.cursor === '{seq}'")
        tool = page.locator("#timeline > .item.tool")
        if seq == 1:
            assert tool.locator("pre.body").is_visible() and not tool.locator("pre.pretty").is_visible()
    assert tool.locator("pre.body").text_content() == '{"command": "ls -la"}'
    assert tool.locator("pre.pretty").text_content() == '{\n  "command": "ls -la"\n}'
    assert tool.locator("pre.pretty").is_visible()


T0 = 1_700_000_000_000


def mixed_appends() -> list[list[dict[str, Any]]]:
    """Live appends of every kind the viewer shows, as one batch or one event a request: delta runs of each
    block (a run split across requests too), a tool call and its result, usage, messages, turn markers."""

    def chunk(seq: int, body: dict[str, Any], turn: int = 1) -> dict[str, Any]:
        return {
            "type": "assistant/chunk",
            "seq": seq,
            "time": T0 + seq,
            "data": {"turn": turn, "step": 1, "chunk": body},
        }

    call = {"type": "tool-call-delta", "index": 2, "id": "call-1"}
    said = {"message": {"role": "assistant", "content": [{"type": "text", "text": "listed"}]}}
    return [
        [chunk(seq, {"type": "reasoning-delta", "index": 0, "text": f"think {seq} "}) for seq in range(2, 6)],
        *[[chunk(seq, {"type": "text-delta", "index": 1, "text": f"say {seq} "})] for seq in range(6, 10)],
        [
            chunk(10, {**call, "name": "bash", "argumentsDelta": '{"command": '}),
            chunk(11, {**call, "argumentsDelta": '"ls'}),
            chunk(12, {**call, "argumentsDelta": ' -la"}'}),
            harness_result(13, "call-1", "a\nb", False),
            chunk(14, {"type": "usage", "usage": {"inputTokens": 12, "outputTokens": 34}}),
            {"type": "assistant/message", "seq": 15, "time": T0 + 15, "data": said, "surfaceOp": "append"},
            {"type": "note", "seq": 16, "time": T0 + 16, "data": {"shown": False}},
        ],
        [{"type": "turn/start", "seq": 17, "time": T0 + 17, "data": {"turn": 2}}],
        [user_message(18)],
        [chunk(seq, {"type": "text-delta", "index": 0, "text": f"t{seq} "}, turn=2) for seq in range(19, 24)],
        *[[chunk(seq, {"type": "text-delta", "index": 0, "text": f"t{seq} "}, turn=2)] for seq in range(24, 27)],
        [harness_result(27, "call-2", "Error: aborted", True)],
    ]


def follow_frames(url: str) -> dict[str, float]:
    """The service's count of follow frames written, by kind."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    families = text_string_to_metric_families(text)
    return {s.labels["frame"]: s.value for f in families for s in f.samples if s.name == "history_follow_frames_total"}


def test_a_packed_gzip_follow_renders_the_same_timeline_as_an_unpacked_one(
    live_server: ServerProcess, browser: Browser
) -> None:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": "mixed", "createdAt": 0}).status_code == 201
    append(url, "mixed", [{"type": "turn/start", "seq": 0, "time": T0, "data": {"turn": 1}}, user_message(1)])
    follows: list[tuple[str, str | None]] = []
    with (
        checked_page(browser, "follow-packed") as packed,
        checked_page(browser, "follow-unpacked") as unpacked,
    ):
        for page, query in ((packed, "session=mixed"), (unpacked, "session=mixed&packed=0")):
            page.on(
                "response",
                lambda response: (
                    follows.append((response.url, response.headers.get("content-encoding")))
                    if is_follow(response.url)
                    else None
                ),
            )
            open_viewer(page, url, query)
            page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
        appends = mixed_appends()
        with httpx.Client(timeout=30) as http:
            for batch in appends:
                response = http.post(f"{url}/v1/sessions/mixed/events", json={"events": batch})
                assert response.status_code == 201, response.text
        for page in (packed, unpacked):
            page.wait_for_function("() => document.getElementById('timeline').dataset.cursor === '27'")

        expected = expected_items(stored_events(url, "mixed"))
        assert rendered_items(packed) == rendered_items(unpacked) == expected
        assert packed.inner_text("#timeline") == unpacked.inner_text("#timeline")
        assert packed.locator("#timeline > .item.tool pre.pretty").text_content() == '{\n  "command": "ls -la"\n}'
    # One stream each, both in gzip. The unpacked one got a frame an event; the packed one a frame a write at most.
    assert sorted((("packed=1" in address), coding) for address, coding in follows) == [(False, "gzip"), (True, "gzip")]
    frames = follow_frames(url)
    assert frames["event"] == 26 and 0 < frames["records"] <= len(appends), frames


def test_children_the_parents_events_never_name_are_listed_and_open(live_server: ServerProcess, page: Page) -> None:
    url = live_server.url
    with httpx.Client(timeout=30) as http:
        assert http.post(f"{url}/v1/sessions", json={"id": "quiet", "createdAt": 0}).status_code == 201
        for k in range(3):
            child = {"id": f"quiet.w{k}", "createdAt": 10 + k, "parentSession": "quiet", "origin": "subagent"}
            assert http.post(f"{url}/v1/sessions", json=child).status_code == 201
        grandchild = {"id": "quiet.w1.g", "createdAt": 20, "parentSession": "quiet.w1", "origin": "subagent"}
        assert http.post(f"{url}/v1/sessions", json=grandchild).status_code == 201
    append(url, "quiet", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}])
    append(url, "quiet.w1", [{"type": "turn/start", "seq": 0, "time": 5, "data": {"turn": 7}}])
    open_viewer(page, url, "session=quiet")
    page.wait_for_selector("#subagents[data-count='3']", timeout=TIMEOUT_MS)
    # Oldest first, as the subagents were started; the parent's one event names none of them.
    assert page.locator("#subagents a").all_text_contents() == ["quiet.w0", "quiet.w1", "quiet.w2"]
    screenshot(page, "subagents-listed")
    page.click("#subagents a:text-is('quiet.w1')")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    assert page.text_content("#title") == "quiet › quiet.w1"
    assert rendered_items(page) == [("turn", 0, 0, "7")]
    # The child's own child is listed at the child, and a session with none shows no list.
    page.wait_for_selector("#subagents[data-count='1']", timeout=TIMEOUT_MS)
    assert page.locator("#subagents a").all_text_contents() == ["quiet.w1.g"]
    open_viewer(page, url, "parent=quiet&session=quiet.w2")
    page.wait_for_selector("#subagents[data-count='0']", state="attached", timeout=TIMEOUT_MS)
    assert not page.is_visible("#subagents")


# --- What a chat UI has: times, token usage, copy, find, jump-to-end, the dark scheme ---

BLOCK_KINDS = ("text", "reasoning", "tool")
FOLDED_KINDS = ("reasoning", "context")
USAGE_FIELDS = ("inputTokens", "outputTokens", "cacheReadTokens", "reasoningTokens")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Y2K_MS = 946_684_800_000

# Each item's <time datetime> and usage line (its data-* numbers and its text), by first seq.
RENDERED_META = f"""() => Array.from(document.querySelectorAll("{CONVERSATION}")).map((el) => {{
    const time = el.querySelector(':scope > .meta > time');
    const usage = el.querySelector(':scope > .meta > .usage');
    return [
        Number(el.dataset.seq0),
        time ? [time.dateTime, time.textContent, time.title] : null,
        usage ? [{{...usage.dataset}}, usage.textContent] : null,
    ];
}})"""


def iso(ms: int) -> str:
    """What ``new Date(ms).toISOString()`` says, for a time within years 0-9999."""
    at = EPOCH + timedelta(milliseconds=ms)
    return f"{at:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def expected_times(events: list[Event], items: list[Item]) -> dict[int, str | None]:
    """Each item's time: its first event's, as ISO; a log that recorded none reads as time 0, and any time
    before 2000 is no time either."""
    times = {event.seq: event.time for event in events}
    return {seq0: iso(times[seq0]) if times[seq0] >= Y2K_MS else None for _, seq0, _, _ in items}


def usage_fields(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    numbers = {k: v for k, v in value.items() if k in USAGE_FIELDS and type(v) in (int, float)}
    return {k: str(v) for k, v in numbers.items()}


def expected_usage(events: list[Event], items: list[Item]) -> dict[int, dict[str, str]]:
    """Which item shows which token counts, by first seq, the viewer's rule written again.

    A step's usage chunk (the last, if several) goes on the step's last block before it that is
    not folded away (reasoning is), else on its last block; a step with no block shown shows
    none. An assistant message shown itself shows the usage it carries.
    """
    steps: dict[int, tuple[Any, Any]] = {}
    usage: dict[tuple[Any, Any], tuple[int, dict[str, str]]] = {}
    shown: dict[int, dict[str, str]] = {}
    for event in events:
        value = msgspec.json.decode(encode(event))
        data = value["data"]
        if event.type == "assistant/chunk" and isinstance(data, dict) and isinstance(data.get("chunk"), dict):
            if "step" not in data:
                continue
            step = (data.get("turn"), data["step"])
            if data["chunk"].get("type") == "usage":
                if fields := usage_fields(data["chunk"].get("usage")):
                    usage[step] = (event.seq, fields)
            else:
                steps[event.seq] = step
        elif event.type == "assistant/message" and isinstance(data, dict) and not value.get("sourceEventSeqs"):
            message = data["message"] if isinstance(data.get("message"), dict) else data
            carried = message.get("usage") if message.get("usage") is not None else data.get("usage")
            if fields := usage_fields(carried):
                shown[event.seq] = fields

    def step_of(k: int) -> tuple[Any, Any] | None:
        kind, seq0, _, _ = items[k]
        return steps.get(seq0) if kind in BLOCK_KINDS else None

    for step, (seq, fields) in usage.items():
        k = max((k for k, item in enumerate(items) if item[2] < seq), default=-1)
        carrier = None
        while k >= 0 and step_of(k) == step:
            if items[k][0] not in FOLDED_KINDS:
                carrier = k
                break
            carrier = k if carrier is None else carrier
            k -= 1
        if carrier is not None:
            shown[items[carrier][1]] = fields
    return shown


def check_times_and_usage(page: Page, events: list[Event], where: str) -> tuple[int, int]:
    """The times and usage on screen are the events' own; how many of each there are."""
    items = expected_items(events)
    assert rendered_items(page) == items, where
    meta = page.evaluate(RENDERED_META)
    times = {seq0: time[0] if time else None for seq0, time, _ in meta}
    assert times == expected_times(events, items), where
    # A time shows something short, with the full date in its title.
    assert all(time[1] and time[2] for _, time, _ in meta if time), where
    usage = {seq0: line[0] for seq0, _, line in meta if line}
    assert usage == expected_usage(events, items), where
    for seq0, _, line in meta:
        if line and {"inputTokens", "outputTokens"} <= line[0].keys():
            # "1,840 in · 61 out tokens", grouped as the page's locale groups numbers.
            numbers = [int(re.sub(r"\D", "", part)) for part in line[1].split("·")]
            assert numbers == [int(line[0]["inputTokens"]), int(line[0]["outputTokens"])], (where, seq0, line)
    return sum(1 for t in times.values() if t), len(usage)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A service seeded with the demo session, as ``serve --demo`` (what ``make serve`` runs) seeds it."""
    server = ServerProcess(f"sqlite:///{tmp_path_factory.mktemp('demo') / 'demo.db'}")
    server.start("--demo")
    try:
        yield server.url
    finally:
        server.stop()


def open_demo(page: Page, url: str, query: str = f"session={DEMO_SESSION}") -> list[Event]:
    open_viewer(page, url, query)
    scroll_to_start(page)
    session = DEMO_SESSION
    child = DEMO_CHILD if "parent=" in query else None
    return stored_events(url, session, child)


@pytest.mark.parametrize(
    "query", [f"session={DEMO_SESSION}", f"parent={DEMO_SESSION}&session={DEMO_CHILD}"], ids=["demo", "demo-child"]
)
def test_the_demo_shows_each_items_time_and_each_steps_usage(demo: str, page: Page, query: str) -> None:
    events = open_demo(page, demo, query)
    timed, used = check_times_and_usage(page, events, query)
    # Every demo event has a time, and every model step has a usage chunk and a block shown.
    assert timed == len(expected_items(events))
    steps = {(e.data["turn"], e.data["step"]) for e in events if e.type == "assistant/message"}
    assert used == len(steps) > 0
    # The numbers are the demo's own: its first step used 1,840 tokens in and 61 out.
    if "parent" not in query:
        first = page.locator("#timeline > .item .meta .usage").first
        assert first.get_attribute("data-input-tokens") == "1840" and first.get_attribute("data-output-tokens") == "61"


@pytest.mark.parametrize(("scenario", "which"), viewer_cases())
def test_seeded_items_show_their_times_and_steps_their_usage_across_pages(
    seeded: Seeded, page: Page, scenario: str, which: int
) -> None:
    url, made = seeded
    session, parent = seeded_session(made, scenario, which)
    # Two messages a page: blocks and their step's usage chunk often arrive on different pages.
    open_viewer(page, url, seeded_query(session, parent, 2))
    scroll_to_start(page)
    events = stored_events(url, parent or session, session if parent else None)
    timed, used = check_times_and_usage(page, events, scenario)
    assert timed == len(expected_items(events)), "every seeded event has a time"
    if scenario in ("multi-turn", "compaction"):
        assert used > 0


def test_live_items_show_their_time_and_usage_as_it_arrives(live_server: ServerProcess, page: Page) -> None:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": "meta", "createdAt": 0}).status_code == 201
    append(url, "meta", [{"type": "turn/start", "seq": 0, "time": 1_700_000_000_000, "data": {"turn": 1}}])
    open_viewer(page, url, "session=meta")
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
    usage = {"type": "usage", "usage": {"inputTokens": 1234, "outputTokens": 56, "cacheReadTokens": 7}}
    events = [
        delta(1, "Hello"),
        delta(2, " there"),
        {
            "type": "assistant/chunk",
            "seq": 3,
            "time": 1_700_000_000_500,
            "data": {"turn": 1, "step": 1, "chunk": usage},
        },
    ]
    for event in events:
        append(url, "meta", [event])
        page.wait_for_function(
            f"() => document.getElementById('timeline').dataset.cursor === '{event['seq']}'", timeout=TIMEOUT_MS
        )
    check_times_and_usage(page, stored_events(url, "meta"), "live")
    line = page.locator("#timeline > .item.text .meta .usage")
    assert line.get_attribute("data-cache-read-tokens") == "7"
    assert "cache read" in (line.get_attribute("title") or "")
    # The text's time is its first delta's, not its last's.
    assert page.locator("#timeline > .item.text time").get_attribute("datetime") == iso(1_700_000_000_001)


def copyable_texts(events: list[Event]) -> dict[int, str]:
    """The text each item shows, by first seq: a tool call's arguments formatted once they parse."""
    out = {}
    for kind, seq0, _, text in expected_items(events):
        if kind == "turn":
            continue
        if kind == "tool":
            try:
                text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            except ValueError:
                pass
        out[seq0] = text
    return out


def test_copy_puts_exactly_the_shown_text_on_the_clipboard(demo: str, page: Page) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=demo)
    events = open_demo(page, demo)
    expected = copyable_texts(events)
    assert {kind for kind, *_ in expected_items(events)} >= {"user", "context", "reasoning", "text", "tool"}
    assert page.locator("#timeline > .item.turn .copy").count() == 0
    copied = {}
    for seq0 in expected:
        item = page.locator(f"#timeline > .item[data-seq0='{seq0}']")
        # Folded reasoning and context are opened first: their button is in the folded part.
        item.evaluate("el => { if (el.tagName === 'DETAILS') el.open = true; }")
        button = item.locator(":scope > .meta > button.copy")
        page.evaluate("() => navigator.clipboard.writeText('')")
        button.click()
        item.locator(":scope > .meta > button.copy[data-state='copied']").wait_for(timeout=TIMEOUT_MS)
        copied[seq0] = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == expected
    screenshot(page, "copy-after")


def find_count(page: Page) -> tuple[str, int, int]:
    count = page.locator("#find-count")
    at, total = count.get_attribute("data-at"), count.get_attribute("data-total")
    return count.text_content() or "", int(at or 0), int(total or 0)


MATCHED = "() => Array.from(document.querySelectorAll('#timeline > .item[data-match]')).map((el) => +el.dataset.seq0)"


def current_match(page: Page) -> int:
    return int(page.locator("#timeline > .item[data-current]").get_attribute("data-seq0") or -1)


def test_find_counts_and_walks_the_items_that_contain_the_query(demo: str, page: Page) -> None:
    events = open_demo(page, demo)
    shown = copyable_texts(events)
    assert page.is_visible("#find-bar")
    for query in ("cart", "CART", "Items", "assert 5 == 15", "no such words anywhere"):
        page.fill("#find", query)
        matching = [seq0 for seq0, text in shown.items() if query.lower() in text.lower()]
        marked = page.evaluate(MATCHED)
        assert marked == matching, query
        total = len(matching)
        # A new query starts at the newest match.
        assert find_count(page) == (f"{total} of {total}", total, total), query
        if total == 0:
            assert page.locator("#timeline > .item[data-current]").count() == 0
            assert page.is_disabled("#find-next") and page.is_disabled("#find-prev")
            continue
        assert current_match(page) == matching[-1]
        screenshot(page, f"find-{re.sub(r'[^a-z0-9]+', '-', query.lower())}")
        # Next wraps to the first; previous goes back; Enter is next, Shift+Enter previous.
        page.click("#find-next")
        assert find_count(page)[1] == 1 and current_match(page) == matching[0]
        page.press("#find", "Enter")
        assert find_count(page)[1] == min(2, total) and current_match(page) == matching[min(2, total) - 1]
        page.press("#find", "Shift+Enter")
        assert find_count(page)[1] == 1
        page.click("#find-prev")
        assert find_count(page)[1] == total and current_match(page) == matching[-1]
        # The current match is in view.
        assert page.locator("#timeline > .item[data-current]").is_visible()
        box = page.locator("#timeline > .item[data-current]").bounding_box()
        frame = page.locator("#scroller").bounding_box()
        assert box is not None and frame is not None
        assert box["y"] < frame["y"] + frame["height"] and box["y"] + box["height"] > frame["y"]
    assert len([seq0 for seq0, text in shown.items() if "cart" in text.lower()]) >= 3
    page.press("#find", "Escape")
    assert page.input_value("#find") == "" and page.locator("#timeline > .item[data-match]").count() == 0


def test_find_counts_live_items_as_they_arrive(live_server: ServerProcess, page: Page) -> None:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": "find", "createdAt": 0}).status_code == 201
    append(url, "find", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}, user_message(1)])
    open_viewer(page, url, "session=find")
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
    page.fill("#find", "message")
    assert find_count(page) == ("1 of 1", 1, 1)
    append(url, "find", [user_message(2), user_message(3)])
    page.wait_for_function("() => document.getElementById('timeline').dataset.cursor === '3'", timeout=TIMEOUT_MS)
    # The reader's place stays on the match it was on; the count grows.
    assert find_count(page) == ("1 of 3", 1, 3) and current_match(page) == 1


def test_jump_to_end_shows_away_from_the_bottom_and_scrolls_there(demo: str, page: Page) -> None:
    events = open_demo(page, demo)
    page.evaluate("() => { const s = document.getElementById('scroller'); s.scrollTop = s.scrollHeight; }")
    page.wait_for_selector("#jump", state="hidden", timeout=TIMEOUT_MS)
    assert page.evaluate(AT_BOTTOM)
    page.evaluate("() => { const s = document.getElementById('scroller'); s.scrollTop = s.scrollHeight / 2; }")
    page.wait_for_selector("#jump:not([hidden])", timeout=TIMEOUT_MS)
    assert not page.evaluate(AT_BOTTOM)
    screenshot(page, "jump-shown")
    page.click("#jump")
    assert page.evaluate(AT_BOTTOM)
    page.wait_for_selector("#jump", state="hidden", timeout=TIMEOUT_MS)
    last = page.locator("#timeline > .item").last
    assert last.is_visible() and last.get_attribute("data-seq1") == str(events[-1].seq)


def test_jump_to_end_shows_when_live_items_come_below_the_reader(live_server: ServerProcess, page: Page) -> None:
    url = live_server.url
    assert httpx.post(f"{url}/v1/sessions", json={"id": "jump", "createdAt": 0}).status_code == 201
    append(url, "jump", [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}])
    append(url, "jump", [user_message(seq) for seq in range(1, 40)])
    open_viewer(page, url, "session=jump")
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
    assert page.evaluate(AT_BOTTOM) and page.is_hidden("#jump")
    page.evaluate("() => { document.getElementById('scroller').scrollTop = 300; }")
    page.wait_for_selector("#jump:not([hidden])", timeout=TIMEOUT_MS)
    top = page.evaluate("() => document.getElementById('scroller').scrollTop")
    append(url, "jump", [user_message(40)])
    page.wait_for_function("() => document.getElementById('timeline').dataset.cursor === '40'", timeout=TIMEOUT_MS)
    # The reader was away from the bottom: the new item does not move them, and the button stays.
    assert page.evaluate("() => document.getElementById('scroller').scrollTop") == top
    assert page.is_visible("#jump")
    page.click("#jump")
    assert page.evaluate(AT_BOTTOM)
    assert page.locator("#timeline > .item").last.is_visible()


COLOURS = """() => {
    const body = getComputedStyle(document.body);
    const user = getComputedStyle(document.querySelector('#timeline > .item.user'));
    return [body.backgroundColor, body.color, user.backgroundColor];
}"""


def luminance(colour: str) -> float:
    red, green, blue = (int(part) for part in re.findall(r"\d+", colour)[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def test_the_dark_scheme_changes_the_colours(demo: str, page: Page) -> None:
    open_demo(page, demo)
    page.emulate_media(color_scheme="light")
    light = page.evaluate(COLOURS)
    screenshot(page, "scheme-light")
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate(COLOURS)
    screenshot(page, "scheme-dark")
    assert all(a != b for a, b in zip(light, dark, strict=True)), (light, dark)
    # Light text on a dark ground, and the other way round.
    assert luminance(dark[0]) < luminance(dark[1]) and luminance(light[0]) > luminance(light[1]), (light, dark)
    assert luminance(dark[0]) < luminance(light[0])


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_the_docs_screenshots_are_made_from_the_demo(demo: str, browser: Browser) -> None:
    made = make_screenshots(browser, demo, OUTPUT_DIR / "docs-screenshots")
    assert set(made) == set(SCHEMES)
    pictures = {scheme: path.read_bytes() for scheme, path in made.items()}
    for data in pictures.values():
        assert png_size(data) == (VIEWPORT["width"], VIEWPORT["height"])
    assert pictures["light"] != pictures["dark"]

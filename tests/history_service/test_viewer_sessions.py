"""The viewer's session list (history_service/viewer/sessions.js) and the way around it (nav.js), in Chromium.

On sessions made here: the list shows each session's title (its last ``session/title``, else its
first user message), state, events ("empty" for none), last activity ("unknown" for a time the log
did not record, never 1970) and tokens; the listing's true total, not the rows loaded; a filter
typed into the box, answered by the service; each session's subagents as links. A session links
back to the list, a child to its parent, and says its title, state, events and token total (kept
current as it is followed; a closed one is never "live"); a child's inherited first events are
marked. On the real corpus (``HISTORY_CORPUS_DIR``), imported whole with the repo's own import
command: every log's title is listed, the filter finds them, the total is the number of
top-level logs, children are links, and their pages link back.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from history_service.cli.program import main
from history_service.settings import Settings
from testing.browser import checked_page, launch, missing_reason
from testing.corpus import CORPUS_ENV, corpus_dir
from testing.servers import serve_in_thread

if missing_reason() is not None:
    pytest.skip(missing_reason() or "", allow_module_level=True)

from playwright.sync_api import Browser, Page  # noqa: E402

TIMEOUT_MS = 60_000
EPOCH = 1_700_000_000_000
# Sessions made here, beyond one page of the list (50).
MADE = 56
ROWS = "#session-rows > tr.session"
# Every row: its id, title link text, state, events, activity and tokens cells.
ROW_CELLS = """() => Array.from(document.querySelectorAll('#session-rows > tr.session')).map((tr) => ({
    id: tr.dataset.id,
    title: tr.querySelector('td.name a.open').textContent,
    state: tr.querySelector('td.state').textContent,
    events: tr.querySelector('td.events').textContent,
    activity: tr.querySelector('td.activity').textContent,
    tokens: tr.querySelector('td.tokens').textContent,
}))"""


def said(seq: int, text: str, *, kind: str = "user", time: int | None = None) -> dict[str, Any]:
    data = {"role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": kind}}
    return {"type": "user/message", "seq": seq, "time": EPOCH + seq if time is None else time, "data": data}


def titled(seq: int, title: str) -> dict[str, Any]:
    return {"type": "session/title", "seq": seq, "time": EPOCH + seq, "data": {"title": title}}


def usage(seq: int, tokens_in: int, tokens_out: int) -> dict[str, Any]:
    chunk = {"type": "usage", "usage": {"inputTokens": tokens_in, "outputTokens": tokens_out}}
    return {"type": "assistant/chunk", "seq": seq, "time": EPOCH + seq, "data": {"turn": 1, "step": 1, "chunk": chunk}}


def turn(seq: int, number: int = 1) -> dict[str, Any]:
    return {"type": "turn/start", "seq": seq, "time": EPOCH + seq, "data": {"turn": number}}


def create(http: httpx.Client, session_id: str, created_at: int, **header: Any) -> None:
    response = http.post("/v1/sessions", json={"id": session_id, "createdAt": created_at, **header})
    assert response.status_code == 201, response.text


def append(http: httpx.Client, session_id: str, events: list[dict[str, Any]]) -> None:
    response = http.post(f"/v1/sessions/{session_id}/events", json={"events": events})
    assert response.status_code == 201, response.text


def make_sessions(http: httpx.Client) -> None:
    """`MADE` top-level sessions of every kind the list shows, and a parent's children."""
    for k in range(MADE - 6):
        session = f"s{k:03d}"
        create(http, session, EPOCH + k * 1000)
        # Every third is titled by its first user message alone; the others by a session/title.
        title = titled(1, f"Fix bug {k}" if k % 2 else f"Write docs {k}")
        append(http, session, [said(0, f"asked {k}")] + ([title] if k % 3 else []))
    # The newest six: untitled and empty; closed; titled by injected context only; no times; tokens; a parent.
    create(http, "empty", EPOCH + 90_000)
    create(http, "done", EPOCH + 91_000)
    append(http, "done", [said(0, "Finish the release"), turn(1)])
    assert http.post("/v1/sessions/done/close").status_code == 200
    create(http, "context", EPOCH + 92_000)
    append(http, "context", [said(0, "Runtime context", kind="plugin"), turn(1)])
    create(http, "timeless", 0)
    append(http, "timeless", [said(0, "No times here", time=0)])
    create(http, "costly", EPOCH + 94_000)
    append(http, "costly", [said(0, "Count tokens"), usage(1, 1500, 20), usage(2, 500, 22)])
    create(http, "parent", EPOCH + 95_000)
    append(http, "parent", [titled(0, "The parent"), turn(1)])
    for n in (1, 2):
        child = {"parentSession": "parent", "origin": "subagent"}
        create(http, f"parent.w{n}", EPOCH + 96_000 + n, **child)
        end = {"type": "session/end-seed", "seq": 2, "time": EPOCH, "data": {}}
        seed = [turn(0, 7), said(1, "Inherited context", kind="plugin"), end]
        append(http, f"parent.w{n}", [*seed, said(3, f"Worker {n} task"), turn(4, 8)])


@pytest.fixture(scope="module")
def made() -> Iterator[str]:
    """A service holding the sessions `make_sessions` makes (in memory, in this process: a quick start)."""
    with serve_in_thread(Settings(store_url="memory://")) as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            make_sessions(http)
        yield server.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch() as opened:
        yield opened


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    with checked_page(browser, request.node.name) as opened:
        yield opened


def open_list(page: Page, url: str) -> None:
    page.goto(f"{url}/")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    assert page.url == f"{url}/viewer/" and not page.is_visible("#error")


def filter_by(page: Page, text: str) -> None:
    """Type into the filter, and wait for the service's answer to that text to be shown."""
    page.fill("#session-filter", text)
    page.wait_for_selector(f"#sessions[data-query={json.dumps(text)}][data-loading='false']", timeout=TIMEOUT_MS)


def text(page: Page, selector: str) -> str:
    return page.text_content(selector) or ""


def rows(page: Page) -> list[dict[str, str]]:
    found: list[dict[str, str]] = page.evaluate(ROW_CELLS)
    return found


def load_all(page: Page) -> None:
    while page.is_visible("#more"):
        shown = page.locator(ROWS).count()
        page.click("#more")
        page.wait_for_function(f"() => document.querySelectorAll({json.dumps(ROWS)}).length > {shown}")


def open_session(page: Page, url: str, query: str) -> None:
    page.goto(f"{url}/viewer/?{query}")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    page.wait_for_selector("#about[data-state]", timeout=TIMEOUT_MS)


def test_the_list_shows_titles_states_events_activity_tokens_and_the_true_total(made: str, page: Page) -> None:
    open_list(page, made)
    # The total is the listing's, before More is pressed: not the 50 rows loaded.
    assert page.get_attribute("#sessions", "data-total") == str(MADE)
    assert page.text_content("#session-count") == f"50 of {MADE} sessions"
    assert page.text_content("#status") == f"{MADE} sessions"
    load_all(page)
    assert page.text_content("#session-count") == f"{MADE} sessions"
    by_id = {row["id"]: row for row in rows(page)}
    # Newest first, every session once, across the pages More loaded.
    numbered = [f"s{k:03d}" for k in reversed(range(MADE - 6))]
    assert list(by_id) == ["parent", "costly", "context", "done", "empty", *numbered, "timeless"]
    # A session/title names a session; before one, its first user message does; else its id, in italics.
    assert by_id["s001"]["title"] == "Fix bug 1" and by_id["s003"]["title"] == "asked 3"
    assert by_id["s004"]["title"] == "Write docs 4"
    assert by_id["context"]["title"] == "context" and by_id["empty"]["title"] == "empty"
    assert page.locator("tr[data-id='empty'] a.open.untitled").count() == 1
    events = (by_id["empty"]["events"], by_id["done"]["events"], by_id["s003"]["events"])
    assert events == ("empty", "2 events", "1 event")
    assert (by_id["done"]["state"], by_id["s001"]["state"]) == ("closed", "open")
    assert by_id["costly"]["tokens"] == "2,000 in · 42 out" and by_id["s001"]["tokens"] == "—"
    # Times: the last event's; a log with none says so, and an empty session shows when it was created.
    assert page.get_attribute("tr[data-id='s001'] td.activity > time", "datetime") == "2023-11-14T22:13:20.001Z"
    assert by_id["timeless"]["activity"] == "unknown"
    assert by_id["empty"]["activity"] == "unknowncreated 2023-11-14 22:14 UTC"
    assert "1970" not in text(page, "#sessions")


def test_typing_filters_on_the_service_with_the_total_of_what_matches(made: str, page: Page) -> None:
    open_list(page, made)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url) if "/v1/sessions?" in request.url else None)
    filter_by(page, "FIX BUG")
    fixes = [f"s{k:03d}" for k in reversed(range(MADE - 6)) if k % 2 and k % 3]
    assert [row["id"] for row in rows(page)] == fixes
    assert page.text_content("#session-count") == f"{len(fixes)} sessions matching “FIX BUG”"
    assert page.get_attribute("#sessions", "data-total") == str(len(fixes))
    # The service filtered: the page asked with q.
    assert any("q=FIX%20BUG" in address for address in requested), requested
    # By id too, and one that matches nothing says so.
    filter_by(page, "s04")
    assert [row["id"] for row in rows(page)] == [f"s{k:03d}" for k in reversed(range(40, 50))]
    filter_by(page, "nothing like it")
    assert rows(page) == [] and page.text_content("#session-count") == "No session matches “nothing like it”"
    filter_by(page, "")
    assert page.get_attribute("#sessions", "data-total") == str(MADE)


def test_a_rows_subagents_are_links_and_each_view_leads_back(made: str, page: Page) -> None:
    open_list(page, made)
    page.click("tr[data-id='parent'] td.children summary")
    page.wait_for_selector("tr[data-id='parent'] details[data-loaded='2']", timeout=TIMEOUT_MS)
    links = page.locator("tr[data-id='parent'] td.children a")
    assert links.all_text_contents() == ["Worker 2 task", "Worker 1 task"]
    assert page.locator("tr[data-id='s049'] td.children").text_content() == "—"
    links.last.click()
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    assert page.url.endswith("?parent=parent&session=parent.w1")
    # The heading's parent is a link; the list is one click away from every view.
    assert page.text_content("#title") == "parent › parent.w1"
    page.click("#title a.parent")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    assert page.url.endswith("?session=parent") and page.text_content("#title") == "parent"
    assert page.is_visible("#back")
    page.click("#back")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    assert page.url == f"{made}/viewer/" and page.is_visible("#sessions")
    # The subagents bar of the parent's view names its children by title too.
    open_session(page, made, "session=parent")
    page.wait_for_selector("#subagents[data-count='2']", timeout=TIMEOUT_MS)
    assert page.locator("#subagents a").all_text_contents() == ["Worker 1 task", "Worker 2 task"]


def test_a_view_says_its_title_state_events_and_token_total(made: str, page: Page) -> None:
    open_session(page, made, "session=costly")
    about = page.locator("#about")
    assert about.locator(".title").text_content() == "Count tokens"
    assert about.locator(".badge").text_content() == "open" and about.locator(".events").text_content() == "3 events"
    assert about.locator(".tokens").text_content() == "2,000 in · 42 out tokens"
    assert page.title() == "Count tokens · session viewer"
    # A closed session is not live: it says it ended, and so does its line.
    open_session(page, made, "session=done")
    page.wait_for_selector("#status[data-state='ended']", timeout=TIMEOUT_MS)
    assert about.locator(".badge").text_content() == "closed"
    # An empty one is empty, not at head -1; a log without times shows no 1970.
    open_session(page, made, "session=empty")
    assert about.locator(".events").text_content() == "empty" and about.get_attribute("data-events") == "0"
    open_session(page, made, "session=timeless")
    assert about.locator(".activity").text_content() == "last activity unknown"
    assert "1970" not in text(page, "body")


def test_a_followed_sessions_line_keeps_its_events_title_and_tokens_current(page: Page) -> None:
    with serve_in_thread(Settings(store_url="memory://")) as server, httpx.Client(base_url=server.url) as http:
        create(http, "growing", EPOCH)
        append(http, "growing", [said(0, "Start")])
        open_session(page, server.url, "session=growing")
        page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
        assert page.get_attribute("#about", "data-tokens") == ""
        append(http, "growing", [turn(1), usage(2, 10, 4)])
        page.wait_for_selector("#about[data-tokens='10/4']", timeout=TIMEOUT_MS)
        append(http, "growing", [titled(3, "Renamed live")])
        page.wait_for_function(
            "() => document.querySelector('#about .title').textContent === 'Renamed live'", timeout=TIMEOUT_MS
        )
        assert page.locator("#about .events").text_content() == "4 events"


def test_a_childs_inherited_first_events_are_marked(made: str, page: Page) -> None:
    open_session(page, made, "parent=parent&session=parent.w2")
    page.wait_for_selector("#timeline[data-inherited='2']", timeout=TIMEOUT_MS)
    marked = page.evaluate(
        "() => Array.from(document.querySelectorAll('#timeline > .item'))"
        ".map((el) => [Number(el.dataset.seq0), el.dataset.inherited === 'true'])"
    )
    assert marked and all(inherited == (seq < 2) for seq, inherited in marked), marked
    assert any(inherited for _, inherited in marked) and not all(inherited for _, inherited in marked)
    assert "the first 2 events are inherited from its parent" in text(page, "#about")


# --- The real corpus: every log imported into one store, as a user would ---


def expected_title(lines: list[dict[str, Any]]) -> str | None:
    """A log's title, read from its events as §12.1 says (the corpus's titles are short, single-spaced)."""
    named = [line["data"]["title"] for line in lines if line.get("type") == "session/title"]
    if named:
        return " ".join(named[-1].split())
    for line in lines:
        data = line.get("data") or {}
        if line.get("type") == "user/message" and (data.get("source") or {}).get("kind", "user") == "user":
            text = data.get("text") or "\n".join(p["text"] for p in data.get("content", []) if p.get("type") == "text")
            return " ".join(text.split()) or None
    return None


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, dict[str, Any]]]]:
    """The whole corpus imported by `history-service import --rename-templated`; each log by its imported id."""
    root = corpus_dir()
    if root is None or not root.is_dir():
        pytest.skip(f"{CORPUS_ENV} is not set (or not a directory); the corpus tests need the real logs")
    store = f"sqlite:///{tmp_path_factory.mktemp('corpus') / 'corpus.db'}"
    out, err = io.StringIO(), io.StringIO()
    # In a thread of its own: Playwright's sync API runs an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        status = pool.submit(main, ["import", "--store", store, "--rename-templated", str(root)], out=out, err=err)
        assert status.result() == 0, err.getvalue()
    logs: dict[str, dict[str, Any]] = {}
    for found in re.finditer(r"^imported (\S+) .* from (\S+)$", out.getvalue(), re.M):
        lines = [json.loads(line) for line in Path(found[2]).read_text().splitlines() if line.strip()]
        header = lines[0]
        child = header.get("origin") == "subagent" and isinstance(header.get("parentSession"), str)
        logs[found[1]] = {"title": expected_title(lines[1:]), "child": child, "path": found[2]}
    assert logs
    with serve_in_thread(Settings(store_url=store)) as server:
        yield server.url, logs


def test_the_corpus_lists_every_logs_title_with_the_true_total_and_filters(
    corpus: tuple[str, dict[str, dict[str, Any]]], page: Page
) -> None:
    url, logs = corpus
    top = {session: log for session, log in logs.items() if not log["child"]}
    open_list(page, url)
    assert page.get_attribute("#sessions", "data-total") == str(len(top))
    load_all(page)
    by_id = {row["id"]: row for row in rows(page)}
    assert by_id.keys() == top.keys()
    for session, log in top.items():
        assert by_id[session]["title"] == (log["title"] or session), log["path"]
    assert sum(log["title"] is not None for log in top.values()) >= len(top) // 2
    assert "1970" not in text(page, "#sessions")
    # A word of one title finds every log whose title or id holds it, in any case.
    word = max((log["title"] for log in top.values() if log["title"]), key=len).split()[0]
    filter_by(page, word.upper())
    wanted = {s for s, log in top.items() if word.casefold() in f"{s} {log['title'] or ''}".casefold()}
    assert {row["id"] for row in rows(page)} == wanted and page.get_attribute("#sessions", "data-total") == str(
        len(wanted)
    )


def test_the_corpus_parents_link_their_children_and_every_view_leads_back(
    corpus: tuple[str, dict[str, dict[str, Any]]], page: Page
) -> None:
    url, logs = corpus
    parents = sorted({Path(log["path"]).parent for log in logs.values() if log["child"]})
    assert parents, "the corpus has subagent children"
    open_list(page, url)
    load_all(page)
    by_folder = {Path(log["path"]).parent: session for session, log in logs.items() if not log["child"]}
    for folder in parents:
        parent = by_folder[folder]
        children = {s: log for s, log in logs.items() if log["child"] and Path(log["path"]).parent == folder}
        row = f"tr[data-id={json.dumps(parent)}]"
        page.click(f"{row} td.children summary")
        page.wait_for_selector(f"{row} details[data-loaded='{len(children)}']", timeout=TIMEOUT_MS)
        listed = page.locator(f"{row} td.children a").evaluate_all("links => links.map((a) => a.dataset.child)")
        assert set(listed) == children.keys(), folder
    # A child's view leads to its parent and to the list.
    child = next(s for s, log in logs.items() if log["child"])
    parent = by_folder[Path(logs[child]["path"]).parent]
    page.click(f"a[data-child={json.dumps(child)}]")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    assert page.text_content("#title") == f"{parent} › {child}"
    assert page.locator("#about .title").text_content() == (logs[child]["title"] or "untitled")
    page.click("#title a.parent")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    assert page.text_content("#title") == parent and "1970" not in text(page, "body")
    page.click("#back")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    assert page.url == f"{url}/viewer/"

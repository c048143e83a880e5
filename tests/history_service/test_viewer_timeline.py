"""The viewer's timeline on real harness logs, in Chromium: every event shown, failures and approvals
visible, assistant Markdown rendered safely, results matched to their calls, children linked, no
time shown before 2000, nothing wider than the page.

The whole corpus (``HISTORY_CORPUS_DIR``) is imported once with ``history-service import
--rename-templated``, into one store behind one server, and read by one browser. The import renames
a child's references with it, so a parent's events name its children as they are stored. A session
of our own, served beside them, carries Markdown with XSS payloads, parallel tool calls and an
unbroken long argument.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import pytest

from codec import Event, SessionHeader, encode, read_header
from history_client import HistoryClient
from history_service.cli.log_files import find_logs
from history_service.cli.naming import ImportOptions, plan_names
from history_service.cli.program import main
from history_service.settings import Settings
from testing.browser import checked_page, launch, missing_reason, screenshot
from testing.corpus import CORPUS_ENV, corpus_dir
from testing.servers import ThreadServer, serve_in_thread

if missing_reason() is not None:
    pytest.skip(missing_reason() or "", allow_module_level=True)

# One browser and one server for the whole module: its tests stay on one xdist worker.
pytestmark = pytest.mark.xdist_group("viewer_timeline")

from playwright.sync_api import Browser, Page, ViewportSize  # noqa: E402

VIEWPORT: ViewportSize = {"width": 900, "height": 500}
# Pages loading logs at once: a page's load is mostly waiting on its module graph, not the CPU.
PARALLEL_PAGES = 4

TIMEOUT_MS = 60_000
Y2K_MS = 946_684_800_000
# A date as the page could write one for a time before 2000: ISO, en-US numeric, or spelled out.
OLD_DATE = re.compile(
    r"\b1\d{3}-\d{2}-\d{2}|\b\d{1,2}/\d{1,2}/1\d{3}\b|"
    r"\b(?:January|February|March|April|May|June|July|August|September|October|November|December) \d{1,2}, 1\d{3}\b"
)

# Per item on screen: the seqs it accounts for (its range and data-seqs), its kind, tone and type,
# its rendered text, and whether it is shown at all.
ITEMS = """() => Array.from(document.querySelectorAll('#timeline > .item')).map((el) => {
    const seqs = [];
    for (let seq = Number(el.dataset.seq0); seq <= Number(el.dataset.seq1); seq++) seqs.push(seq);
    if (el.dataset.seqs) seqs.push(...el.dataset.seqs.split(' ').map(Number));
    const markdown = el.querySelector(':scope > .markdown');
    return {
        seqs, kind: el.dataset.kind, tone: el.dataset.tone ?? null, type: el.dataset.type ?? null,
        text: el.innerText, body: el.querySelector(':scope > .body')?.textContent ?? '',
        call: el.querySelector(':scope > .call')?.textContent ?? null,
        formatted: el.classList.contains('formatted'),
        shown: el.checkVisibility(),
        markdown: markdown ? {
            strong: markdown.querySelectorAll('strong').length, code: markdown.querySelectorAll('code').length,
            li: markdown.querySelectorAll('li').length,
        } : null,
        children: Array.from(el.querySelectorAll('a.child')).map((a) => [a.dataset.child, a.getAttribute('href')]),
    };
})"""
# Everything on the page a reader may see as a date: its text, titles and <time datetime>s.
DATES = """() => ({
    text: document.body.innerText,
    titles: Array.from(document.querySelectorAll('[title]')).map((el) => el.title),
    times: Array.from(document.querySelectorAll('time')).map((el) => el.dateTime),
})"""
SCROLL_UP = (
    "() => { const s = document.getElementById('scroller'); s.scrollTop = 0; s.dispatchEvent(new Event('scroll')); }"
)
MOVED = """before => {
    const shown = document.getElementById('timeline').dataset;
    return shown.loading !== 'true' && (shown.from !== before || shown.hasMore !== 'true');
}"""
LINKED = "() => document.documentElement.dataset.linking !== 'true'"
WIDTHS = "() => { const s = document.getElementById('scroller'); return [s.scrollWidth, s.clientWidth]; }"


class Log(msgspec.Struct, frozen=True):
    """One imported log: where it came from, and the session and parent it is stored as."""

    path: Path
    session: str
    parent: str | None

    @property
    def query(self) -> str:
        if self.parent is None:
            return f"session={self.session}"
        return f"parent={self.parent}&session={self.session}"


def stored_as(headers: dict[Path, SessionHeader]) -> dict[Path, tuple[str, str | None]]:
    """Each log's stored id, and its parent when the viewer reads it through one (a subagent child)."""
    out = {}
    for path, header in headers.items():
        parent = header.parentSession if isinstance(header.parentSession, str) and header.origin == "subagent" else None
        out[path] = (header.id, parent)
    return out


class Plan(msgspec.Struct, frozen=True):
    """The import this module makes: the corpus, and every log as stored."""

    root: Path
    logs: list[Log]


def corpus_plan() -> Plan | None:
    """What the import will store, read from the logs' headers with the importer's own naming; None without a corpus."""
    root = corpus_dir()
    if root is None or not root.is_dir():
        return None
    paths = find_logs([root]).logs
    headers = {path: read_header(path.read_bytes().split(b"\n", 1)[0]) for path in paths}
    planned = plan_names(headers, ImportOptions(owner="local", rename_shared=True)).headers
    return Plan(root, [Log(path, *stored) for path, stored in stored_as(planned).items()])


PLAN = corpus_plan()


def log_params() -> list[object]:
    if PLAN is None:
        root = corpus_dir()
        reason = f"{CORPUS_ENV}={root} is not a directory" if root else f"{CORPUS_ENV} is not set; corpus tests need it"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason))]
    return [pytest.param(log, id=f"{log.path.parent.name}/{log.path.name}") for log in PLAN.logs]


def import_corpus(plan: Plan, store: str) -> None:
    """The corpus imported as a user would."""
    err = io.StringIO()
    # In a thread of its own, as Playwright's sync API runs an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        args = ["import", "--rename-templated", "--store", store, str(plan.root)]
        assert pool.submit(main, args, out=io.StringIO(), err=err).result() == 0, err.getvalue()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch() as opened:
        yield opened


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    if PLAN is None:
        root = corpus_dir()
        pytest.skip(
            f"{CORPUS_ENV}={root} is not a directory" if root else f"{CORPUS_ENV} is not set; corpus tests need it"
        )
    store = f"sqlite:///{tmp_path_factory.mktemp('timeline') / 'corpus.db'}"
    import_corpus(PLAN, store)
    with serve_in_thread(Settings(store_url=store)) as server:
        yield server


@pytest.fixture(scope="module")
def page(browser: Browser) -> Iterator[Page]:
    """One page for every log, in a time zone west of UTC, so that time 0 would read as 31 December 1969."""
    with checked_page(
        browser, "timeline-last", viewport=VIEWPORT, locale="en-US", timezone_id="America/New_York"
    ) as opened:
        yield opened


def start_log(page: Page, url: str, query: str) -> None:
    """Begin opening a session; `finish_log` waits for it, so that several pages load at once."""
    page.goto(f"{url}/viewer/?{query}&pageSize=200", wait_until="commit")


def finish_log(page: Page) -> None:
    """Wait for a session opened by `start_log`, then scroll up until its first page is on screen."""
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    while (shown := page.evaluate("() => ({...document.getElementById('timeline').dataset})"))["hasMore"] == "true":
        page.evaluate(SCROLL_UP)
        page.wait_for_function(MOVED, arg=shown["from"], timeout=TIMEOUT_MS)
    # Children are linked once the session's subagents are listed: after the pages, on a loaded machine.
    page.wait_for_function(LINKED, timeout=TIMEOUT_MS)


def open_log(page: Page, url: str, query: str) -> None:
    start_log(page, url, query)
    finish_log(page)


class View(msgspec.Struct, frozen=True):
    """What the page showed of one log: its items, what may read as a date, and its scroll and client widths."""

    items: list[dict[str, Any]]
    dates: dict[str, Any]
    widths: list[int]


def view(page: Page) -> View:
    return View(page.evaluate(ITEMS), page.evaluate(DATES), page.evaluate(WIDTHS))


def holding(items: list[dict[str, Any]], seq: int) -> dict[str, Any]:
    (found,) = [item for item in items if seq in item["seqs"]]
    return found


def failures(event: dict[str, Any]) -> str | None:
    """The message of a failed turn, step, retry or compaction, as the harness wrote it, or None."""
    data = event["data"] if isinstance(event["data"], dict) else {}
    chunk: dict[str, Any] = data["chunk"] if isinstance(data.get("chunk"), dict) else {}
    if event["type"] == "turn/end":
        reason: dict[str, Any] = data["reason"] if isinstance(data.get("reason"), dict) else {}
        error = reason.get("error", reason) if reason.get("kind") == "error" else data.get("error")
    elif event["type"] == "assistant/chunk" and chunk.get("type") == "finish":
        finish = chunk.get("reason")
        error = finish.get("failure") if isinstance(finish, dict) and finish.get("kind") == "error" else None
    elif event["type"] in ("llm/retry", "compaction/end"):
        error = data.get("failure") or data.get("error")
    else:
        return None
    if isinstance(error, dict):
        error = error.get("message")
    return error if isinstance(error, str) and error else None


def check_log(shown: View, events: list[dict[str, Any]], log: Log, children: dict[str, set[str]]) -> dict[str, int]:
    """Check everything this module promises of one log's view; counts of what was seen."""
    items = shown.items
    where = f"{log.path.parent.name}/{log.path.name} as {log.session}"
    seen: Counter[str] = Counter()

    # Every event is on screen exactly once: as an item, or accounted on the item it belongs to.
    accounted = Counter(seq for item in items for seq in item["seqs"])
    assert sorted(accounted.elements()) == [event["seq"] for event in events], where
    assert all(item["shown"] for item in items), where
    seen["events"] += len(events)

    for event in events:
        item = holding(items, event["seq"])
        if (message := failures(event)) is not None:
            # A failure is its own card, prominent, its message in view.
            assert item["tone"] in ("error", "warn") and message in item["text"], (where, event["seq"], item)
            seen["failures"] += 1
        if event["type"] == "approval/asked":
            assert item["tone"] == "warn" and event["data"]["toolName"] in item["text"], (where, item)
            assert event["data"]["reason"] in item["text"], (where, item)
            seen["approvals"] += 1
        if event["type"] == "approval/decided":
            assert event["data"]["outcome"] in item["text"], (where, item)
        if event["type"] == "tool/result":
            # Which call a result answers, and the call's tool where it is on screen.
            data = event["data"]
            call = data.get("callId") or (data.get("message") or {}).get("source", {}).get("callId")
            assert item["kind"] == "tool-result" and call in (item["call"] or ""), (where, item)
            names = {other["call"] for other in items if other["kind"] == "tool" and call in (other["call"] or "")}
            if names:
                assert (item["call"] or "").endswith(f" · {call}"), (where, item)
            if item["formatted"]:
                seen["json results"] += 1

    # Markdown in assistant text is rendered as elements.
    for item in items:
        if item["markdown"] is None:
            continue
        for element, pattern in (("strong", r"\*\*[^*\n]+\*\*"), ("code", r"`[^`\n]+`"), ("li", r"(?m)^\s*[-*] \S")):
            if re.search(pattern, item["body"]):
                assert item["markdown"][element] > 0, (where, element, item["body"])
                seen[f"markdown {element}"] += 1

    # A child this log's events name is linked where they name it.
    text = {event["seq"]: json.dumps(event["data"]) for event in events}
    for child in sorted(children.get(log.session, set())):
        naming = [seq for seq, data in text.items() if child in data]
        linked = [item for item in items if any(name == child for name, _ in item["children"])]
        if naming:
            assert linked, (where, child)
            href = f"?parent={log.session}&session={child}"
            assert all(dict(item["children"])[child] == href for item in linked), (where, linked)
            seen["child links"] += 1

    # No time before 2000 is shown as a date; nothing is wider than the page.
    dates = shown.dates
    assert not OLD_DATE.search(dates["text"]) and "1970" not in dates["text"], where
    assert not [title for title in dates["titles"] if OLD_DATE.search(title) or "1970" in title], where
    assert all(time >= "2000" for time in dates["times"]), (where, dates["times"])
    scroll_width, width = shown.widths
    assert scroll_width <= width, (where, scroll_width, width)
    return dict(seen)


# What the corpus tests saw, over every log: the last test checks that each check had cases.
SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module")
def views(corpus: ThreadServer, page: Page) -> dict[Log, View]:
    """Every log opened, a few pages loading at once (one browser, one server), and what each showed."""
    assert PLAN is not None
    pages = [page, *(page.context.new_page() for _ in range(PARALLEL_PAGES - 1))]
    waiting = list(PLAN.logs)
    out: dict[Log, View] = {}
    while waiting:
        batch = list(zip(pages, waiting, strict=False))
        waiting = waiting[len(batch) :]
        for opened, log in batch:
            start_log(opened, corpus.url, log.query)
        for opened, log in batch:
            finish_log(opened)
            out[log] = view(opened)
    for opened in pages[1:]:
        opened.close()
    return out


@pytest.fixture(scope="module")
def history(corpus: ThreadServer) -> Iterator[HistoryClient]:
    with HistoryClient(corpus.url) as client:
        yield client


@pytest.mark.parametrize("log", log_params())
def test_a_corpus_log_shows_every_event_its_failures_approvals_markdown_and_child_links(
    views: dict[Log, View], history: HistoryClient, log: Log
) -> None:
    assert PLAN is not None
    children: dict[str, set[str]] = {}
    for other in PLAN.logs:
        if other.parent is not None:
            children.setdefault(other.parent, set()).add(other.session)
    stored = history.iter_history(log.parent or log.session, child=log.session if log.parent else None)
    events = [msgspec.json.decode(encode(event)) for event in stored]
    SEEN.update(check_log(views[log], events, log, children))
    SEEN["logs"] += 1


def test_the_corpus_had_a_case_for_every_check() -> None:
    if PLAN is None or SEEN["logs"] < len(PLAN.logs):
        pytest.skip("only when every corpus log was checked in this run")
    wanted = {"events", "failures", "approvals", "json results", "markdown code", "markdown strong", "child links"}
    assert wanted <= set(SEEN), SEEN


def test_a_real_log_in_the_light_and_dark_schemes(corpus: ThreadServer, browser: Browser) -> None:
    """Pictures of a real log for a person to look at, in test-output/ (ignored: they show another project's data)."""
    assert PLAN is not None
    # The richest log: the most kinds of event.
    log = max(
        PLAN.logs, key=lambda log: len(set(re.findall(r'"type":"([^"]+)"', log.path.read_text(encoding="utf-8"))))
    )
    for scheme in ("light", "dark"):
        context = browser.new_context(viewport=VIEWPORT, color_scheme=scheme)
        try:
            page = context.new_page()
            open_log(page, corpus.url, log.query)
            page.evaluate("() => { document.getElementById('scroller').scrollTop = 0; }")
            assert screenshot(page, f"timeline-real-log-{scheme}").stat().st_size > 0
        finally:
            context.close()


# --- Our own session: Markdown with XSS payloads, parallel calls, a long argument, every card ---

OWN = "own-timeline"
XSS = (
    '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
    '<a href="javascript:window.__xss=3">html link</a><iframe src="javascript:window.__xss=4"></iframe>'
)
MARKDOWN = (
    "Here is **the plan**, with `code`:\n\n- first\n- second\n\n"
    f"{XSS}\n\n[a script link](javascript:window.__xss=5) [data](data:text/html,<script>window.__xss=6</script>) "
    '[a fine link](https://example.com/docs) ![a tracker](https://example.com/pixel.png "t")\n\n'
    f"```html\n{XSS}\n```\n"
)
LONG = "x" * 3000
# Any attribute in the timeline that could run or load something: a script URL, or an event handler.
UNSAFE_ATTRIBUTES = """() => Array.from(document.querySelectorAll('#timeline *'))
    .flatMap((el) => Array.from(el.attributes))
    .filter((a) => /^on/i.test(a.name) || /^\\s*(javascript|vbscript|data):/i.test(a.value))
    .map((a) => `${a.ownerElement.tagName} ${a.name}`)"""
LINKS = (
    "() => Array.from(document.querySelectorAll('#timeline .markdown a')).map((a) => [a.getAttribute('href'), a.rel])"
)


def own_events() -> list[dict[str, Any]]:
    """A turn with a payload everywhere text is shown, two parallel calls answered out of order, then a 401."""

    def event(seq: int, type_: str, data: Any, **extra: Any) -> dict[str, Any]:
        return {"type": type_, "seq": seq, "time": 1_700_000_000_000 + seq, "data": data, **extra}

    def chunk(seq: int, body: dict[str, Any]) -> dict[str, Any]:
        return event(seq, "assistant/chunk", {"turn": 1, "step": 1, "chunk": body})

    def result(seq: int, call: str, text: str) -> dict[str, Any]:
        part = {
            "type": "tool-result",
            "toolCallId": call,
            "content": [{"type": "text", "text": text}],
            "isError": False,
        }
        message = {"source": {"kind": "tool", "callId": call}, "content": [part], "role": "user"}
        return event(seq, "tool/result", {"turn": 1, "step": 1, "message": message}, surfaceOp="append")

    user = {"role": "user", "content": [{"type": "text", "text": f"Show me {XSS}"}], "source": {"kind": "user"}}
    calls = [("c1", "bash", json.dumps({"command": "ls"})), ("c2", "read_file", json.dumps({"path": LONG}))]
    return [
        event(0, "turn/start", {"turn": 1}),
        event(1, "user/message", user, surfaceOp="append"),
        event(2, "step/start", {"turn": 1, "step": 1}),
        chunk(3, {"type": "block-start", "index": 0, "blockType": "text"}),
        chunk(4, {"type": "text-delta", "index": 0, "text": MARKDOWN[:40]}),
        chunk(5, {"type": "text-delta", "index": 0, "text": MARKDOWN[40:]}),
        chunk(6, {"type": "block-end", "index": 0, "block": {"type": "text", "text": MARKDOWN}}),
        *[
            chunk(7 + k, {"type": "tool-call-delta", "index": 1 + k, "id": i, "name": n, "argumentsDelta": a})
            for k, (i, n, a) in enumerate(calls)
        ],
        chunk(9, {"type": "finish", "reason": {"kind": "tool-calls"}}),
        event(10, "tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": calls[0][2]}),
        event(11, "tool/call", {"turn": 1, "step": 1, "callId": "c2", "name": "read_file", "arguments": calls[1][2]}),
        event(12, "approval/asked", {"id": "a1", "toolName": "bash", "callId": "c1", "reason": XSS}),
        event(13, "approval/decided", {"id": "a1", "outcome": "allowed-once"}),
        result(14, "c2", json.dumps({"lines": 3, "path": "notes.txt", "ok": True})),
        result(15, "c1", "notes.txt"),
        event(16, "step/end", {"turn": 1, "step": 1}),
        event(
            17,
            "todo/write",
            {"todos": [{"content": "read", "status": "completed"}, {"content": XSS, "status": "pending"}]},
        ),
        event(18, "goal/change", {"operation": "create", "goal": {"objective": "Answer", "phase": "active"}}),
        event(19, "hook/result", {"point": "PreToolUse", "handlerId": "h", "decision": "block", "exitCode": 2}),
        event(20, "tool-workflow/run-start", {"runId": "r", "name": "flow"}),
        event(
            21,
            "llm/retry",
            {
                "retry": 1,
                "maxRetries": 3,
                "delayMs": 1200,
                "failure": {"message": "rate limited", "code": "RATE_LIMIT", "status": 429},
            },
        ),
        event(22, "x-plugin/thing", {"html": XSS}),
        event(
            23,
            "turn/end",
            {
                "turn": 1,
                "reason": {"kind": "error", "error": {"message": "401 Unauthorized: invalid API key", "code": "AUTH"}},
            },
        ),
    ]


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    store = f"sqlite:///{tmp_path_factory.mktemp('own') / 'own.db'}"
    with serve_in_thread(Settings(store_url=store)) as server, HistoryClient(server.url) as client:
        client.create_session(SessionHeader(id=OWN, createdAt=0))
        client.append(OWN, [msgspec.convert(event, Event) for event in own_events()])
        yield server


def test_markdown_renders_and_every_payload_stays_inert(own: ThreadServer, page: Page) -> None:
    open_log(page, own.url, f"session={OWN}")
    items = page.evaluate(ITEMS)
    (text,) = [item for item in items if item["kind"] == "text"]
    assert text["markdown"] == {"strong": 1, "code": 2, "li": 2}, text
    # Nothing ran, and nothing that could run or load was made: the payloads are text.
    assert page.evaluate("() => window.__xss") is None
    made = page.evaluate("() => document.querySelectorAll('#timeline script, #timeline img, #timeline iframe').length")
    assert made == 0
    links = page.evaluate(LINKS)
    # Only the https links are links (the image, not rendered, is one too), and they open safely.
    assert [href for href, _ in links] == ["https://example.com/docs", "https://example.com/pixel.png"], links
    assert {rel for _, rel in links} == {"noopener noreferrer nofollow"}
    assert page.evaluate(UNSAFE_ATTRIBUTES) == []
    assert '<img src=x onerror="window.__xss=1">' in text["text"] and "[a script link]" in text["text"]
    assert all(XSS in item["body"] for item in items if item["kind"] in ("user",)), items
    screenshot(page, "timeline-own-session")


def test_cards_results_and_long_arguments_of_our_own_session(own: ThreadServer, page: Page) -> None:
    open_log(page, own.url, f"session={OWN}")
    items = page.evaluate(ITEMS)
    accounted = Counter(seq for item in items for seq in item["seqs"])
    assert sorted(accounted.elements()) == list(range(len(own_events())))
    by_type = {item["type"]: item for item in items if item["type"]}
    # Each known event its own card; the unknown one a folded raw row with its JSON inside.
    assert by_type["approval/asked"]["tone"] == "warn" and "allowed-once" in by_type["approval/asked"]["text"]
    assert 13 in by_type["approval/asked"]["seqs"]
    assert "☑ read" in by_type["todo/write"]["text"] and "Goal create (active)" in by_type["goal/change"]["text"]
    assert by_type["hook/result"]["tone"] == "warn" and "rate limited (RATE_LIMIT, 429)" in by_type["llm/retry"]["text"]
    assert "Workflow flow started" in by_type["tool-workflow/run-start"]["text"]
    raw = by_type["x-plugin/thing"]
    assert raw["kind"] == "raw" and raw["text"].strip() == "x-plugin/thing" and json.dumps(XSS) in raw["body"]
    failed = by_type["turn/end"]
    assert failed["tone"] == "error" and "401 Unauthorized: invalid API key (AUTH)" in failed["text"], failed
    # Parallel calls answered out of order: each result names its call and tool; JSON is indented.
    results = {item["seqs"][0]: item for item in items if item["kind"] == "tool-result"}
    assert results[14]["call"] == "read_file · c2" and results[15]["call"] == "bash · c1"
    assert results[14]["formatted"] and '"lines": 3' in results[14]["text"] and not results[15]["formatted"]
    calls = [item for item in items if item["kind"] == "tool"]
    assert [item["call"] for item in calls] == ["c1", "c2"] and {10, 11} <= set(calls[0]["seqs"] + calls[1]["seqs"])
    # A 3,000-character argument wraps: nothing is wider than the page.
    scroll_width, width = page.evaluate(WIDTHS)
    assert scroll_width <= width, (scroll_width, width)

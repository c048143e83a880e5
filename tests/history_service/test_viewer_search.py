"""The viewer's search across sessions (history_service/viewer/search.js), and a session opened at a hit, in Chromium.

On sessions made here, in SQLite: typing into the search box asks the service (§14) and shows
hits in place of the list, each with its session's title, what matched, when, and a snippet
whose matched words are marked; More pages on. A hit opens its session at the matched message,
deep in a long session (far from its tail page), or in a subagent child through its parent:
the item holding the hit's seq is marked and on screen, older pages load above and newer ones
below, exactly, until the head, where the view follows live. A payload in the matched text stays
text. A query the service refuses shows its message; a JSONL store says search is unavailable.
With ``HISTORY_CORPUS_DIR``, the corpus is imported, and a word and a Chinese phrase of its user
messages (picked at test time, never stored here; the phrase's test skips when the corpus holds
none) are searched for and opened.
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

from history_service.cli.log_files import find_logs
from history_service.cli.program import main
from history_service.settings import Settings
from testing.browser import checked_page, launch, missing_reason, screenshot
from testing.corpus import CORPUS_ENV, corpus_dir
from testing.servers import serve_in_thread

if missing_reason() is not None:
    pytest.skip(missing_reason() or "", allow_module_level=True)

# The module's servers and browser are shared by its tests: they stay on one xdist worker.
pytestmark = pytest.mark.xdist_group("viewer_search")

from playwright.sync_api import Browser, Page  # noqa: E402

from tests.history_service.test_viewer_sessions import append, create, open_list  # noqa: E402

TIMEOUT_MS = 60_000
EPOCH = 1_700_000_000_000
# Questions in the long session, each with a streamed answer: six times a page's 50 messages, so that one
# in the middle is neither on the tail page nor on the first, and the newer side takes more than one load.
QUESTIONS = 300
# Every this many questions speaks of the common plan.
COMMON_EVERY = 5
# Where the words searched for stand: a user message, assistant text split across two deltas, a child's message.
USER_AT = 120
ANSWER_AT = 200
CHILD_AT = 12
CHINESE = "请检查北京大学的限流配置，然后重试。"
XSS = '<img src=x onerror="window.__xss=1"> xylophone <script>window.__xss=2</script>'

HITS = """() => Array.from(document.querySelectorAll('#hits > li.hit')).map((li) => ({
    session: li.dataset.session, seq: Number(li.dataset.seq), kind: li.dataset.kind, parent: li.dataset.parent ?? null,
    title: li.querySelector('a.open').textContent, href: li.querySelector('a.open').getAttribute('href'),
    about: li.querySelector('.about').textContent, time: li.querySelector('.about time')?.dateTime ?? null,
    marks: Array.from(li.querySelectorAll('mark')).map((mark) => mark.textContent),
    snippet: li.querySelector('.snippet').textContent,
    tags: Array.from(li.querySelectorAll('.snippet *')).map((el) => el.tagName),
}))"""
# The marked items: the seqs each accounts for, its text, and its box against the scroller's.
HIGHLIGHTED = """() => Array.from(document.querySelectorAll('#timeline > .item[data-highlight]')).map((el) => {
    const seqs = [];
    for (let seq = Number(el.dataset.seq0); seq <= Number(el.dataset.seq1); seq++) seqs.push(seq);
    if (el.dataset.seqs) seqs.push(...el.dataset.seqs.split(' ').map(Number));
    const box = el.getBoundingClientRect();
    const view = document.getElementById('scroller').getBoundingClientRect();
    return { seqs, kind: el.dataset.kind, text: el.textContent, top: box.top, bottom: box.bottom, viewTop: view.top,
        viewBottom: view.bottom };
})"""
# Every seq the timeline accounts for, in the order its items stand.
SEQS = """() => Array.from(document.querySelectorAll('#timeline > .item')).flatMap((el) => {
    const seqs = [];
    for (let seq = Number(el.dataset.seq0); seq <= Number(el.dataset.seq1); seq++) seqs.push(seq);
    if (el.dataset.seqs) seqs.push(...el.dataset.seqs.split(' ').map(Number));
    return seqs;
})"""
SCROLL_UP = (
    "() => { const s = document.getElementById('scroller'); s.scrollTop = 0; s.dispatchEvent(new Event('scroll')); }"
)
SCROLL_DOWN = (
    "() => { const s = document.getElementById('scroller'); s.scrollTop = s.scrollHeight;"
    " s.dispatchEvent(new Event('scroll')); }"
)
MOVED_UP = """before => {
    const shown = document.getElementById('timeline').dataset;
    return shown.loading !== 'true' && (shown.from !== before || shown.hasMore !== 'true');
}"""
MOVED_DOWN = """before => {
    const shown = document.getElementById('timeline').dataset;
    return shown.loadingNewer !== 'true' && (shown.cursor !== before || shown.hasNewer !== 'true');
}"""


def said(seq: int, text: str) -> dict[str, Any]:
    """A user message, a message of its own that pages count (§4.3)."""
    data = {"text": text}
    return {"type": "user/message", "seq": seq, "time": EPOCH + seq * 1000, "data": data, "surfaceOp": "append"}


def delta(seq: int, turn: int, text: str) -> dict[str, Any]:
    chunk = {"type": "text-delta", "index": 0, "text": text}
    data = {"turn": turn, "step": 1, "chunk": chunk}
    return {"type": "assistant/chunk", "seq": seq, "time": EPOCH + seq * 1000, "data": data}


def long_session() -> list[dict[str, Any]]:
    """Questions and streamed answers, three events each; one question says zanzibar, one answer quokka (split)."""
    events: list[dict[str, Any]] = []
    for k in range(QUESTIONS):
        plan = "the common plan" if k % COMMON_EVERY == 0 else "the plan"
        question = f"Question {k} on {plan}" + (", and the zanzibar route" if k == USER_AT else "")
        first, second = ("Answer: the quo", "kka stays.") if k == ANSWER_AT else (f"Answer {k}: the plan ", "holds.")
        events += [said(3 * k, question), delta(3 * k + 1, k + 1, first), delta(3 * k + 2, k + 1, second)]
    return events


def make_sessions(http: httpx.Client) -> None:
    create(http, "long", EPOCH)
    events = long_session()
    for start in range(0, len(events), 300):
        append(http, "long", events[start : start + 300])
    create(http, "parent", EPOCH + 1)
    append(http, "parent", [said(0, "Start the workers")])
    create(http, "parent.w1", EPOCH + 2, parentSession="parent", origin="subagent")
    work = [said(k, f"Worker step {k}" + (" with the wombat" if k == CHILD_AT else "")) for k in range(120)]
    append(http, "parent.w1", work)
    create(http, "cjk", EPOCH + 4)
    append(http, "cjk", [said(0, "Rate limits"), said(1, CHINESE)])
    create(http, "xss", EPOCH + 3)
    append(http, "xss", [said(0, XSS), {"type": "session/title", "seq": 1, "time": EPOCH, "data": {"title": XSS}}])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A service over SQLite (its FTS5 index) holding the sessions `make_sessions` makes."""
    store = f"sqlite:///{tmp_path_factory.mktemp('search') / 'search.db'}"
    with serve_in_thread(Settings(store_url=store)) as server:
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


def search_for(page: Page, text: str) -> list[dict[str, Any]]:
    """Type into the search box; the hits shown once the service's answer to that text is in."""
    page.fill("#search", text)
    done = f"#search-results[data-query={json.dumps(text, ensure_ascii=False)}][data-loading='false']"
    page.wait_for_selector(done, state="attached", timeout=TIMEOUT_MS)
    found: list[dict[str, Any]] = page.evaluate(HITS)
    return found


def open_hit(page: Page, hit: dict[str, Any]) -> dict[str, Any]:
    """Click a hit; the one marked item of the view it opens, once that view is ready."""
    page.click(f"#hits > li.hit[data-session={json.dumps(hit['session'])}][data-seq='{hit['seq']}'] a.open")
    page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
    page.wait_for_selector("#timeline > .item[data-highlight]", timeout=TIMEOUT_MS)
    [marked] = page.evaluate(HIGHLIGHTED)
    return dict(marked)


def on_screen(marked: dict[str, Any]) -> bool:
    return bool(marked["top"] >= marked["viewTop"] and marked["bottom"] <= marked["viewBottom"])


def test_typing_shows_hits_with_marked_snippets_in_place_of_the_list(made: str, page: Page) -> None:
    open_list(page, made)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url) if "/v1/search?" in request.url else None)
    [hit] = search_for(page, "zanzibar")
    assert page.is_hidden("#session-list") and page.is_visible("#hits")
    assert (hit["session"], hit["seq"], hit["kind"], hit["parent"]) == ("long", 3 * USER_AT, "user", None)
    assert hit["marks"] == ["zanzibar"] and hit["tags"] == ["MARK"]
    assert hit["snippet"] == f"Question {USER_AT} on the common plan, and the zanzibar route"
    assert hit["title"] == "Question 0 on the common plan" and hit["href"] == f"?session=long&at={3 * USER_AT}"
    # What matched and when, by when.js's rules (UTC, to the minute).
    assert hit["about"].startswith("User") and hit["time"] == "2023-11-14T22:19:20.000Z"
    assert page.text_content("#search-status") == "1 match for “zanzibar”"
    # Deltas are one passage: a word split across two of them is found, and marked whole.
    [answer] = search_for(page, "QUOKKA")
    assert (answer["kind"], answer["seq"], answer["marks"]) == ("assistant", 3 * ANSWER_AT + 1, ["quokka"])
    # The service was asked, with the query as typed; emptying the box brings the list back.
    assert any("q=QUOKKA" in address for address in requested), requested
    page.fill("#search", "")
    page.wait_for_selector("#session-list", state="visible", timeout=TIMEOUT_MS)
    assert page.is_hidden("#search-results") and page.text_content("#search-status") == ""
    # The list's own filter still answers as before.
    page.fill("#session-filter", "xss")
    page.wait_for_selector("#sessions[data-query='xss'][data-loading='false']", timeout=TIMEOUT_MS)
    assert page.locator("#session-rows > tr.session").count() == 1


def test_more_pages_on_through_the_cursor(made: str, page: Page) -> None:
    open_list(page, made)
    first = search_for(page, "common")
    assert len(first) == 20 and page.text_content("#search-status") == "20+ matches for “common”"
    assert all(hit["marks"] == ["common"] for hit in first)
    while page.is_visible("#more-hits"):
        shown = page.locator("#hits > li.hit").count()
        page.click("#more-hits")
        page.wait_for_function(f"() => document.querySelectorAll('#hits > li.hit').length > {shown}")
    hits = page.evaluate(HITS)
    common = QUESTIONS // COMMON_EVERY
    assert len(hits) == common and {(hit["session"], hit["seq"]) for hit in hits} == {
        ("long", 3 * k) for k in range(0, QUESTIONS, COMMON_EVERY)
    }
    assert page.text_content("#search-status") == f"{common} matches for “common”"


def test_searches_in_the_light_and_dark_schemes(made: str, browser: Browser) -> None:
    for scheme in ("light", "dark"):
        context = browser.new_context(viewport={"width": 900, "height": 500}, color_scheme=scheme)
        try:
            page = context.new_page()
            open_list(page, made)
            assert len(search_for(page, "plan")) == 20
            assert screenshot(page, f"search-{scheme}").stat().st_size > 0
            open_hit(page, search_for(page, "quokka")[0])
            assert screenshot(page, f"search-hit-{scheme}").stat().st_size > 0
        finally:
            context.close()


def test_a_hit_opens_its_session_at_the_match_and_pages_both_ways_to_the_live_head(made: str, page: Page) -> None:
    open_list(page, made)
    [hit] = search_for(page, "zanzibar")
    marked = open_hit(page, hit)
    assert page.url.endswith(f"?session=long&at={3 * USER_AT}")
    assert 3 * USER_AT in marked["seqs"] and marked["kind"] == "user" and "zanzibar" in marked["text"]
    assert on_screen(marked), marked
    # Far from the tail: older pages wait above, newer ones below, and nothing is followed yet.
    shown = page.evaluate("() => ({...document.getElementById('timeline').dataset})")
    assert shown["hasMore"] == "true" and shown["hasNewer"] == "true", shown
    assert page.get_attribute("#status", "data-state") == "idle" and page.is_visible("#jump")
    while (shown := page.evaluate("() => ({...document.getElementById('timeline').dataset})"))["hasMore"] == "true":
        page.evaluate(SCROLL_UP)
        page.wait_for_function(MOVED_UP, arg=shown["from"], timeout=TIMEOUT_MS)
    while (shown := page.evaluate("() => ({...document.getElementById('timeline').dataset})"))["hasNewer"] == "true":
        page.evaluate(SCROLL_DOWN)
        page.wait_for_function(MOVED_DOWN, arg=shown["cursor"], timeout=TIMEOUT_MS)
    # Every event once, in order, older pages and newer ones joined exactly; then live from the head.
    assert page.evaluate(SEQS) == list(range(3 * QUESTIONS))
    page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
    assert page.locator("#timeline > .item[data-highlight]").count() == 1
    with httpx.Client(base_url=made, timeout=30) as http:
        append(http, "long", [said(3 * QUESTIONS, "A question asked live")])
    page.wait_for_selector(f"#timeline[data-cursor='{3 * QUESTIONS}']", timeout=TIMEOUT_MS)
    assert page.locator("#timeline > .item > .body").last.text_content() == "A question asked live"


def test_a_hit_in_streamed_text_marks_its_whole_block(made: str, page: Page) -> None:
    open_list(page, made)
    [hit] = search_for(page, "quokka")
    marked = open_hit(page, hit)
    # The block's deltas straddle the page's end: its newer side completes it.
    assert marked["seqs"] == [3 * ANSWER_AT + 1, 3 * ANSWER_AT + 2] and marked["kind"] == "text"
    assert "Answer: the quokka stays." in marked["text"] and on_screen(marked)


def test_a_hit_in_a_subagent_child_opens_the_childs_view_through_its_parent(made: str, page: Page) -> None:
    open_list(page, made)
    [hit] = search_for(page, "wombat")
    assert (hit["session"], hit["parent"], hit["seq"]) == ("parent.w1", "parent", CHILD_AT)
    assert "subagent of parent" in hit["about"]
    marked = open_hit(page, hit)
    assert page.url.endswith(f"?parent=parent&session=parent.w1&at={CHILD_AT}")
    assert page.text_content("#title") == "parent › parent.w1"
    assert CHILD_AT in marked["seqs"] and "wombat" in marked["text"] and on_screen(marked)


def test_a_chinese_word_is_found_where_its_characters_stand_together(made: str, page: Page) -> None:
    open_list(page, made)
    [hit] = search_for(page, "北京")
    # Each Han character is a token, and a word the phrase of its characters: found inside a longer word too.
    assert (hit["session"], hit["seq"]) == ("cjk", 1) and hit["marks"] == ["北京"]
    assert hit["snippet"] == CHINESE
    assert search_for(page, "京北") == []
    [hit] = search_for(page, "限流")
    assert hit["marks"] == ["限流"] and hit["title"] == "Rate limits"
    marked = open_hit(page, hit)
    assert 1 in marked["seqs"] and CHINESE in marked["text"] and on_screen(marked)


def test_a_payload_in_the_matched_text_stays_text(made: str, page: Page) -> None:
    open_list(page, made)
    hits = search_for(page, "xylophone")
    assert {hit["session"] for hit in hits} == {"xss"} and len(hits) == 2
    for hit in hits:
        assert hit["marks"] == ["xylophone"] and hit["tags"] == ["MARK"]
        assert hit["snippet"] == XSS
    assert page.locator("#hits img, #hits script").count() == 0
    # Its title, the session's (its session/title), is text too.
    assert hits[0]["title"] == XSS
    marked = open_hit(page, next(hit for hit in hits if hit["kind"] == "user"))
    assert XSS in marked["text"]
    assert page.locator("#timeline img").count() == 0
    assert page.evaluate("() => window.__xss") is None


def test_a_query_the_service_refuses_shows_its_message(made: str, page: Page) -> None:
    open_list(page, made)
    assert search_for(page, "!!") == []
    page.wait_for_selector("#search-status[data-error='invalid_parameter']", timeout=TIMEOUT_MS)
    assert page.text_content("#search-status") == (
        "Cannot search for that: q holds no word to search for: give letters or digits"
    )
    # Nothing to show for it: the list stays.
    assert page.is_visible("#session-list")


def test_a_store_without_an_index_says_search_is_unavailable(tmp_path: Path, page: Page) -> None:
    with serve_in_thread(Settings(store_url=f"jsonl:///{tmp_path}")) as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            create(http, "plain", EPOCH)
            append(http, "plain", [said(0, "A session in a log file")])
        open_list(page, server.url)
        assert search_for(page, "session") == []
        page.wait_for_selector("#search-status[data-error='search_unsupported']", timeout=TIMEOUT_MS)
        assert page.text_content("#search-status") == (
            "Search is unavailable: this service's store keeps no search index."
        )
        assert page.locator("#session-rows > tr.session").count() == 1 and page.is_visible("#session-list")


# --- The real corpus: imported whole, and searched for what its users wrote ---

CJK_RUN = re.compile(r"[\u4e00-\u9fff]{2,}")
# A phrase of this many characters at most: long enough to be a phrase, short enough to stay inside one passage.
PHRASE_CHARS = 4
WORD = re.compile(r"\b[A-Za-z]{9,}\b")


def user_texts(root: Path) -> Iterator[str]:
    """The text of every user message of the corpus, log by log, in order."""
    for path in find_logs([root]).logs:
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            event = json.loads(line) if line.strip() else {}
            data = event.get("data")
            if event.get("type") != "user/message" or not isinstance(data, dict):
                continue
            if isinstance(data.get("text"), str):
                yield data["text"]
            for part in data.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]


def first_match(root: Path, pattern: re.Pattern[str]) -> str | None:
    return next((found[0] for text in user_texts(root) if (found := pattern.search(text))), None)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The corpus imported as a user would, served over SQLite; and where it was read from."""
    root = corpus_dir()
    if root is None or not root.is_dir():
        reason = f"{CORPUS_ENV}={root} is not a directory" if root else f"{CORPUS_ENV} is not set; corpus tests need it"
        pytest.skip(reason)
    store = f"sqlite:///{tmp_path_factory.mktemp('corpus') / 'corpus.db'}"
    err = io.StringIO()
    # In a thread of its own, as Playwright's sync API runs an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        args = ["import", "--rename-templated", "--store", store, str(root)]
        assert pool.submit(main, args, out=io.StringIO(), err=err).result() == 0, err.getvalue()
    with serve_in_thread(Settings(store_url=store)) as server:
        yield server.url, root


def open_corpus_hit(page: Page, hits: list[dict[str, Any]], text: str) -> None:
    """Open the first hit in a user message (else the first), and find `text` in its marked item."""
    hit = next((hit for hit in hits if hit["kind"] == "user"), hits[0])
    marked = open_hit(page, hit)
    assert hit["seq"] in marked["seqs"] and on_screen(marked), (hit, marked)
    # Set apart what separates tokens (spaces, punctuation), and case: the item holds the text searched for.
    letters = page.evaluate("(text) => text.replace(/[^\\p{L}\\p{N}]/gu, '').toLowerCase()", marked["text"])
    assert text.lower() in letters


def test_the_corpus_finds_a_chinese_phrase_and_opens_it(corpus: tuple[str, Path], page: Page) -> None:
    url, root = corpus
    run = first_match(root, CJK_RUN)
    if run is None:
        pytest.skip(f"no user message of the corpus at {root} holds two Han characters together")
    phrase = run[:PHRASE_CHARS]
    open_list(page, url)
    hits = search_for(page, phrase)
    assert hits, f"no hit for a phrase of the corpus ({len(phrase)} characters)"
    # Each mark is the phrase, but for what may stand between its characters (a space, punctuation).
    for hit in hits:
        assert hit["marks"] and all(re.sub(r"\W", "", mark) == phrase for mark in hit["marks"]), hit["marks"]
    open_corpus_hit(page, hits, phrase)


def test_the_corpus_finds_a_word_its_users_wrote_and_opens_it(corpus: tuple[str, Path], page: Page) -> None:
    url, root = corpus
    word = first_match(root, WORD)
    assert word is not None, f"no user message of the corpus at {root} holds a word of 9 letters"
    open_list(page, url)
    hits = search_for(page, word)
    assert hits and all(mark.casefold() == word.casefold() for hit in hits for mark in hit["marks"]), hits
    open_corpus_hit(page, hits, word)

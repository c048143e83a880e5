"""The search contract (docs/protocol.md §14), run against every backend: JSONL refuses, the others all answer alike."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings, strategies as st
from msgspec import UNSET

from codec import Event, SessionHeader, read_session_log
from persistence.base import HistoryStore
from persistence.clock import now_ms
from persistence.errors import SearchUnsupportedError
from persistence.search import SearchHit, SearchPage, SearchRequest, of_batch, of_events, parse
from persistence.search.terms import folded_tokens
from persistence.sql.schema import passages_table
from persistence.url import open_store
from testing.corpus import CORPUS_ENV, corpus_dir
from testing.events import plain, reasoning, text, tool
from testing.stores import BACKENDS, open_backend

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000


def header(session_id: str, **extra: object) -> SessionHeader:
    return SessionHeader(id=session_id, createdAt=T0, **extra)  # type: ignore[arg-type]


def user(seq: int, said: str, time: int = T0) -> Event:
    return plain(seq, "user/message", {"text": said}, time=time)


async def search(
    store: HistoryStore,
    q: str,
    *,
    owner: str = "local",
    limit: int = 50,
    offset: int = 0,
    closed: bool | None = None,
    since: int | None = None,
    until: int | None = None,
    now: int | None = None,
    retention_ms: int | None = None,
) -> SearchPage:
    return await store.search(
        SearchRequest(
            owner=owner,
            query=parse(q),
            limit=limit,
            offset=offset,
            closed=closed,
            since=since,
            until=until,
            now=now_ms() if now is None else now,
            retention_ms=retention_ms,
        )
    )


def found(page: SearchPage) -> set[tuple[str, int, str]]:
    return {(hit.session_id, hit.seq, hit.kind) for hit in page.hits}


def marked(hit: SearchHit) -> list[str]:
    return hit.snippet[1::2]


async def appended(store: HistoryStore, session_id: str, batches: Sequence[Sequence[Event]], **extra: object) -> None:
    await store.create_session(header(session_id, **extra))
    for batch in batches:
        await store.append(session_id, batch)


def streamed(first: int, pieces: Sequence[str], *, time: int = T0) -> list[list[Event]]:
    """One text block's deltas, each appended alone."""
    return [[text(first + at, time + at, piece)] for at, piece in enumerate(pieces)]


# Every backend but JSONL's, which keeps no index (the first test).
SEARCHABLE = [name for name in BACKENDS if getattr(name, "values", (name,))[0] not in ("jsonl", "jsonl-zstd")]


@pytest.fixture(params=SEARCHABLE)
async def searchable(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HistoryStore]:
    opened = await open_backend(request.param, tmp_path)
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_store_without_an_index_says_so_and_every_other_answers(tmp_path: Path) -> None:
    for name in ("jsonl", "jsonl-zstd"):
        store = await open_backend(name, tmp_path / name)
        try:
            with pytest.raises(SearchUnsupportedError):
                await search(store, "word")
            with pytest.raises(SearchUnsupportedError):
                await store.reindex()
        finally:
            await store.close()


async def test_a_term_a_phrase_and_a_prefix_each_find_their_passage(searchable: HistoryStore) -> None:
    store = searchable
    await appended(
        store,
        "s1",
        [[user(0, "Where is the rate limit set?"), plain(1, "turn/start", {"turn": 1})], streamed(2, ["Retrying."])[0]],
    )
    await appended(store, "s2", [[user(0, "The limit of rates is unrelated.")]])
    assert found(await search(store, "limit")) == {("s1", 0, "user"), ("s2", 0, "user")}
    assert found(await search(store, '"rate limit"')) == {("s1", 0, "user")}
    # Every word is required, whole: "rates" is not "rate".
    assert found(await search(store, "RATE LIMIT")) == {("s1", 0, "user")}
    assert found(await search(store, "retr*")) == {("s1", 2, "assistant")}
    assert found(await search(store, "rat*")) == {("s1", 0, "user"), ("s2", 0, "user")}
    hit = (await search(store, '"rate limit"')).hits[0]
    assert marked(hit) == ["rate limit"] and "".join(hit.snippet) == "Where is the rate limit set?"


async def test_a_word_split_across_deltas_of_several_appends_is_one_word(searchable: HistoryStore) -> None:
    store = searchable
    await appended(store, "s1", [[user(0, "go")], *streamed(1, ["The ra", "te li", "mit is 4", "2 per se", "cond."])])
    page = await search(store, '"rate limit is 42"')
    assert found(page) == {("s1", 1, "assistant")}
    assert page.hits[0].snippet == ["The ", "rate limit is 42", " per second."]
    # The block's deltas and the next block's do not join: another index, another step.
    await store.append("s1", [text(6, T0, "lim", index=2), text(7, T0, "its", index=3)])
    assert found(await search(store, "limits")) == set()


async def test_reasoning_a_tool_call_its_result_and_a_title_are_found_by_kind(searchable: HistoryStore) -> None:
    store = searchable
    batches = [
        [plain(0, "session/title", {"title": "Fix the flaky retries"})],
        [reasoning(1, T0, "I should open "), reasoning(2, T0, "retry.py first")],
        [tool(3, T0, '{"path": "src/', name="read_file"), tool(4, T0, 'retry.py"}')],
        [plain(5, "tool/call", {"callId": "c9", "name": "grep", "arguments": {"pattern": "backoff_factor"}})],
        [plain(6, "tool/result", {"callId": "c9", "content": [{"type": "text", "text": "found backoff_factor=2"}]})],
    ]
    await appended(store, "s1", batches)
    assert found(await search(store, "retry.py")) == {("s1", 1, "reasoning"), ("s1", 3, "tool_call")}
    assert found(await search(store, "read_file")) == {("s1", 3, "tool_call")}
    assert found(await search(store, "backoff_factor")) == {("s1", 5, "tool_call"), ("s1", 6, "tool_result")}
    assert found(await search(store, "flaky")) == {("s1", 0, "title")}
    assert {hit.title for hit in (await search(store, "flaky")).hits} == {"Fix the flaky retries"}


async def test_a_chinese_phrase_is_found_where_its_characters_stand_together(searchable: HistoryStore) -> None:
    store = searchable
    await appended(store, "s1", [[user(0, "请帮我看看北京大学的课程表")], *streamed(1, ["好的，北", "京的天气很好"])])
    assert found(await search(store, "北京")) == {("s1", 0, "user"), ("s1", 1, "assistant")}
    assert found(await search(store, "北京大学")) == {("s1", 0, "user")}
    assert found(await search(store, "京大北")) == set()
    hit = (await search(store, "课程表")).hits[0]
    assert marked(hit) == ["课程表"]


async def test_only_the_owners_sessions_answer_children_included_naming_their_parent(searchable: HistoryStore) -> None:
    store = searchable
    await store.create_session(header("p"), owner="alice")
    await store.append("p", [user(0, "a secret plan")])
    await store.create_session(header("p.c", parentSession="p", origin="subagent"), owner="alice")
    await store.append("p.c", [user(0, "the secret of the child")])
    await store.create_session(header("b"), owner="bob")
    await store.append("b", [user(0, "bob's secret")])
    alice = await search(store, "secret", owner="alice")
    assert found(alice) == {("p", 0, "user"), ("p.c", 0, "user")}
    assert {hit.session_id: hit.parent_id for hit in alice.hits} == {"p": None, "p.c": "p"}
    assert found(await search(store, "secret", owner="bob")) == {("b", 0, "user")}
    assert found(await search(store, "secret", owner="carol")) == set()


async def test_a_deleted_session_is_gone_at_once_and_its_id_created_again_answers_only_for_its_new_life(
    searchable: HistoryStore,
) -> None:
    store = searchable
    # More passages than one purge batch, so some outlive the delete's own transaction.
    await appended(store, "s1", [[user(seq, f"old words number {seq}") for seq in range(200)]])
    await appended(store, "s1.c", [[user(0, "old child words")]], parentSession="s1", origin="subagent")
    assert len(found(await search(store, "old words", limit=100))) == 100
    await store.delete_session("s1")
    assert found(await search(store, "old")) == set()
    await appended(store, "s1", [[user(0, "new words")]])
    assert found(await search(store, "words")) == {("s1", 0, "user")}
    assert found(await search(store, "old")) == set()


async def test_state_and_time_filters_and_an_expired_session(searchable: HistoryStore) -> None:
    store = searchable
    await appended(store, "open", [[user(0, "needle early", T0), user(1, "needle late", T0 + 5000)]])
    await appended(store, "shut", [[user(0, "needle shut", T0)]])
    await store.close_session("shut", closed_at=T0 + 10)
    assert found(await search(store, "needle", closed=True)) == {("shut", 0, "user")}
    assert found(await search(store, "needle", closed=False)) == {("open", 0, "user"), ("open", 1, "user")}
    assert found(await search(store, "needle", since=T0 + 1)) == {("open", 1, "user")}
    assert found(await search(store, "needle", until=T0 + 1)) == {("open", 0, "user"), ("shut", 0, "user")}
    assert found(await search(store, "needle", since=T0 + 1, until=T0 + 5000)) == set()
    await appended(store, "brief", [[user(0, "needle brief")]], expiresAt=now_ms() + 60_000)
    assert ("brief", 0, "user") in found(await search(store, "needle"))
    assert ("brief", 0, "user") not in found(await search(store, "needle", now=now_ms() + 120_000))
    # Under a retention, a session last written longer ago than it has expired too.
    assert found(await search(store, "needle", now=now_ms() + 10_000, retention_ms=1)) == set()


async def test_pages_go_newest_first_without_repeats_each_hit_ranked_by_its_matches(searchable: HistoryStore) -> None:
    store = searchable
    for number in range(7):
        await appended(store, f"s{number}", [[user(0, "word " * (number + 1), time=T0 + 10 * (number % 3))]])
    seen: list[tuple[str, int, str]] = []
    offset, more = 0, True
    while more:
        page = await search(store, "word", limit=3, offset=offset)
        seen.extend((hit.session_id, hit.seq, hit.kind) for hit in page.hits)
        offset, more = offset + len(page.hits), page.more
    assert len(seen) == len(set(seen)) == 7
    hits = (await search(store, "word")).hits
    # The latest written first, whatever times the events carry.
    assert [hit.session_id for hit in hits] == [f"s{number}" for number in reversed(range(7))]
    assert {hit.session_id: hit.rank for hit in hits} == {f"s{number}": number + 1.0 for number in range(7)}


async def test_every_store_finds_the_same_passages_as_the_memory_store(searchable: HistoryStore) -> None:
    from persistence.memory import MemoryStore

    reference = MemoryStore()
    batches = [
        [user(0, "Deploy the service to staging, then run the smoke tests.")],
        *streamed(1, ["I'll deploy ", "it now: `make dep", "loy ENV=staging`", " and then smoke-test it."]),
        [plain(5, "tool/call", {"callId": "c1", "name": "bash", "arguments": {"cmd": "make deploy ENV=staging"}})],
        [plain(6, "tool/result", {"callId": "c1", "content": "deployed to staging in 42s"})],
        [plain(7, "session/title", {"title": "Deploy to staging"})],
    ]
    for each in (store := searchable, reference):
        await appended(each, "s1", batches)
    for q in ("staging", "deploy", '"smoke test"', "smok*", "ENV=staging", "42s", "make deploy", "nothing"):
        assert found(await search(store, q)) == found(await search(reference, q)), q
    await reference.close()


# A phrase a reader would search for: a run of two to six Han or Kana characters (Chinese, Japanese),
# else three words of letters.
UNSPACED = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]{2,6}")
WORDS = re.compile(r"\b[A-Za-z]{4,} [A-Za-z]{2,} [A-Za-z]{4,}\b")


def corpus_phrases() -> list[tuple[Path, str]]:
    """Each corpus log with a phrase from its first user message or answer that holds one: an unspaced script's
    when the log has one, else three words."""
    root = corpus_dir()
    found = []
    for path in sorted(root.glob("*/session*.jsonl")) if root is not None and root.is_dir() else []:
        said = [
            p.text
            for event in read_session_log(path.read_bytes()).events
            for p in of_batch([event])
            if p.kind in ("user", "assistant")
        ]
        for pattern in (UNSPACED, WORDS):
            phrase = next((m.group() for text in said for m in pattern.finditer(text)), None)
            if phrase is not None:
                found.append((path, phrase))
                break
    return found


async def test_a_phrase_of_each_real_log_finds_it_chinese_included_where_the_corpus_has_any(
    searchable: HistoryStore,
) -> None:
    root = corpus_dir()
    if root is None or not root.is_dir():
        pytest.skip(f"{CORPUS_ENV} is not set to a folder of real logs; this test needs them")
    phrases = corpus_phrases()
    assert len(phrases) > 10, f"few logs under {root} hold a phrase: {phrases}"
    store = searchable
    for number, (path, _) in enumerate(phrases):
        log = read_session_log(path.read_bytes())
        await store.create_session(msgspec.structs.replace(log.header, id=f"log{number}", parentSession=UNSET))
        await store.append(f"log{number}", log.events)
    for number, (path, phrase) in enumerate(phrases):
        page = await search(store, f'"{phrase}"', limit=100)
        assert f"log{number}" in {hit.session_id for hit in page.hits}, (path, phrase)
        for hit in page.hits:
            assert marked(hit) and all(folded_tokens(mark) == folded_tokens(phrase) for mark in marked(hit)), phrase


async def test_reindex_rebuilds_what_appends_wrote(searchable: HistoryStore) -> None:
    store = searchable
    await appended(store, "s1", [[user(0, "alpha beta")], *streamed(1, ["gam", "ma del", "ta"])])
    before = await search(store, "delta")
    assert await store.reindex() == 2
    after = await search(store, "delta")
    assert [msgspec.structs.replace(hit, rank=0.0) for hit in after.hits] == [
        msgspec.structs.replace(hit, rank=0.0) for hit in before.hits
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.sampled_from(["text", "tool", "user"]), st.text("ab 北.", min_size=1, max_size=400)), max_size=30
    ),
    st.data(),
)
def test_the_sql_writer_keeps_the_passages_of_the_pure_rule_however_the_appends_come(
    tmp_path_factory: pytest.TempPathFactory, specs: list[tuple[str, str]], data: st.DataObject
) -> None:
    events = [
        text(seq, T0, piece) if kind == "text" else tool(seq, T0, piece) if kind == "tool" else user(seq, piece)
        for seq, (kind, piece) in enumerate(specs)
    ]
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(events) - 1)))) if len(events) > 1 else set())
    batches = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True) if events[a:b]]
    url = f"sqlite:///{tmp_path_factory.mktemp('writer') / 'h.db'}"

    async def written() -> list[tuple[Any, ...]]:
        store = await open_store(url, create=True)
        try:
            await appended(store, "s", batches)
        finally:
            await store.close()
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            p = passages_table.c
            rows = conn.execute(sa.select(p.seq, p.last_seq, p.kind, p.body, p.terms, p.open).order_by(p.id)).all()
            # The full-text index is sound, and holds exactly the passages that are not open (`persistence.sql.search`).
            conn.exec_driver_sql("INSERT INTO search_fts(search_fts) VALUES ('integrity-check')")
            states = conn.execute(sa.select(p.id, p.terms, p.open)).all()
            assert sum(open_ for _, _, open_ in states) <= 1
            for row_id, terms, open_ in states:
                if terms:
                    match = f'"{terms.split(" ")[0]}"'
                    ids = conn.exec_driver_sql("SELECT rowid FROM search_fts WHERE search_fts MATCH ?", (match,))
                    assert (row_id in {found for (found,) in ids}) == (not open_)
        engine.dispose()
        return [tuple(row) for row in rows]

    expected = of_events([events])
    rows = anyio.run(written)
    assert [row[:4] for row in rows] == [(p.seq, p.last_seq, p.kind, p.text) for p in expected]
    # An open passage's terms are written when it closes (`persistence.sql.search`).
    assert [row[4] for row in rows] == ["" if row[5] else " ".join(folded_tokens(row[3])) for row in rows]


async def test_awkward_text_is_kept_and_found_alike_in_every_store(searchable: HistoryStore) -> None:
    """Digits, quotes and backslashes, a token past 64 characters, a NUL, and passages that hold no token."""
    from persistence.memory import MemoryStore

    reference = MemoryStore()
    batches = [
        [user(0, "build 007 took 42s")],
        [user(1, "it's in C:\\tmp\\x 'quoted' \\\\ \\'")],
        [user(2, "k" * 100 + " end")],
        [user(3, "find\x00me")],
        [user(4, "!!! ... ---")],
        # A block whose first delta holds no token: its passage starts there all the same.
        *streamed(5, ["```\n", "retry", "ing now"]),
    ]
    for each in (store := searchable, reference):
        await appended(each, "s1", batches)
    expected = {
        "007": {("s1", 0, "user")},
        "42s": {("s1", 0, "user")},
        '"it s"': {("s1", 1, "user")},
        "tmp": {("s1", 1, "user")},
        "quoted": {("s1", 1, "user")},
        "k" * 64: {("s1", 2, "user")},
        "k" * 70: {("s1", 2, "user")},
        '"find me"': {("s1", 3, "user")},
        "retrying": {("s1", 5, "assistant")},
    }
    for q, hits in expected.items():
        assert found(await search(store, q)) == found(await search(reference, q)) == hits, q
    hit = (await search(store, "find")).hits[0]
    assert hit.snippet == ["", "find", "\ufffdme"]
    assert (await search(store, "retrying")).hits[0].snippet == ["``` ", "retrying", " now"]
    await reference.close()

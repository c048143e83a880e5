"""session.page responses: content coding, validators and the immutable-page cache."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
import zstandard

from codec import Page, PageRecord, SessionHeader, encode, pack_page, record_seq_range
from history_service.cli.program import main
from history_service.metrics import Metrics
from history_service.pages import (
    LIFE_CHECK_EVERY,
    EncodedPage,
    PageCache,
    PageQuery,
    PageReader,
    encode_page,
    page_records,
)
from history_service.scenarios import multi_turn
from persistence import HistoryStore, MemoryStore, SessionNotFoundError
from testing.events import make_events
from testing.seeding import seed
from testing.servers import ServerProcess
from testing.strategies import stored_in

pytestmark = pytest.mark.anyio


async def test_codings_are_negotiated_and_decode_to_the_identity_body(client: httpx.AsyncClient) -> None:
    await seed(client, scenario="multi-turn", seed=9, turns=3)
    identity = await client.get("/v1/sessions/multi-turn-9/page", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in identity.headers and identity.headers["vary"] == "Accept-Encoding"
    for header, coding in (("zstd", "zstd"), ("br;q=1, gzip;q=0.5", "br"), ("gzip", "gzip"), ("*", "zstd")):
        response = await client.get("/v1/sessions/multi-turn-9/page", headers={"Accept-Encoding": header})
        assert response.headers["content-encoding"] == coding
        assert response.headers["vary"] == "Accept-Encoding"
        # httpx decodes the coding itself; the wire size is the Content-Length.
        assert response.content == identity.content
        assert int(response.headers["content-length"]) < len(identity.content)


async def test_small_bodies_are_not_compressed(client: httpx.AsyncClient) -> None:
    await seed(client, scenario="multi-turn", seed=9, turns=1)
    response = await client.get("/v1/sessions/multi-turn-9/page?before=2", headers={"Accept-Encoding": "zstd"})
    assert len(response.content) < 1024 and "content-encoding" not in response.headers


async def test_explicit_through_is_immutable_with_a_strong_etag(client: httpx.AsyncClient) -> None:
    await seed(client, scenario="multi-turn", seed=9, turns=3)
    incarnation = (await client.get("/v1/sessions/multi-turn-9")).json()["header"]["incarnation"]
    # Immutable only when its address names the incarnation too (§2.5, §4.4).
    unnamed = await client.get("/v1/sessions/multi-turn-9/page?through=40", headers={"Accept-Encoding": "identity"})
    assert unnamed.headers["cache-control"] == "private, no-cache"
    path = f"/v1/sessions/multi-turn-9/page?through=40&incarnation={incarnation}"
    first = await client.get(path, headers={"Accept-Encoding": "identity"})
    etag = first.headers["etag"]
    assert etag.startswith(f'"{incarnation}.') and not etag.startswith("W/") and unnamed.headers["etag"] == etag
    assert first.headers["cache-control"] == "private, max-age=31536000, immutable"
    again = await client.get(path, headers={"Accept-Encoding": "identity", "If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    zstd = await client.get(path, headers={"Accept-Encoding": "zstd"})
    assert zstd.headers["etag"] != etag and zstd.headers["etag"].endswith('-zstd"')
    assert (
        await client.get(path, headers={"Accept-Encoding": "zstd", "If-None-Match": zstd.headers["etag"]})
    ).status_code == 304
    assert (
        await client.get(path, headers={"Accept-Encoding": "identity", "If-None-Match": '"other"'})
    ).status_code == 200
    # Appends after the cut change neither the body nor its validator.
    await client.post("/v1/test-only/seed", json={"scenario": "multi-turn", "seed": 10, "turns": 1})
    tail = await client.get("/v1/sessions/multi-turn-9/page")
    assert tail.headers["cache-control"] == "no-cache" and "etag" not in tail.headers
    assert (await client.get(path, headers={"Accept-Encoding": "identity"})).content == first.content


async def test_raw_expansion_covers_the_same_interval(client: httpx.AsyncClient) -> None:
    await seed(client, scenario="multi-turn", seed=9, turns=3)
    packed = (await client.get("/v1/sessions/multi-turn-9/page?maxMessages=2")).json()
    raw = (await client.get("/v1/sessions/multi-turn-9/page?maxMessages=2&expand=raw")).json()
    assert (raw["fromSeq"], raw["toSeq"]) == (packed["fromSeq"], packed["toSeq"])
    assert all(list(record) == ["event"] for record in raw["records"])
    assert len(raw["records"]) == raw["toSeq"] - raw["fromSeq"]


async def test_a_large_page_is_exact_and_its_zstd_body_one_frame(
    client: httpx.AsyncClient, store: HistoryStore
) -> None:
    """A page above the thread and send thresholds, served as parts: exact bytes in every form."""
    events = multi_turn(seed=9, turns=80, max_run=400)
    await store.create_session(SessionHeader(id="big", createdAt=0))
    for start in range(0, len(events), 512):
        await store.append("big", events[start : start + 512])
    path = f"/v1/sessions/big/page?maxMessages=1000&maxBytes={1 << 40}"
    identity = await client.get(path, headers={"Accept-Encoding": "identity"})
    assert identity.content == encode(Page(pack_page(events), False, 0, len(events)))
    assert int(identity.headers["content-length"]) == len(identity.content) > 1024 * 1024
    async with client.stream("GET", path, headers={"Accept-Encoding": "zstd"}) as response:
        assert response.headers["content-encoding"] == "zstd"
        frame = b"".join([chunk async for chunk in response.aiter_raw()])
    assert int(response.headers["content-length"]) == len(frame)
    assert zstandard.frame_content_size(frame) == len(identity.content)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(frame) == identity.content
    raw = await client.get(path + "&expand=raw", headers={"Accept-Encoding": "identity"})
    assert raw.content == encode(Page([PageRecord(event=event) for event in events], False, 0, len(events)))


def test_page_records_are_the_pages_records_one_by_one_with_the_seq_after_each() -> None:
    events = make_events(90)
    # Appended seven at a time: runs stored in pieces, joined again into the page's rows.
    stored = stored_in(events, [7] * 12 + [6])
    for lo, hi in ((0, 90), (3, 50), (41, 42)):
        expected = pack_page(events[lo:hi])
        ends = [record_seq_range(record)[1] + 1 for record in expected]
        assert page_records(stored, lo, hi) == list(zip(ends, map(encode, expected), strict=True))


def test_the_page_cache_evicts_least_recently_used_pages() -> None:
    cache = PageCache(250, 10)
    pages = {key: encode_page(bytes([key]) * 100, "a") for key in range(3)}
    cache.put((0,), pages[0])
    cache.put((1,), pages[1])
    assert cache.get((0,)) is pages[0]
    cache.put((2,), pages[2])
    assert cache.get((1,)) is None and cache.get((0,)) is pages[0] and cache.get((2,)) is pages[2]
    pages[0].encoded["zstd"] = b"z" * 100
    cache.grew((0,), pages[0], 100)
    assert cache.get((2,)) is pages[2] and cache.get((0,)) is None
    assert cache.size == 100 and len(cache) == 1


def test_the_page_cache_is_bounded_in_entries_as_well_as_bytes() -> None:
    cache = PageCache(10**9, 3)
    for key in range(10):
        cache.put((key,), encode_page(b"x" * 10, "a"))
    assert len(cache) == 3 and cache.size == 30
    assert [cache.get((key,)) is not None for key in range(10)] == [False] * 7 + [True] * 3


class CountedPage(EncodedPage):
    """A page that counts how often the cache asks for its size."""

    asked: ClassVar[list[int]] = [0]

    @property
    def size(self) -> int:
        CountedPage.asked[0] += 1
        return len(self.identity) + sum(len(body) for body in self.encoded.values())


def test_the_page_cache_accounts_in_constant_work_per_call() -> None:
    """F2: a put or a growth never re-sums the cache, so 20,000 distinct pages cost O(1) each."""
    cache = PageCache(64 * 1024, 20_000)
    for key in range(20_000):
        page = CountedPage(b"p" * 100, '"e"', {})
        cache.put((key,), page)
        page.encoded["zstd"] = b"z" * 10
        cache.grew((key,), page, 10)
        assert cache.get((key,)) is page
    # One size for each put and at most one for each eviction: never a sum over the cache.
    assert CountedPage.asked[0] <= 2 * 20_000
    assert cache.size == sum(len(p.identity) + 10 for p in [cache.get((k,)) for k in range(20_000)] if p is not None)
    assert cache.size <= 64 * 1024


async def test_without_auth_an_immutable_page_stays_cacheable_for_a_year(client: httpx.AsyncClient) -> None:
    await seed(client, scenario="multi-turn", seed=9, turns=3)
    incarnation = (await client.get("/v1/sessions/multi-turn-9")).json()["header"]["incarnation"]
    page = await client.get(f"/v1/sessions/multi-turn-9/page?through=10&incarnation={incarnation}")
    assert page.headers["cache-control"] == "private, max-age=31536000, immutable"


@pytest.mark.parametrize("backend", ["sqlite", "jsonl"])
def test_a_kept_page_is_not_served_once_another_process_deleted_its_session(tmp_path: Path, backend: str) -> None:
    url = {"sqlite": f"sqlite:///{tmp_path / 'h.db'}", "jsonl": f"jsonl:///{tmp_path / 'h'}"}[backend]
    server = ServerProcess(url)
    server.start()
    try:
        session = f"{server.url}/v1/sessions/s"
        assert httpx.post(f"{server.url}/v1/sessions", json={"id": "s", "createdAt": 0}).status_code == 201
        events = encode({"events": make_events(100)})
        appended = httpx.post(f"{session}/events", content=events, headers={"Content-Type": "application/json"})
        assert appended.status_code == 201, appended.text
        pages = [f"{session}/page?through=99", f"{session}/page?through=99&maxMessages=1"]
        for page in pages * 2:  # the second time from the server's cache
            assert httpx.get(page).status_code == 200
        # The CLI, in this process, deletes it: the server is told nothing.
        assert main(["delete", "s", "--yes", "--store", url], out=io.StringIO()) == 0
        assert httpx.get(session).status_code == 404
        time.sleep(LIFE_CHECK_EVERY)  # the bound docs/protocol.md §4.4 gives
        for page in pages:
            gone = httpx.get(page)
            assert gone.status_code == 404, (page, gone.text[:80])
            assert gone.json()["error"]["code"] == "session_not_found"
    finally:
        server.stop()


class CountedMetrics(Metrics):
    def __init__(self) -> None:
        self.cached = 0

    def page_cached(self) -> None:
        self.cached += 1


async def test_the_notices_are_settled_before_a_kept_page_is_served() -> None:
    """A delete heard only when the reader settles (as a log of notices is read) is heard before a cache hit."""
    store = MemoryStore()
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", make_events(10))
    incarnation = (await store.get_session("s")).incarnation
    cache, gone, heard = PageCache(1 << 20, 100), set[tuple[str, str]](), list[tuple[str, str]]()
    settled: list[int] = []

    def settle() -> None:
        settled.append(len(settled))
        gone.update(heard)  # what hearing a delete's notice does: Access.forget marks the incarnation gone
        for session_id, life in heard:
            cache.forget(session_id, life)

    metrics = CountedMetrics()
    reader = PageReader(
        store, cache, metrics=metrics, gone=lambda session_id, life: (session_id, life) in gone, settle=settle
    )
    query = PageQuery(through=9, before=None, max_messages=5, max_bytes=1 << 20)
    first = await reader.page("s", query, incarnation=incarnation)
    kept = await reader.page("s", query, incarnation=incarnation)
    assert kept.body.join() == first.body.join() and metrics.cached == 1
    assert settled == [0, 1]  # once per look at the cache: the read that filled it and the hit
    await store.delete_session("s")  # through another process, whose notice is not read yet
    heard.append(("s", incarnation))
    with pytest.raises(SessionNotFoundError):
        await reader.page("s", query, incarnation=incarnation)
    assert metrics.cached == 1 and len(settled) == 3 and len(cache) == 0


async def test_a_reader_without_a_cache_settles_nothing() -> None:
    store = MemoryStore()
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", make_events(3))

    def settle() -> None:
        raise AssertionError("nothing kept, nothing to settle")

    page = await PageReader(store, settle=settle).page(
        "s", PageQuery(through=2, before=None, max_messages=5, max_bytes=1 << 20)
    )
    assert page.body.size > 0

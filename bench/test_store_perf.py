"""Store benchmarks (issue: persistence). Run with ``make bench``; prints ``HISTORY_STORE_PERF_RESULT {json}``.

For each backend: append throughput of dsh-synthetic in batches of 512; the cold tail page
(a freshly opened store: cut selection plus packed records from stored rows) against the
naive path (every event decoded as a dict, cut selected, packed); the tail read's heap
peak; and a 50-message tail page of a multi-turn session against one 10x longer.
"Cold" means a new store instance with empty in-process caches; the OS page cache is warm.
Asserts structure only.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import msgspec
import pytest

from bench.fixtures import DSH_LOGICAL_EVENTS, DSH_PACKED_RECORDS, dsh_synthetic
from bench.machine import emit, machine
from bench.stores import BACKENDS, reset, url_for
from codec import Event, Page, SessionHeader, encode, pack_page
from history_service.pages import PageQuery, PageReader
from history_service.scenarios import multi_turn
from persistence import HistoryStore, open_store
from persistence.base import events_in

BATCH = 512
MAX_MESSAGES = 50


@pytest.fixture(scope="module")
def portal() -> Iterator[Any]:
    with anyio.from_thread.start_blocking_portal() as portal:
        yield portal


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, Any]]:
    collected: dict[str, Any] = {}
    yield collected
    collected["machine"] = machine()
    emit("STORE_PERF", collected)


async def write(url: str, session_id: str, events: list[Event]) -> float:
    store = await open_store(url, create=True)
    await store.create_session(SessionHeader(id=session_id, createdAt=0))
    start = time.perf_counter()
    for i in range(0, len(events), BATCH):
        await store.append(session_id, events[i : i + BATCH])
    elapsed = time.perf_counter() - start
    await store.close()
    return elapsed


TAIL = PageQuery(through=None, before=None, max_messages=MAX_MESSAGES, max_bytes=1 << 62)


async def tail_page(store: HistoryStore, session_id: str) -> bytes:
    return (await PageReader(store).page(session_id, TAIL)).body.join()


_ANY = msgspec.json.Decoder()


async def naive_tail_page(store: HistoryStore, session_id: str) -> bytes:
    """What a store without the index and builder would do: everything as dicts, then select and pack."""
    head = await store.head_seq(session_id)
    dicts = [_ANY.decode(encode(e)) for e in events_in(await store.read_stored(session_id, 0, head + 1), 0, head + 1)]
    count, cut, running = 0, 0, head + 1
    for value in reversed(dicts):
        if value["type"] in ("user/message", "assistant/message") and value.get("surfaceOp") == "append":
            count += 1
            running = min([running, value["seq"], *value.get("sourceEventSeqs", ())])
            if count >= MAX_MESSAGES:
                cut = running
                break
    events = [msgspec.convert(v, Event) for v in dicts[cut:]]
    return encode(Page(pack_page(events), cut > 0, cut, head + 1))


def cold(portal: Any, url: str, fn: Any, session_id: str, rounds: int) -> tuple[list[float], bytes]:
    samples, body = [], b""
    for _ in range(rounds):
        store = portal.call(open_store, url)
        start = time.perf_counter()
        body = portal.call(fn, store, session_id)
        samples.append((time.perf_counter() - start) * 1000)
        portal.call(store.close)
    return samples, body


def heap_peak(portal: Any, url: str, session_id: str) -> int:
    store = portal.call(open_store, url)
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    portal.call(tail_page, store, session_id)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    portal.call(store.close)
    return peak


def ms(samples: list[float]) -> dict[str, Any]:
    return {"medianMs": round(statistics.median(samples), 2), "samplesMs": [round(s, 2) for s in samples]}


@pytest.mark.parametrize("backend", BACKENDS)
def test_store_backend(backend: str, portal: Any, results: dict[str, Any], tmp_path: Path) -> None:
    url = url_for(backend, tmp_path)
    portal.call(reset, url)
    events = dsh_synthetic()
    assert len(events) == DSH_LOGICAL_EVENTS
    appended = portal.call(write, url, "dsh", events)

    tail, body = cold(portal, url, tail_page, "dsh", 7)
    naive, naive_body = cold(portal, url, naive_tail_page, "dsh", 3)
    expected = encode(Page(pack_page(events), False, 0, len(events)))
    assert body == expected == naive_body
    assert body.count(b'{"chunks":') == 116 and body.count(b'{"event":') == DSH_PACKED_RECORDS - 116
    peaks = [heap_peak(portal, url, "dsh") for _ in range(3)]

    base_events = multi_turn(seed=7, turns=60, max_run=60)
    long_events = multi_turn(seed=7, turns=600, max_run=60)
    portal.call(write, url, "base", base_events)
    portal.call(write, url, "long", long_events)
    base_tail, base_body = cold(portal, url, tail_page, "base", 7)
    long_tail, long_body = cold(portal, url, tail_page, "long", 7)
    assert base_body.count(b"assistant/message") >= 20 and long_body.count(b"assistant/message") >= 20

    results[backend] = {
        "appendEventsPerSec": round(len(events) / appended),
        "coldTailPage": ms(tail),
        "naiveTailPage": ms(naive),
        "coldVsNaive": round(statistics.median(naive) / statistics.median(tail), 1),
        "packedPageBytes": len(body),
        "heapPeakBytes": {"median": int(statistics.median(peaks)), "samples": peaks},
        "heapPeakOverPageBytes": round(statistics.median(peaks) / len(body), 2),
        "longSession": {
            "baseEvents": len(base_events),
            "longEvents": len(long_events),
            "baseTail": ms(base_tail),
            "longTail": ms(long_tail),
            "longOverBase": round(statistics.median(long_tail) / statistics.median(base_tail), 2),
        },
    }

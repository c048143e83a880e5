"""A cold tail page, timed in a fresh process: the host the benchmarks compare.

``python -m bench.cold_page URL KIND MAX_MESSAGES ROUNDS`` opens a new store instance per
round and times head, cut, read and encode of the tail page of session ``s``. KIND is:

* ``packed``: the service's own `PageReader` (cut, one read, splice), up to the body's
  parts, which the service sends as they are;
* ``raw``: ``read_events``, then one ``{"event"}`` record each, encoded: the plain way to
  serve ``?expand=raw``;
* ``raw-events``: URL is a SQLite file with one raw event JSON per row, spliced into the
  page without decoding;
* ``heap``: ``packed`` under tracemalloc; each sample is the peak in bytes above the open
  store (sending adds at most one send's copy, `history_service.responses.SEND_SIZE`).

It prints ``{"samplesMs": [...], "sha256", "bytes"}``.

The bench process holds its fixture (millions of events for ``long-session``), and its
garbage collector and page faults would be charged to the page; a real host holds none.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import anyio

from codec import Event, Page, PageRecord, SplicedRecords, encode, page_body
from history_service.pages import PageBody, PageQuery, PageReader
from persistence import open_store

__all__ = ["cold_page", "fill_raw_events", "in_host", "main"]


async def cold_page(url: str, kind: str, max_messages: int) -> tuple[float, bytes]:
    """One cold tail page from a new store instance: elapsed ms and the body."""
    store = await open_store(url)
    start = time.perf_counter()
    head = await store.head_seq("s")
    if kind == "packed":
        query = PageQuery(through=None, before=None, max_messages=max_messages, max_bytes=1 << 62)
        parts = (await PageReader(store).page("s", query)).body
    else:
        cut = (await store.page_cuts("s", to_seq=head + 1, max_messages=max_messages))[-1]
        events = await store.read_events("s", cut, head + 1)
        parts = PageBody.of(encode(Page([PageRecord(event=event) for event in events], cut > 0, cut, head + 1)))
    elapsed = (time.perf_counter() - start) * 1000
    await store.close()
    return elapsed, parts.join()


async def heap_peak(url: str, max_messages: int) -> tuple[float, bytes]:
    """The traced heap peak of one packed page read, above what the open store already holds."""
    store = await open_store(url)
    query = PageQuery(through=None, before=None, max_messages=max_messages, max_bytes=1 << 62)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    parts = (await PageReader(store).page("s", query)).body
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    await store.close()
    return float(peak), parts.join()


def raw_events_page(path: str, from_seq: int, to_seq: int) -> tuple[float, bytes]:
    db = sqlite3.connect(path)
    start = time.perf_counter()
    rows = db.execute("SELECT data FROM events WHERE seq >= ? AND seq < ? ORDER BY seq", (from_seq, to_seq))
    records = SplicedRecords()
    records.add_each(from_seq, [b'{"event":%b}' % data for (data,) in rows])
    body = page_body(records, 0, from_seq, to_seq)
    elapsed = (time.perf_counter() - start) * 1000
    db.close()
    return elapsed, body


def in_host(url: str, kind: str, limit: str, expected: bytes, rounds: int) -> list[float]:
    """Samples from a fresh host process running this module, its body checked against ``expected``."""
    run = subprocess.run(
        [sys.executable, "-m", "bench.cold_page", url, kind, limit, str(rounds)],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(run.stdout)
    assert result["sha256"] == hashlib.sha256(expected).hexdigest(), f"{url} {kind} page differs from ours"
    return [float(sample) for sample in result["samplesMs"]]


def fill_raw_events(path: Path, events: list[Event]) -> None:
    """The host the seed started from: every logical event stored as its own JSON row."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        db.executemany("INSERT INTO events VALUES (?, ?)", ((event.seq, encode(event)) for event in events))
    db.close()


def main(argv: Sequence[str] | None = None) -> int:
    url, kind, limit, rounds = argv if argv is not None else sys.argv[1:]
    samples, body = [], b""
    for _ in range(int(rounds)):
        if kind == "raw-events":
            from_seq, to_seq = map(int, limit.split(":"))
            elapsed, body = raw_events_page(url, from_seq, to_seq)
        elif kind == "heap":
            elapsed, body = anyio.run(heap_peak, url, int(limit))
        else:
            elapsed, body = anyio.run(cold_page, url, kind, int(limit))
        samples.append(round(elapsed, 2))
    print(json.dumps({"samplesMs": samples, "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A cold tail page, timed in a fresh process: the host the benchmarks compare.

``python -m bench.cold_page URL KIND MAX_MESSAGES ROUNDS`` opens a new store instance per
round and times head, cut, read and encode of the tail page of session ``s``; KIND is
``packed``, ``raw`` (``read_events`` then encode, what ``?expand=raw`` costs) or
``raw-events`` (URL is then a SQLite file with one raw event JSON per row, spliced into the
page without decoding). It prints ``{"samplesMs": [...], "sha256", "bytes"}``.

The bench process holds its fixture (millions of events for ``long-session``), and its
garbage collector and page faults would be charged to the page; a real host holds none.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
import time
from collections.abc import Sequence

import anyio

from codec import Page, PageRecord, encode
from persistence import open_store
from persistence.page_builder import records_body

__all__ = ["cold_page", "main"]


def _frame(records: bytes, cut: int, to_seq: int) -> bytes:
    more = b"true" if cut > 0 else b"false"
    return b'{"records":%b,"hasMore":%b,"fromSeq":%d,"toSeq":%d}' % (records, more, cut, to_seq)


async def cold_page(url: str, kind: str, max_messages: int) -> tuple[float, bytes]:
    """One cold tail page from a new store instance: elapsed ms and the body."""
    store = await open_store(url)
    start = time.perf_counter()
    head = await store.head_seq("s")
    cut = (await store.page_cuts("s", to_seq=head + 1, max_messages=max_messages))[-1]
    if kind == "packed":
        body = _frame(records_body(await store.page_records("s", cut, head + 1)), cut, head + 1)
    else:
        events = await store.read_events("s", cut, head + 1)
        body = encode(Page([PageRecord(event=event) for event in events], cut > 0, cut, head + 1))
    elapsed = (time.perf_counter() - start) * 1000
    await store.close()
    return elapsed, body


def raw_events_page(path: str, from_seq: int, to_seq: int) -> tuple[float, bytes]:
    db = sqlite3.connect(path)
    start = time.perf_counter()
    rows = db.execute("SELECT data FROM events WHERE seq >= ? AND seq < ? ORDER BY seq", (from_seq, to_seq))
    body = _frame(b"[" + b",".join([b'{"event":%b}' % data for (data,) in rows]) + b"]", from_seq, to_seq)
    elapsed = (time.perf_counter() - start) * 1000
    db.close()
    return elapsed, body


def main(argv: Sequence[str] | None = None) -> int:
    url, kind, limit, rounds = argv if argv is not None else sys.argv[1:]
    samples, body = [], b""
    for _ in range(int(rounds)):
        if kind == "raw-events":
            from_seq, to_seq = map(int, limit.split(":"))
            elapsed, body = raw_events_page(url, from_seq, to_seq)
        else:
            elapsed, body = anyio.run(cold_page, url, kind, int(limit))
        samples.append(round(elapsed, 2))
    print(json.dumps({"samplesMs": samples, "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The viewer in Chromium: from the tail page's last byte to the tail rendered. Run with ``make bench``.

The service holds the dsh-synthetic session (416,756 logical events, written by the test
seeder), and the viewer opens it: its tail page is the whole session. The page itself records,
with the Resource Timing entry of that response and ``performance.now()`` after the next
animation frame, how long parsing, validating and rendering took once the last byte arrived.
Prints ``HISTORY_VIEWER_PERF_RESULT {json}`` with the median of several fresh loads, per
response coding; asserts structure only. ``HISTORY_BENCH_SMOKE=1`` seeds a small multi-turn
session instead. Skips, and says why, without chromium.

A live burst: with the viewer open and live on a fresh session, 3,000 events are appended in
quick batches of 100 (user messages; user messages whose ``surfaceOp`` replaces a range that
matches nothing; text deltas), and 1,500 user messages; the time from the last append's answer
to the viewer's cursor reaching the last seq is printed as ``HISTORY_VIEWER_BURST_RESULT {json}``.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.machine import emit, machine
from testing.browser import chromium_path, launch, missing_reason
from testing.servers import ServerProcess

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
LOADS = 2 if SMOKE else 7
CODINGS = ["identity", "zstd"] if SMOKE else ["identity", "gzip", "br", "zstd"]
SEED = {"scenario": "multi-turn", "seed": 1, "turns": 4} if SMOKE else {"scenario": "dsh-synthetic"}

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=missing_reason() or "")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, int]]:
    db = Path(tmp_path_factory.mktemp("viewer-perf")) / "h.db"
    server = ServerProcess(f"sqlite:///{db}", env={"HISTORY_ENABLE_TEST_SEED": "1"})
    server.start()
    try:
        response = httpx.post(f"{server.url}/v1/test-only/seed", json=SEED, timeout=600)
        assert response.status_code == 201, response.text
        session = response.json()["sessions"][0]
        yield server.url, session["id"], session["headSeq"] + 1
    finally:
        server.stop()


def test_tail_page_to_rendered(served: tuple[str, str, int]) -> None:
    url, session, events = served
    result: dict[str, Any] = {"session": session, "events": events, "loads": LOADS, "codings": {}}
    with launch() as browser:
        for coding in CODINGS:
            samples: list[float] = []
            for _ in range(LOADS):
                context = browser.new_context()
                page = context.new_page()
                context.set_extra_http_headers({"Accept-Encoding": coding})
                page.goto(f"{url}/viewer/?session={session}")
                page.wait_for_selector("html[data-ready='true']", timeout=300_000)
                metrics = page.evaluate("() => window.viewerMetrics")
                assert metrics["renderedMs"] is not None and metrics["records"] > 0
                assert page.get_attribute("#timeline", "data-cursor") == str(events - 1)
                samples.append(metrics["renderedMs"])
                result["codings"][coding] = {"records": metrics["records"], "transfer_bytes": metrics["transferSize"]}
                context.close()
            result["codings"][coding]["rendered_ms"] = {
                "median": round(statistics.median(samples), 1),
                "samples": [round(s, 1) for s in samples],
            }
        result["browser"] = browser.version
    result["machine"] = machine(chromium=chromium_path())
    emit("VIEWER_PERF", result)
    assert set(result["codings"]) == set(CODINGS)


BURST_BATCH = 100
BURSTS = [
    ("user messages", 1_500),
    ("user messages", 3_000),
    ("replacements that match nothing", 3_000),
    ("text deltas", 3_000),
]


def burst_event(kind: str, seq: int) -> dict[str, Any]:
    if kind == "text deltas":
        chunk = {"type": "text-delta", "index": 0, "text": f"{seq} "}
        return {"type": "assistant/chunk", "seq": seq, "time": seq, "data": {"turn": 1, "step": 1, "chunk": chunk}}
    op: Any = {"op": "replace", "start": 10**9 + seq, "end": 10**9 + seq} if kind.startswith("replace") else "append"
    data = {"id": f"u{seq}", "role": "user", "content": [{"type": "text", "text": f"message {seq}"}]}
    return {"type": "user/message", "seq": seq, "time": seq, "data": data, "surfaceOp": op}


def test_live_burst_to_rendered(tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path / 'burst.db'}")
    server.start()
    result: dict[str, Any] = {"batch": BURST_BATCH, "bursts": []}
    try:
        with launch() as browser, httpx.Client(base_url=server.url, timeout=60) as http:
            for n, (kind, count) in enumerate(BURSTS):
                session = f"burst-{n}"
                assert http.post("/v1/sessions", json={"id": session, "createdAt": 0}).status_code == 201
                turn = {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}
                assert http.post(f"/v1/sessions/{session}/events", json={"events": [turn]}).status_code in (200, 201)
                context = browser.new_context(viewport={"width": 900, "height": 400})
                page = context.new_page()
                page.goto(f"{server.url}/viewer/?session={session}")
                page.wait_for_selector("#status[data-state='live']", timeout=60_000)
                events = [burst_event(kind, 1 + k) for k in range(count)]
                started = time.perf_counter()
                for k in range(0, count, BURST_BATCH):
                    response = http.post(f"/v1/sessions/{session}/events", json={"events": events[k : k + BURST_BATCH]})
                    assert response.status_code in (200, 201), response.text
                appended = time.perf_counter()
                page.wait_for_function(
                    f"() => document.getElementById('timeline').dataset.cursor === '{count}'",
                    timeout=600_000,
                    polling="raf",
                )
                shown = time.perf_counter()
                items = page.evaluate("() => document.querySelectorAll('#timeline > .item').length")
                assert items == (2 if kind == "text deltas" else 1 + count)
                result["bursts"].append(
                    {
                        "kind": kind,
                        "events": count,
                        "append_s": round(appended - started, 3),
                        "shown_after_last_append_s": round(shown - appended, 3),
                    }
                )
                context.close()
            result["browser"] = browser.version
    finally:
        server.stop()
    result["machine"] = machine(chromium=chromium_path())
    emit("VIEWER_BURST", result)
    assert len(result["bursts"]) == len(BURSTS)

"""The viewer in Chromium: from the tail page's last byte to the tail rendered. Run with ``make bench``.

The service holds the dsh-synthetic session (416,756 logical events, written by the test
seeder), and the viewer opens it: its tail page is the whole session. The page itself records,
with the Resource Timing entry of that response and ``performance.now()`` after the next
animation frame, how long parsing, validating and rendering took once the last byte arrived.
Prints ``HISTORY_VIEWER_PERF_RESULT {json}`` with the median of several fresh loads, per
response coding; asserts structure only. ``HISTORY_BENCH_SMOKE=1`` seeds a small multi-turn
session instead. Skips, and says why, without chromium.
"""

from __future__ import annotations

import os
import statistics
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

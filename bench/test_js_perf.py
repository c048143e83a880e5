"""The JavaScript codec's benchmark, clients/js/bench/page.bench.js, run under ``make bench``.

Writes the ``realistic`` tail page (packed and raw) with `bench.js_fixture`, runs the Node
script on it in a process of its own, and passes its ``HISTORY_JS_PAGE_PERF_RESULT`` line
on. ``HISTORY_BENCH_SMOKE=1`` uses a fixture 50 times smaller. Asserts structure only; skips,
and says why, without node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.js_fixture import write_pages

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "clients" / "js" / "bench" / "page.bench.js"
SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
NODE = shutil.which("node")
PREFIX = "HISTORY_JS_PAGE_PERF_RESULT "

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH (scripts/with-node installs Debian's nodejs)")


def test_javascript_page_decoding(tmp_path: Path) -> None:
    assert NODE is not None
    meta = write_pages(tmp_path, scale=50 if SMOKE else 1)
    run = subprocess.run(
        [NODE, "--expose-gc", str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=1800
    )
    assert run.returncode == 0, run.stderr[-5000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith(PREFIX))
    result = json.loads(line.removeprefix(PREFIX))
    print(f"\n{line}", flush=True)
    assert result["page"]["events"] == meta["events"] and result["expansion"]["events"] == meta["events"]
    assert {"packed", "raw"} <= set(result["validatedPage"]) and {"page", "stream", "events"} <= set(result["heap"])

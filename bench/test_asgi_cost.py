"""Our app's own time per small request, in process, beside bare Starlette's (`bench.asgi_cost`).

Runs ``python -m bench.asgi_cost`` in a process of its own (it configures the process's
logging as ``serve`` does), prints its result line, and asserts its structure, never time.
``HISTORY_BENCH_SMOKE=1`` runs it tiny.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
CELLS = {
    "healthz.bare",
    "healthz.shipped",
    "healthz.quiet",
    "append.shipped",
    "append.quiet",
    "append.sqlite",
    "page.shipped",
    "page.quiet",
}


def test_our_small_requests_beside_the_frameworks_floor_in_process() -> None:
    size = ["--rounds", "2", "--requests", "20"] if SMOKE else []
    done = subprocess.run(
        [sys.executable, "-m", "bench.asgi_cost", *size], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("HISTORY_ASGI_COST_RESULT ")]
    print(f"\n{line}", flush=True)
    result = json.loads(line.partition(" ")[2])
    assert set(result["microseconds"]) == CELLS
    assert set(result["bareOver"]) == CELLS - {"healthz.bare"}
    assert all(value > 0 for value in result["microseconds"].values())
    assert result["machine"]["rounds"] == (2 if SMOKE else 15)

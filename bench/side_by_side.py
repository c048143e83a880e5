"""Two checkouts' services side by side in one run: closed-loop windows, alternating between them.

    python -m bench.side_by_side BEFORE AFTER [--store sqlite|jsonl|postgresql] [--rounds 10] [--seconds 3]

``BEFORE`` and ``AFTER`` are checkouts, each with its own ``.venv`` (``make venv``). Both
services run at once, each on its own store (a file under a temporary directory, or its own
database on the server of ``HISTORY_TEST_PG_URL``: run under ``scripts/with-postgres``), and only one is
loaded at a time: each round runs an ``append`` and a ``page`` window of 50 connections
(`bench.throughput.run_cell`) on each, in an order that swaps every round, so drift on a
noisy machine falls on both alike. Prints ``HISTORY_SIDE_BY_SIDE_RESULT {json}``: each
window's requests a second, their medians, and the median of the rounds' after/before
ratios. Asserts that every answer was the expected one, never a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.machine import emit, machine
from bench.throughput import Workload, run, run_cell
from codec import encode
from history_service.scenarios import multi_turn
from testing.postgres import new_database
from testing.servers import free_port

CONNECTIONS = 50
WORKLOADS: tuple[Workload, ...] = ("append", "page")
ENV = {"HISTORY_AUTH": "none", "HISTORY_TIMEOUT_KEEP_ALIVE": "60", "HISTORY_HTTP": "httptools"}


def start(checkout: Path, store_url: str, log: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """``history-service serve`` of ``checkout``'s own venv; its URL once ``/healthz`` answers."""
    port = free_port()
    command = [str(checkout / ".venv" / "bin" / "python"), "-m", "history_service.cli", "serve"]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*command, "--store", store_url, "--port", str(port)],
            cwd=checkout,
            env={**os.environ, **ENV},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                return url, process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"{checkout} did not serve within 60 s; see {log}")


def store_url(store: str, tmp: Path, side: str) -> str:
    """An empty store of this kind for one side: a file or directory under ``tmp``, or a new database."""
    if store == "sqlite":
        return f"sqlite:///{tmp / side}.db"
    if store == "jsonl":
        (tmp / side).mkdir()
        return f"jsonl:///{tmp / side}"
    shared = os.environ.get("HISTORY_TEST_PG_URL")
    if not shared:
        raise SystemExit("--store postgresql needs HISTORY_TEST_PG_URL: run under scripts/with-postgres")
    return new_database(f"side_by_side_{side}", beside=shared)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.side_by_side", description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path, help="the checkout measured first in even rounds")
    parser.add_argument("after", type=Path, help="the checkout it is compared with")
    parser.add_argument("--store", choices=("sqlite", "jsonl", "postgresql"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    seed = encode({"events": multi_turn(seed=3, turns=3, max_run=2)})
    results: dict[str, dict[str, list[int]]] = {w: {"before": [], "after": []} for w in WORKLOADS}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {}
        for side in ("before", "after"):
            url = store_url(args.store, Path(tmp), side)
            servers[side] = start(getattr(args, side).resolve(), url, Path(tmp) / f"{side}.log")
        try:
            for round_ in range(args.rounds):
                for workload in WORKLOADS:
                    for side in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                        url, process = servers[side]
                        cell = run(
                            run_cell(
                                url,
                                workload,
                                connections=CONNECTIONS,
                                seconds=args.seconds,
                                prefix=f"{workload}-{round_}",
                                seed=seed,
                                pid=process.pid,
                            )
                        )
                        assert cell["non2xx"] == 0 and cell["wrong"] == 0, cell
                        results[workload][side].append(cell["perSec"])
                        print(f"[side by side] round {round_} {workload} {side}: {cell['perSec']}/s", file=sys.stderr)
        finally:
            for _, process in servers.values():
                process.terminate()
                process.wait()
    summary: dict[str, Any] = {}
    for name, by_side in results.items():
        before, after = by_side["before"], by_side["after"]
        summary[name] = {
            "beforePerSec": before,
            "afterPerSec": after,
            "beforeMedian": statistics.median(before),
            "afterMedian": statistics.median(after),
            "pairedRatioMedian": round(statistics.median(a / b for a, b in zip(after, before, strict=True)), 3),
        }
    facts = machine(smoke=False, store=args.store, connections=CONNECTIONS, seconds=args.seconds, rounds=args.rounds)
    emit("SIDE_BY_SIDE", {"machine": facts, "before": str(args.before), "after": str(args.after), **summary})


if __name__ == "__main__":
    main()

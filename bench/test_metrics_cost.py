"""What metrics cost the page, append and follow paths: the same service with ``HISTORY_METRICS`` on and off.

Two SQLite service processes, one with metrics and one without, run the same cells back to
back, alternating which goes first, for several rounds: small pages and durable one-event
appends at 10 and 50 connections (the closed loop of `bench.throughput`), and follow delivery
to 50 followers at 1,000 events/s (`bench.follow_load`). Prints
``HISTORY_METRICS_COST_RESULT {json}`` with each cell's medians, on and off, and their ratio.
Asserts structure only; ``HISTORY_BENCH_SMOKE=1`` runs it tiny.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.follow_load import run_load
from bench.machine import emit, machine
from bench.throughput import run, run_cell
from codec import encode
from history_service.scenarios import multi_turn
from testing.servers import ServerProcess

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
SECONDS = 0.3 if SMOKE else 4.0
ROUNDS = 1 if SMOKE else 3
CONNECTIONS = [10] if SMOKE else [10, 50]
FOLLOWERS = 5 if SMOKE else 50
FOLLOW_RATE = 200 if SMOKE else 1000
SEED = multi_turn(seed=3, turns=3, max_run=2)
ENV = {"HISTORY_AUTH": "none", "HISTORY_TIMEOUT_KEEP_ALIVE": "60", "HISTORY_HTTP": "httptools"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    root = Path(tmp_path_factory.mktemp("metrics-cost"))
    started = {
        side: ServerProcess(f"sqlite:///{root / f'{side}.db'}", env={**ENV, "HISTORY_METRICS": flag})
        for side, flag in (("on", "1"), ("off", "0"))
    }
    for server in started.values():
        server.start()
    yield started
    for server in started.values():
        server.stop()


def test_metrics_on_and_off(servers: dict[str, ServerProcess]) -> None:
    assert httpx.get(f"{servers['on'].url}/metrics").status_code == 200
    assert httpx.get(f"{servers['off'].url}/metrics").status_code == 404
    samples: dict[str, dict[str, list[float]]] = {}
    seed = encode({"events": SEED})
    follow_next = {side: {f"follow-{side}": 0} for side in servers}
    for side, server in servers.items():
        assert httpx.post(f"{server.url}/v1/sessions", json={"id": f"follow-{side}", "createdAt": 0}).status_code == 201
    for round_ in range(ROUNDS):
        # Alternate which side goes first, so drift in the machine's speed falls on both.
        order = ["on", "off"] if round_ % 2 == 0 else ["off", "on"]
        for workload in ("page", "append"):
            for connections in CONNECTIONS:
                for side in order:
                    cell = run(
                        run_cell(
                            servers[side].url,
                            "append" if workload == "append" else "page",
                            connections=connections,
                            seconds=SECONDS,
                            prefix=f"{side}-{workload}-{connections}-{round_}",
                            seed=seed,
                        )
                    )
                    assert cell["non2xx"] == 0 and cell["wrong"] == 0, cell
                    name = f"{workload}.{connections}"
                    samples.setdefault(name, {"on": [], "off": []})[side].append(cell["perSec"])
        for side in order:
            outcome = asyncio.run(
                run_load(
                    servers[side].url,
                    followers=FOLLOWERS,
                    rate=FOLLOW_RATE,
                    seconds=SECONDS,
                    sessions=follow_next[side],
                )
            )
            assert outcome["lost"] == 0 and outcome["duplicated"] == 0, outcome
            cell = samples.setdefault("follow.p50Ms", {"on": [], "off": []})
            cell[side].append(outcome["p50Ms"])
            samples.setdefault("follow.p99Ms", {"on": [], "off": []})[side].append(outcome["p99Ms"])
    cells = {
        name: {
            "on": statistics.median(by["on"]),
            "off": statistics.median(by["off"]),
            "onOverOff": round(statistics.median(by["on"]) / statistics.median(by["off"]), 3),
            "samples": by,
        }
        for name, by in samples.items()
    }
    emit(
        "METRICS_COST",
        {"machine": machine(seconds=SECONDS, rounds=ROUNDS, followers=FOLLOWERS, rate=FOLLOW_RATE), "cells": cells},
    )
    assert {"page.10", "append.10", "follow.p50Ms"} <= set(cells)

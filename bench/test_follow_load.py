"""Follow under load: followers × append rate, on one session and on many.

A ``history-service serve`` process on SQLite; for each cell a producer process appends
in pipelined batches of 10 while raw-socket followers read their streams (`bench.follow_load`).
Prints ``HISTORY_FOLLOW_LOAD_RESULT {json}`` with one entry per cell: p50/p99/max delivery
latency, achieved append rate, deliveries per second, and lost, duplicated and
undelivered counts. ``HISTORY_BENCH_SMOKE=1`` runs a small grid for one second per cell.
Asserts structure only (every delivery accounted for; none lost or duplicated), never time.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.follow_load import run_load
from bench.machine import emit, machine
from testing.servers import ServerProcess

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
FOLLOWERS = [1, 5] if SMOKE else [1, 10, 50, 200]
RATES = [100, 500] if SMOKE else [100, 1000, 5000]
SESSIONS = [1, 4] if SMOKE else [1, 20]
SECONDS = 1.0 if SMOKE else float(os.environ.get("HISTORY_BENCH_FOLLOW_SECONDS", "5"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process = ServerProcess(f"sqlite:///{Path(tmp_path_factory.mktemp('follow')) / 'h.db'}")
    process.start()
    for n in range(max(SESSIONS)):
        response = httpx.post(f"{process.url}/v1/sessions", json={"id": f"load-{n}", "createdAt": 0})
        assert response.status_code == 201, response.text
    yield process.url
    process.stop()


@pytest.fixture(scope="module")
def cells() -> Iterator[list[dict[str, Any]]]:
    collected: list[dict[str, Any]] = []
    yield collected
    emit("FOLLOW_LOAD", {"machine": machine(smoke=SMOKE, seconds=SECONDS), "cells": collected})


NEXT_SEQ: dict[str, int] = {}


@pytest.mark.parametrize("sessions", SESSIONS)
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("followers", FOLLOWERS)
def test_follow_load_cell(server: str, cells: list[dict[str, Any]], followers: int, rate: int, sessions: int) -> None:
    if followers < sessions:
        pytest.skip("fewer followers than sessions")
    names = {f"load-{n}": NEXT_SEQ.get(f"load-{n}", 0) for n in range(sessions)}
    print(f"[follow-load] {followers} followers, {rate} ev/s, {sessions} session(s)", file=sys.stderr, flush=True)
    outcome = asyncio.run(run_load(server, followers=followers, rate=rate, seconds=SECONDS, sessions=names))
    NEXT_SEQ.update(names)
    accounted = outcome["deliveries"] + outcome["lost"] + outcome["undeliveredAtTimeout"]
    assert accounted == outcome["expectedDeliveries"]
    assert outcome["lost"] == 0 and outcome["duplicated"] == 0
    cells.append(outcome)

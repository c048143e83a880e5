"""Durable Streams (issue 27): our /ds beside the Node reference server, side by side in one run.

* appends: 50 connections, each appending one small ``text/plain`` message at a time to its
  own stream (`bench.throughput`'s ``stream-append``), on the reference server (in memory),
  our memory store and our SQLite store (durable);
* SSE fan-out: 100 SSE readers of one stream while one writer appends 500 messages a second
  (`bench.fanout`), on the reference server and on our SQLite store: delivery latency, p50 and p99.

Prints ``HISTORY_DS_RESULT {json}`` with every cell and the ratios the issue names.
``HISTORY_BENCH_DS_SECONDS`` sets each window (default 5 for appends, twice that for the
fan-out); ``HISTORY_BENCH_SMOKE=1`` runs it tiny. The reference needs ``HISTORY_DS_REFERENCE``
(`scripts/with-node`); without it its cells and the ratios are ``null``, and the line says why.
Asserts structure (every append answered, every event delivered once), never time.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.fanout import fan_out
from bench.machine import emit, machine
from bench.throughput import run, run_cell
from testing.servers import ServerProcess, ds_reference_server

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
SECONDS = 0.3 if SMOKE else float(os.environ.get("HISTORY_BENCH_DS_SECONDS", "5"))
CONNECTIONS = 10 if SMOKE else 50
READERS = 5 if SMOKE else 100
RATE = 50 if SMOKE else 500
REFERENCE = os.environ.get("HISTORY_DS_REFERENCE")
SHIPPED = {"HISTORY_AUTH": "none", "HISTORY_TIMEOUT_KEEP_ALIVE": "60", "HISTORY_HTTP": "httptools"}


def appends(url: str, pid: int, prefix: str) -> dict[str, Any]:
    out = run(run_cell(url, "stream-append", connections=CONNECTIONS, seconds=SECONDS, prefix=prefix, pid=pid))
    assert out["requests"] > 0 and out["non2xx"] == 0 and out["wrong"] == 0, out
    return out


def fanned(url: str, name: str) -> dict[str, Any]:
    out = fan_out(url, name, readers=READERS, rate=RATE, seconds=2 * SECONDS)
    assert out["delivered"] == out["expected"], out
    return out


def ratio(cells: dict[str, dict[str, Any] | None], top: str, bottom: str, key: str) -> float | None:
    over, under = cells.get(top), cells.get(bottom)
    if over is None or under is None or not under[key]:
        return None
    return round(float(over[key]) / float(under[key]), 3)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("ds")


def test_durable_streams_beside_the_reference_server(root: Path) -> None:
    cells: dict[str, dict[str, Any] | None] = {}
    why = None
    if REFERENCE is None or shutil.which("node") is None:
        why = "HISTORY_DS_REFERENCE or node is missing; run under scripts/with-node"
        cells["append.reference"] = cells["fanout.reference"] = None
    else:
        assert REFERENCE is not None
        peer = ds_reference_server(REFERENCE)
        try:
            cells["append.reference"] = appends(peer.url, peer.pid, "ref")
            cells["fanout.reference"] = fanned(peer.url, "fan-ref")
        finally:
            peer.stop()
    for name, store in [("memory", "memory://"), ("sqlite", f"sqlite:///{root / 'ds.db'}")]:
        server = ServerProcess(store, env=SHIPPED)
        server.start()
        try:
            pid = server.process.pid if server.process is not None else 0
            cells[f"append.{name}"] = appends(f"{server.url}/ds", pid, name)
            if name == "sqlite":
                cells["fanout.sqlite"] = fanned(f"{server.url}/ds", "fan-ours")
        finally:
            server.stop()
    result = {
        "machine": machine(smoke=SMOKE, seconds=SECONDS, connections=CONNECTIONS, readers=READERS, rate=RATE),
        "cells": cells,
        "ratios": {
            "appendMemoryOverReference": ratio(cells, "append.memory", "append.reference", "perSec"),
            "appendSqliteOverReference": ratio(cells, "append.sqlite", "append.reference", "perSec"),
            "sseP99SqliteOverReference": ratio(cells, "fanout.sqlite", "fanout.reference", "p99Ms"),
        },
        "referenceMissing": why,
    }
    emit("DS", result)
    assert all(value is not None for key, value in cells.items() if not key.endswith(".reference"))

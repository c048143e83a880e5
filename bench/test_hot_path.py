"""The hot path (issue 26): small requests against the framework's floor and the peer protocol's server, side by side.

One load generator (`bench.throughput`: raw keep-alive HTTP/1.1 from one asyncio process,
50 connections, each with its own session or stream) runs every cell back to back:

* ``GET /healthz`` on a bare Starlette app with one route (`bench.bare`, httptools and
  uvloop), on our service as shipped (access log and metrics on), and on our service with
  ``HISTORY_METRICS=0`` and ``--log-level warning``;
* a durable one-event append on our service, memory store, shipped and quiet, then
  SQLite, then memory on uvicorn's default ``h11``;
* a ``maxMessages=5`` page of a small session, memory store, shipped;
* an append of one small ``text/plain`` message on the Durable Streams reference server
  (``@durable-streams/server``, Node, in memory), pinned under ``scripts/tools`` and
  started from ``HISTORY_DS_REFERENCE``, which ``scripts/with-node`` sets; without it that
  cell and its ratios are ``null``, and the line says why.

* the bare app and our service (shipped; ``/healthz``, memory and SQLite appends, the page)
  again under granian (a Rust HTTP server for ASGI; one worker, a single-threaded runtime,
  uvloop, HTTP/1.1), the server issue 44 weighs against uvicorn: adopted only if its memory
  append is at least 1.3 times uvicorn's. Without granian installed those cells are ``null``.

With ``HISTORY_PY_SPY`` naming a py-spy binary, the shipped memory append cell runs under
it too, and the line carries the event loop's profile (`bench.profile`).

Prints ``HISTORY_HOT_PATH_RESULT {json}`` with every cell and the ratios issue 44 names, each
cell of ours over bare Starlette's ``/healthz`` on uvicorn, the framework's floor.
``HISTORY_BENCH_HOT_SECONDS`` sets the window per cell (default 5); ``HISTORY_BENCH_SMOKE=1``
runs it tiny. Asserts structure (every answer 2xx and the one expected), never time.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.machine import emit, machine
from bench.profile import Profile
from bench.throughput import Workload, run, run_cell
from codec import encode
from history_service.scenarios import multi_turn
from testing.servers import ChildServer, ServerProcess, ds_reference_server, free_port, wait_healthy

# granian must import the app, so only one installed beside it, in this Python's environment, will do.
GRANIAN = (
    shutil.which("granian", path=str(Path(sys.executable).parent)) if importlib.util.find_spec("granian") else None
)

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
SECONDS = 0.3 if SMOKE else float(os.environ.get("HISTORY_BENCH_HOT_SECONDS", "5"))
CONNECTIONS = 10 if SMOKE else 50
DS_REFERENCE = os.environ.get("HISTORY_DS_REFERENCE")
PY_SPY = os.environ.get("HISTORY_PY_SPY")
SHIPPED = {"HISTORY_AUTH": "none", "HISTORY_TIMEOUT_KEEP_ALIVE": "60", "HISTORY_HTTP": "httptools"}
QUIET = {**SHIPPED, "HISTORY_METRICS": "0", "HISTORY_LOG_LEVEL": "warning"}
SEED = b'{"events":[' + b",".join(encode(event) for event in multi_turn(seed=3, turns=3, max_run=2)) + b"]}"


def granian(target: str, env: dict[str, str], *, factory: bool = False) -> ChildServer:
    """``target`` (``module:app``) under granian on a port of its own, set as uvicorn is in the other cells."""
    assert GRANIAN is not None
    port = free_port()
    args = [GRANIAN, "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    args += ["--runtime-mode", "st", "--loop", "uvloop", "--http", "1", "--no-ws", "--log-level", "warning"]
    args += ["--no-access-log", *(["--factory"] if factory else []), target]
    child = ChildServer(args, f"http://127.0.0.1:{port}", env={**os.environ, **env})
    wait_healthy(child.url, child.process)
    return child


def bare() -> ChildServer:
    port = free_port()
    child = ChildServer([sys.executable, "-m", "bench.bare", str(port)], f"http://127.0.0.1:{port}")
    wait_healthy(child.url, child.process)
    return child


def ours(store_url: str, env: dict[str, str]) -> ServerProcess:
    server = ServerProcess(store_url, env=env)
    server.start()
    return server


def cell(url: str, pid: int, workload: Workload, prefix: str, *, tree: bool = False) -> dict[str, Any]:
    out = run(
        run_cell(url, workload, connections=CONNECTIONS, seconds=SECONDS, prefix=prefix, seed=SEED, pid=pid, tree=tree)
    )
    assert out["requests"] > 0 and out["non2xx"] == 0 and out["wrong"] == 0, out
    return out


def ratio(cells: dict[str, dict[str, Any] | None], top: str, bottom: str) -> float | None:
    over, under = cells.get(top), cells.get(bottom)
    if over is None or under is None:
        return None
    return round(float(over["perSec"]) / float(under["perSec"]), 3)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("hot-path")


def test_small_requests_cost_what_the_framework_costs(root: Path) -> None:
    cells: dict[str, dict[str, Any] | None] = {}
    profile: dict[str, Any] | None = None
    floor = bare()
    try:
        cells["healthz.bare"] = cell(floor.url, floor.pid, "healthz", "bare")
    finally:
        floor.stop()
    for name, store, env in [
        ("shipped", "memory://", SHIPPED),
        ("quiet", "memory://", QUIET),
        ("sqlite", f"sqlite:///{root / 'h.db'}", SHIPPED),
        ("h11", "memory://", {**SHIPPED, "HISTORY_HTTP": "h11"}),
    ]:
        server = ours(store, env)
        try:
            pid = server.process.pid if server.process is not None else 0
            if name in ("shipped", "quiet"):
                cells[f"healthz.{name}"] = cell(server.url, pid, "healthz", f"h-{name}")
            spy = Profile(PY_SPY, pid, root / "append.raw", seconds=SECONDS) if PY_SPY and name == "shipped" else None
            cells[f"append.{name}"] = cell(server.url, pid, "append", f"a-{name}")
            if spy is not None:
                profile = spy.result()
            if name == "shipped":
                cells["page.shipped"] = cell(server.url, pid, "page", f"p-{name}")
        finally:
            server.stop()
    why = None
    if DS_REFERENCE is None or shutil.which("node") is None:
        why = "HISTORY_DS_REFERENCE or node is missing; run under scripts/with-node"
        cells["append.reference"] = None
    else:
        assert DS_REFERENCE is not None
        peer = ds_reference_server(DS_REFERENCE)
        try:
            cells["append.reference"] = cell(peer.url, peer.pid, "stream-append", "ds")
        finally:
            peer.stop()
    granian_missing = None if GRANIAN else "granian is not installed in this Python's environment"
    cells.update(granian_cells(root) if GRANIAN else dict.fromkeys(GRANIAN_CELLS))
    result = {
        "machine": machine(smoke=SMOKE, seconds=SECONDS, connections=CONNECTIONS, loop="uvloop", http="httptools"),
        "cells": cells,
        "ratios": {
            "healthzShippedOverBare": ratio(cells, "healthz.shipped", "healthz.bare"),
            "appendMemoryOverBare": ratio(cells, "append.shipped", "healthz.bare"),
            "appendSqliteOverBare": ratio(cells, "append.sqlite", "healthz.bare"),
            "pageMemoryOverBare": ratio(cells, "page.shipped", "healthz.bare"),
            "appendShippedOverQuiet": ratio(cells, "append.shipped", "append.quiet"),
            "appendMemoryOverReference": ratio(cells, "append.shipped", "append.reference"),
            "appendSqliteOverReference": ratio(cells, "append.sqlite", "append.reference"),
            "appendGranianOverUvicorn": ratio(cells, "append.granian", "append.shipped"),
            "appendSqliteGranianOverUvicorn": ratio(cells, "append.sqlite.granian", "append.sqlite"),
            "pageGranianOverUvicorn": ratio(cells, "page.granian", "page.shipped"),
            "healthzGranianOverUvicorn": ratio(cells, "healthz.granian", "healthz.shipped"),
            "bareGranianOverUvicorn": ratio(cells, "healthz.bare.granian", "healthz.bare"),
        },
        "referenceMissing": why,
        "granianMissing": granian_missing,
        "appendProfile": profile,
    }
    emit("HOT_PATH", result)
    optional = {"append.reference", *GRANIAN_CELLS}
    assert all(value is not None for key, value in cells.items() if key not in optional)
    assert GRANIAN is None or all(cells[key] is not None for key in GRANIAN_CELLS)


GRANIAN_CELLS = ["healthz.bare.granian", "healthz.granian", "append.granian", "page.granian", "append.sqlite.granian"]


def granian_cells(root: Path) -> dict[str, dict[str, Any] | None]:
    """The bare app and our shipped service under granian: the cells of uvicorn's that the server decides."""
    cells: dict[str, dict[str, Any] | None] = {}
    floor = granian("bench.bare:app", {})
    try:
        cells["healthz.bare.granian"] = cell(floor.url, floor.pid, "healthz", "bare-g", tree=True)
    finally:
        floor.stop()
    for store in ("memory://", f"sqlite:///{root / 'g.db'}"):
        env = {**SHIPPED, "HISTORY_STORE": store}
        server = granian("history_service.app:app_factory", env, factory=True)
        try:
            if store == "memory://":
                cells["healthz.granian"] = cell(server.url, server.pid, "healthz", "h-g", tree=True)
                cells["append.granian"] = cell(server.url, server.pid, "append", "a-g", tree=True)
                cells["page.granian"] = cell(server.url, server.pid, "page", "p-g", tree=True)
            else:
                cells["append.sqlite.granian"] = cell(server.url, server.pid, "append", "a-sqlite-g", tree=True)
        finally:
            server.stop()
    return cells

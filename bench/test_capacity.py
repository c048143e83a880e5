"""Every core on SQLite (issue 43): `--workers 2` over `--workers 1`, and the capacity of live sessions.

One run measures, side by side on this machine, every "Must show" performance figure:

* small pages/s (``maxMessages=5``) and durable 1-event appends/s on SQLite, ``--workers 2``
  over ``--workers 1`` (`bench.throughput`, 50 connections), in the order w1, w2, w2, w1,
  the median of each;
* follow delivery p99 at 500 events/s to 100 followers of 10 sessions on SQLite
  ``--workers 2`` (`bench.follow_load`), with how many followers each worker served;
* the capacity of live sessions (`bench.capacity`: a producer appending 5 token deltas
  every 100 ms and one SSE follower per session): ``/v1`` on SQLite w1 and w2, ``/ds`` on
  SQLite w1 and w2, ``/ds`` on the Durable Streams reference server (Node, in memory;
  ``HISTORY_DS_REFERENCE`` from `scripts/with-node`) and ``/v1`` on PostgreSQL w2
  (``HISTORY_TEST_PG_URL`` from `scripts/with-postgres`; not in smoke mode). A missing one is
  ``null`` with why.

The capacity is the most sessions at which a step of ``HISTORY_BENCH_CAPACITY_SECONDS``
(default 10) keeps the delivery p99 ≤ 250 ms with nothing lost, undelivered, duplicated or
refused. The ramp doubles from 25 and stops at its first failure, then bisects twice between
the last pass and that failure; a failing step stops early, and the next waits for an idle
server. Each cell records what bounded it at its failure (server CPU, the load generator,
the machine, or latency) and which criterion failed. Each step uses new sessions. The
SQLite capacity cells run on the servers of the throughput's second round.

Prints ``HISTORY_CAPACITY_RESULT {json}``; ``HISTORY_BENCH_SMOKE=1`` runs it tiny, with one
throughput round (w1, w2). Asserts structure (every step ran; the smoke steps deliver every
batch they sent, once, and nothing is refused), never time.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec
import pytest

from bench.capacity import (
    BATCH,
    DRAIN_S,
    GOAL_P99_MS,
    PERIOD_S,
    Target,
    _Follower,
    _Tally,
    ds_body,
    serving_counts,
    step,
    wait_idle,
)
from bench.follow_load import run_load
from bench.machine import emit, machine
from bench.throughput import TIME_ZERO, Connection, _post, append_body, process_tree, run, run_cell
from codec import DeltaData, Event, TextDelta, encode
from history_service.scenarios import multi_turn
from testing.postgres import PG_URL, empty_postgres
from testing.servers import ServerProcess, ds_reference_server
from testing.workers import serving_workers

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
SECONDS = 0.5 if SMOKE else float(os.environ.get("HISTORY_BENCH_CAPACITY_SECONDS", "10"))
WARMUP = 0.2 if SMOKE else 1.0
# Throughput alternates the worker counts, each median of two; smoke runs one round (a server start is seconds).
ROUNDS: Final = ["w1", "w2"] if SMOKE else ["w1", "w2", "w2", "w1"]
# The capacity cells run on each worker count's last server.
LAST: Final = {name: order for order, name in enumerate(ROUNDS)}
STEPS = [5] if SMOKE else [25, 50, 100, 200, 400, 800, 1600, 3200]
BISECT = 0 if SMOKE else 2
# Smoke asserts that every batch arrives, so it waits for them as long as a loaded machine may need.
DRAIN = 30.0 if SMOKE else DRAIN_S
THROUGHPUT_SECONDS = 0.3 if SMOKE else 5.0
CONNECTIONS = 10 if SMOKE else 50
FOLLOWERS = 10 if SMOKE else 100
FOLLOW_RATE = 100 if SMOKE else 500
FOLLOW_SECONDS = 1.0 if SMOKE else 5.0
FOLLOW_SESSIONS = 2 if SMOKE else 10
REFERENCE = os.environ.get("HISTORY_DS_REFERENCE")
# As shipped (bench/test_hot_path.py), with the per-worker connection and follower caps out of the way.
ENV: Final = {
    "HISTORY_AUTH": "none",
    "HISTORY_TIMEOUT_KEEP_ALIVE": "60",
    "HISTORY_HTTP": "httptools",
    "HISTORY_LIMIT_CONCURRENCY": "20000",
    "HISTORY_MAX_FOLLOWERS": "19000",
}
SEED = encode({"events": multi_turn(seed=3, turns=3, max_run=2)})
GOALS: Final = {
    "pagesW2OverW1": 1.5,
    "appendsW2OverW1": 1.2,
    "followP99MsW2": 50.0,
    "capacityW2OverW1": 1.5,
    "dsCapacityW2OverReference": 0.5,
}
CORES = len(os.sched_getaffinity(0))


def progress(stage: str) -> None:
    print(f"[capacity] {time.strftime('%H:%M:%S')} {stage}", file=sys.stderr, flush=True)


def launched(server: ServerProcess) -> int:
    assert server.process is not None
    return server.process.pid


def serve(store_url: str, workers: int) -> ServerProcess:
    server = ServerProcess(store_url, env=ENV)
    try:
        server.start("--workers", str(workers))
        if workers > 1:
            # `start` returns once one worker answers; a cell begun then would open all its
            # keep-alive connections on that one worker, as a run of pages on w2 at 1.04 cores showed.
            serving_workers(server.port, launched(server), workers)
    except BaseException:
        server.stop()  # a supervisor whose workers are still starting must not outlive the test
        raise
    return server


def test_a_batch_is_five_canonical_text_deltas() -> None:
    events = [Event("assistant/chunk", n, TIME_ZERO + n, DeltaData(1, 1, TextDelta(0, " tok"))) for n in range(10, 15)]
    assert append_body(10, BATCH) == encode({"events": events})
    assert msgspec.json.decode(ds_body(10)) == [10, 11, 12, 13, 14]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


SSE_HEAD: Final = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CONTROL: Final = b'data:{"streamNextOffset":"0_10","streamCursor":"1","upToDate":true}\n\n'


def v1_frames(seqs: range) -> bytes:
    """Our follow stream's frames, as the service sends them (one per event, ``id: <incarnation>:<seq>``)."""
    return b"".join(b'id: e00f1fa16a3d:%d\nevent: event\ndata: {"seq":%d}\n\n' % (n, n) for n in seqs)


# Captured from each server (the reference splits an event over chunks; ours does not).
WIRES: Final = {
    "v1": SSE_HEAD + chunk(b"retry: 1000\n\n") + chunk(v1_frames(range(5))) + chunk(v1_frames(range(5, 10))),
    "ds": SSE_HEAD
    + b"".join(chunk(b"event: data\ndata:[%b]\n\nevent: control\n%b" % (ds_body(n)[1:-1], CONTROL)) for n in (0, 5)),
    "ds-reference": SSE_HEAD
    + b"".join(
        chunk(b"event: control\n") + chunk(CONTROL) + chunk(b"event: data\n") + chunk(b"data:%b\n\n" % ds_body(n))
        for n in (0, 5)
    ),
}


def read(kind: str, wire: bytes, piece: int) -> tuple[_Follower, list[int]]:
    """Feed ``wire`` to a follower ``piece`` bytes at a time; its batches were sent at time 0."""

    async def feed() -> tuple[_Follower, list[int]]:
        tally = _Tally()
        follower = _Follower(kind, [0] * 4, tally, range(4))
        for at in range(0, len(wire), piece):
            follower.data_received(wire[at : at + piece])
        return follower, tally.delays

    return asyncio.run(feed())


@pytest.mark.parametrize("piece", [1, 7, 1 << 16])
@pytest.mark.parametrize("wire", list(WIRES))
def test_a_follower_reads_every_batch_of_both_servers_once(wire: str, piece: int) -> None:
    follower, delays = read(wire.removesuffix("-reference"), WIRES[wire], piece)
    assert follower.ready.result() == 200
    assert (follower.expected, follower.lost, follower.duplicated, len(delays)) == (10, 0, 0, 2)


def test_a_follower_counts_what_was_lost_and_duplicated() -> None:
    wire = SSE_HEAD + chunk(v1_frames(range(5))) + chunk(v1_frames(range(3, 10))) + chunk(v1_frames(range(15, 20)))
    follower, delays = read("v1", wire, 1 << 16)
    # Seqs 3 and 4 came twice; batch 2 (seqs 10-14) never came, and is not timed.
    assert (follower.expected, follower.lost, follower.duplicated, len(delays)) == (20, 5, 2, 3)


def throughput(server: ServerProcess, workload: str, prefix: str) -> dict[str, Any]:
    out = run(
        run_cell(
            server.url,
            "page" if workload == "page" else "append",
            connections=CONNECTIONS,
            seconds=THROUGHPUT_SECONDS,
            prefix=prefix,
            seed=SEED,
            pid=launched(server),
            tree=True,
        )
    )
    assert out["requests"] >= CONNECTIONS and out["non2xx"] == 0 and out["wrong"] == 0, out
    return out


async def follow_cell(server: ServerProcess) -> dict[str, Any]:
    """`run_load` on the workers, sampling how many connections each worker serves while it runs."""
    sessions = {f"follow-{n}": 0 for n in range(FOLLOW_SESSIONS)}
    conn = Connection(server.port)
    try:
        for name in sessions:
            reply = await conn.request(_post("/v1/sessions", encode({"id": name, "createdAt": TIME_ZERO})))
            assert reply.status == 201, reply
    finally:
        conn.close()
    pids = process_tree(launched(server))
    spread: dict[int, int] = {}

    async def sample() -> None:
        while True:
            counts = serving_counts(pids, server.port)
            if sum(counts.values()) > sum(spread.values()):
                spread.clear()
                spread.update(counts)
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    try:
        out = await run_load(
            server.url,
            followers=FOLLOWERS,
            rate=FOLLOW_RATE,
            seconds=FOLLOW_SECONDS,
            sessions=sessions,
            drain_timeout=30,
        )
    finally:
        sampler.cancel()
    # The busiest moment holds every follower plus the producer's one connection.
    return {**out, "perWorker": sorted(spread.values(), reverse=True)}


def bound(result: dict[str, Any], workers: int) -> str:
    """What bounded a failing step: whose CPU was full (the server's, ours, or the machine's), else latency."""
    failed = [name for name in ("lost", "undelivered", "duplicated", "refused") if result[name]]
    if result["p99Ms"] is None or result["p99Ms"] > GOAL_P99_MS:
        failed.insert(0, "p99")
    if result["serverCpu"] >= 0.9 * min(workers, CORES):
        what = "server CPU"
    elif result["clientCpu"] >= 0.9:
        what = "load generator"
    elif max(result["serverCpu"] + result["clientCpu"], result["machineCpu"]) >= 0.9 * CORES:
        what = "machine"  # the two together, or other work on the machine beside them
    else:
        what = "latency"
    return f"{what} ({', '.join(failed)})"


def capacity(kind: str, url: str, pid: int, workers: int, cell: str) -> dict[str, Any]:
    """Ramp ×2 until the first failing step, then bisect; the capacity is the largest passing step."""
    target = Target(kind, url, process_tree(pid))  # type: ignore[arg-type]

    def measure(sessions: int) -> dict[str, Any]:
        progress(f"{cell}: {sessions} sessions")
        result = run(step(target, sessions, seconds=SECONDS, warmup=WARMUP, drain=DRAIN, prefix=f"{cell}-{sessions}"))
        steps.append(result)
        if not result["pass"]:
            # A failed step can leave a backlog of appends; the next step must not start behind it.
            run(wait_idle(target.pids))
        return result

    steps: list[dict[str, Any]] = []
    passed, failed = 0, None
    for sessions in STEPS:
        if not measure(sessions)["pass"]:
            failed = sessions
            break
        passed = sessions
    for _ in range(BISECT if failed is not None else 0):
        assert failed is not None
        middle = round((passed + failed) / 2 / 5) * 5
        if middle in (passed, failed):
            break
        if measure(middle)["pass"]:
            passed = middle
        else:
            failed = middle
    at_failure = next((s for s in steps if s["sessions"] == failed), None)
    return {
        "capacity": passed,
        "workers": workers,
        "bound": bound(at_failure, workers) if at_failure is not None else "not reached",
        "steps": steps,
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # A step of N sessions opens 2N sockets here and in the server; the servers inherit the limit.
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield tmp_path_factory.mktemp("capacity")
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def ratio(over: float | None, under: float | None) -> float | None:
    return None if over is None or not under else round(over / under, 3)


def test_every_core_and_the_capacity_of_live_sessions(root: Path) -> None:
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {"w1": {}, "w2": {}}
    cells: dict[str, Any] = {}
    follow: dict[str, Any] = {}
    wal: dict[str, int] = {}
    started = time.monotonic()
    for order, name in enumerate(ROUNDS):
        workers = int(name[1])
        store = root / f"{name}.db"
        server = serve(f"sqlite:///{store}", workers)
        try:
            for workload in ("page", "append"):
                progress(f"throughput {workload}, SQLite --workers {workers}")
                rounds[name].setdefault(workload, []).append(throughput(server, workload, f"{workload}-{order}"))
            if order != LAST[name]:
                continue
            if name == "w2":
                progress(f"follow: {FOLLOWERS} followers at {FOLLOW_RATE} events/s over 2 workers")
                follow = run(follow_cell(server))
                assert follow["lost"] == follow["duplicated"] == follow["undeliveredAtTimeout"] == 0, follow
            pid = launched(server)
            cells[f"v1.sqlite.{name}"] = capacity("v1", server.url, pid, workers, f"v1-{name}")
            cells[f"ds.sqlite.{name}"] = capacity("ds", f"{server.url}/ds", pid, workers, f"ds-{name}")
            # Readers in several processes could starve checkpoints (issue 43's design, risk 2): the WAL shows it.
            wal[name] = os.path.getsize(f"{store}-wal") if os.path.exists(f"{store}-wal") else 0
        finally:
            server.stop()
    missing: dict[str, str | None] = {"referenceMissing": None, "postgresqlMissing": None}
    if REFERENCE is None or shutil.which("node") is None:
        missing["referenceMissing"] = "HISTORY_DS_REFERENCE or node is missing; run under scripts/with-node"
        cells["ds.reference"] = None
    else:
        peer = ds_reference_server(REFERENCE)
        try:
            cells["ds.reference"] = capacity("ds", peer.url, peer.pid, 1, "ds-ref")
        finally:
            peer.stop()
    if not PG_URL or SMOKE:
        # Starting two workers costs seconds; the smoke's SQLite cells already run this code.
        missing["postgresqlMissing"] = (
            "not run in smoke mode" if PG_URL else "HISTORY_TEST_PG_URL is not set; run under scripts/with-postgres"
        )
        cells["v1.postgresql.w2"] = None
    else:
        anyio.run(empty_postgres, PG_URL)
        server = serve(PG_URL, 2)
        try:
            cells["v1.postgresql.w2"] = capacity("v1", server.url, launched(server), 2, "v1-pg")
        finally:
            server.stop()

    medians = {
        name: {workload: statistics.median(c["perSec"] for c in runs) for workload, runs in by.items()}
        for name, by in rounds.items()
    }

    def capacity_of(key: str) -> int | None:
        return None if cells.get(key) is None else int(cells[key]["capacity"])

    # Each cell's largest passing step, where the generator's fixed cost (its ticks) weighs least per session.
    passing = [
        max((s for s in c["steps"] if s["pass"]), key=lambda s: s["sessions"])
        for c in cells.values()
        if c is not None and any(s["pass"] for s in c["steps"])
    ]
    result = {
        "machine": machine(
            smoke=SMOKE,
            cores=CORES,
            seconds=SECONDS,
            warmup=WARMUP,
            steps=STEPS,
            bisect=BISECT,
            throughputSeconds=THROUGHPUT_SECONDS,
            connections=CONNECTIONS,
            rounds=ROUNDS,
            elapsedSeconds=round(time.monotonic() - started),
        ),
        "throughput": {"rounds": rounds, "median": medians},
        "follow": {"sqlite.w2": follow},
        "capacity": cells,
        "walBytes": wal,
        "loadgen": {
            # Client CPU per session-second, in ms: what one live session costs the generator.
            "cpuPerSessionSecondMs": round(statistics.mean(1000 * s["clientCpu"] / s["sessions"] for s in passing), 3)
            if passing
            else None,
        },
        "ratios": {
            "pagesW2OverW1": ratio(medians["w2"]["page"], medians["w1"]["page"]),
            "appendsW2OverW1": ratio(medians["w2"]["append"], medians["w1"]["append"]),
            "followP99MsW2": follow["p99Ms"],
            "capacityW2OverW1": ratio(capacity_of("v1.sqlite.w2"), capacity_of("v1.sqlite.w1")),
            "dsCapacityW2OverReference": ratio(capacity_of("ds.sqlite.w2"), capacity_of("ds.reference")),
        },
        "goals": GOALS,
        **missing,
    }
    emit("CAPACITY", result)
    assert [len(by["page"]) for by in rounds.values()] == [ROUNDS.count("w1"), ROUNDS.count("w2")]
    assert len(follow["perWorker"]) == 2 and sum(follow["perWorker"]) >= FOLLOWERS, follow["perWorker"]
    for key, cell in cells.items():
        if cell is None:
            continue
        assert cell["steps"] and cell["steps"][0]["sessions"] == STEPS[0], key
        assert all(s["batches"] == s["sessions"] * round(SECONDS / PERIOD_S) for s in cell["steps"]), key
        if SMOKE:
            # Structure, never time: a smoke step's p99 is not asserted (a step late enough stops sending
            # early), only that every batch sent arrived once and nothing was refused.
            for s in cell["steps"]:
                assert s["lost"] == s["undelivered"] == s["duplicated"] == s["refused"] == 0, (key, s)
                assert s["delivered"] == s["sent"] > 0, (key, s)

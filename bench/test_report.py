"""The report renders the committed run: every section, the seed beside ours, a well-formed chart, and the goals."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest

from bench.report import main, read_results, render_markdown

RESULTS = sorted(Path(__file__).parent.joinpath("results").glob("*.txt"))


@pytest.mark.skipif(not RESULTS, reason="no bench/results/*.txt run is committed yet")
def test_report_renders_the_newest_committed_run(tmp_path: Path) -> None:
    newest = RESULTS[-1]
    results = read_results(newest)
    names = [result["fixture"]["name"] for result in results["TRANSPORT_PERF"]]
    assert names == ["dsh-synthetic", "realistic", "long-session"]
    assert main([str(newest), "--docs", str(tmp_path), "--command", "make bench"]) == 0
    text = (tmp_path / "benchmarks.md").read_text()
    for needle in ("## Goals", "69,433,638", "Lossless packed", "Follow under load", "Whitespace-prefix", "sqlite"):
        assert needle in text, needle
    ElementTree.fromstring((tmp_path / "benchmarks.svg").read_text())


def test_report_refuses_a_file_without_transport_results(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("HISTORY_FOLLOW_LOAD_RESULT {}\nnot a result line\n")
    assert main([str(empty), "--docs", str(tmp_path)]) == 1
    assert read_results(empty) == {"FOLLOW_LOAD": [{}]}


def throughput_cell(per_sec: int, **extra: float) -> dict[str, Any]:
    cell = {"perSec": per_sec, "p50Ms": 1.0, "p99Ms": 2.0, "clientCpu": 0.1, "serverCpu": 0.9}
    return {**cell, **extra}


def throughput_entry(connections: int, stores: dict[str, tuple[int, int, int, int]]) -> dict[str, Any]:
    """A result line's value: per store, (store pages/s, memory pages/s, store appends/s, memory appends/s)."""
    cells: dict[str, Any] = {}
    for store, (page, memory_page, append, memory_append) in stores.items():
        cells[store] = {
            "page": {
                str(n): {
                    "store": throughput_cell(page, serverP50Ms=0.4),
                    "memory": throughput_cell(memory_page, serverP50Ms=0.1),
                }
                for n in (1, connections)
            },
            "append": {
                str(n): {"store": throughput_cell(append), "memory": throughput_cell(memory_append)}
                for n in (1, connections)
            },
            "share": {"connections": connections, "page": page / memory_page, "append": append / memory_append},
        }
    machine = {"seconds": 5, "pageMessages": 5, "seedEvents": 79}
    bounded = {
        "store": "sqlite",
        "sessions": 100_000,
        "connections": 50,
        "firstSessions": 1000,
        "seconds": 80.0,
        "sessionsPerSec": 1250,
        "p50Ms": 3.0,
        "p99Ms": 9.0,
        "rssFirstMb": 70.0,
        "rssEndMb": 82.0,
        "growthMb": 12.0,
    }
    return {"machine": machine, "stores": cells, "bounded": bounded}


def test_report_renders_throughput_goals_beside_memory() -> None:
    entry = throughput_entry(50, {"sqlite": (700, 1000, 3000, 4000), "jsonl": (500, 1000, 1000, 4000)})
    text = render_markdown({"THROUGHPUT_PERF": [entry]}, command="make bench", source="run.txt")
    section = text.split("## Many small requests", 1)[1]
    for needle in (
        "| SQLite pages/s vs memory's, 50 connections | ≥ 60% | 70%: 700 vs 1,000/s | met |",
        "| JSONL pages/s vs memory's, 50 connections | ≥ 60% | 50%: 500 vs 1,000/s | **missed** |",
        "| PostgreSQL pages/s vs memory's, 50 connections | ≥ 40% | not run |  |",
        "| SQLite durable 1-event appends/s, 50 sessions | ≥ 2,500/s | 3,000/s | met |",
        "| JSONL durable 1-event appends/s, 50 sessions | ≥ 1,500/s | 1,000/s | **missed** |",
        "| SQLite small-page server time, 1 connection | ≤ 0.5 ms | 0.4 ms | met |",
        "| RSS growth over 100,000 touched sessions | ≤ 50 MB | 12.0 MB | met |",
        "| SQLite | 50 | 700 | 1,000 | 70% |",
        "| JSONL | 1 | 1,000 | 4,000 | 25% |",
        "70.0 MB after the first 1,000, 82.0 MB at the end: 12.0 MB more",
    ):
        assert needle in section, needle


def test_report_names_the_connections_of_a_smaller_throughput_run() -> None:
    entry = throughput_entry(10, {"sqlite": (500, 1000, 2000, 4000)})
    text = render_markdown({"THROUGHPUT_PERF": [entry]}, command="make bench", source="run.txt")
    assert "| SQLite pages/s vs memory's, 50 connections | ≥ 60% | 50%: 500 vs 1,000/s (at 10) | **missed** |" in text
    assert "| SQLite durable 1-event appends/s, 50 sessions | ≥ 2,500/s | 2,000/s (at 10) | **missed** |" in text


def test_report_renders_the_browser_goals() -> None:
    heap = {
        use: {"packedPeakBytes": packed, "rawPeakBytes": 300, "heapRatio": round(300 / packed, 2)}
        for use, packed in (("page", 30), ("stream", 60), ("events", 120))
    }
    js = {
        "machine": {"node": "v20.20.2"},
        "page": {"events": 416_756, "records": 696, "packedBytes": 6_000_000, "rawBytes": 70_000_000},
        "validatedPage": {"packed": {"medianMs": 30.0}, "raw": {"medianMs": 450.0}, "speedup": 15.0},
        "expansion": {"medianMs": 50.0},
        "heap": heap,
    }
    viewer = {
        "browser": "150.0",
        "session": "dsh-synthetic-0",
        "events": 416_756,
        "loads": 7,
        "codings": {
            "zstd": {"transfer_bytes": 900_000, "records": 696, "rendered_ms": {"median": 120.5, "samples": [120.5]}}
        },
    }
    text = render_markdown({"JS_PAGE_PERF": [js], "VIEWER_PERF": [viewer]}, command="make bench", source="run.txt")
    section = text.split("## In the browser", 1)[1]
    for needle in (
        "| time to a validated page | ≥ 10× faster | 30.0 ms | 450.0 ms | 15.0× | met |",
        "| exact expansion | ≤ 150 ms | 50.0 ms | | | met |",
        "| heap peak, the validated page | ≥ 3× smaller | 30 B | 300 B | 10.0× | met |",
        "| heap peak, all events | ≥ 3× smaller | 120 B | 300 B | 2.5× | **missed** |",
        "| zstd | 900,000 | 696 | 120.5 | 120.5 |",
    ):
        assert needle in section, needle


def test_report_renders_the_hot_path_goals_cells_and_profile() -> None:
    cells = {
        "healthz.bare": throughput_cell(10_000),
        "healthz.shipped": throughput_cell(8_500),
        "append.shipped": throughput_cell(3_000),
        "append.quiet": throughput_cell(3_100),
        "append.sqlite": throughput_cell(1_500),
        "page.shipped": throughput_cell(2_000),
        "append.reference": None,
    }
    ratios = {
        "healthzShippedOverBare": 0.85,
        "appendMemoryOverBare": 0.3,
        "appendMemoryOverReference": None,
        "appendSqliteOverReference": None,
        "pageMemoryOverBare": 0.2,
        "appendShippedOverQuiet": 0.968,
        "appendGranianOverUvicorn": 1.05,
        "pageGranianOverUvicorn": 0.98,
    }
    profile = {
        "samples": 1200,
        "inclusive": [[0.5, "Edge.__call__ (history_service/edge.py)"]],
        "self": [[0.2, "x (y)"]],
    }
    entry = {
        "machine": {"seconds": 5, "connections": 50},
        "cells": cells,
        "ratios": ratios,
        "referenceMissing": "node is missing",
        "granianMissing": None,
        "appendProfile": profile,
    }
    section = render_markdown({"HOT_PATH": [entry]}, command="make bench", source="run.txt").split("## The hot path")[1]
    for needle in (
        "| `/healthz`, shipped settings, vs bare Starlette | ≥ 0.8× | 0.85× (met) |",
        "| small page (`maxMessages=5`), memory, vs bare Starlette's `/healthz` | ≥ 0.35× | 0.2× (**missed**) |",
        "| 1-event append, memory, vs bare Starlette's `/healthz` | ≥ 0.5× | 0.3× (**missed**) |",
        "| 1-event append, memory, vs the Durable Streams reference server | report | not run: node is missing |",
        "| 1-event append, memory, under granian vs uvicorn (adopted at ≥ 1.3×) | ≥ 1.3× | 1.05× (**missed**) |",
        "| small page, memory, under granian vs uvicorn | report | 0.98× |",
        "| 1-event durable append, SQLite, vs bare Starlette's `/healthz` | ≥ 0.35× | not run: not in this run |",
        "| append with access log and metrics on vs off | ≥ 0.95× | 0.968× (met) |",
        "| healthz.bare | 10,000 | 1.0 | 2.0 | 0.1, 0.9 |",
        "(1,200 samples)",
        "| 50.0% | `Edge.__call__ (history_service/edge.py)` | | 20.0% | `x (y)` |",
    ):
        assert needle in section, needle
    assert "append.reference |" not in section


@pytest.mark.skipif(not RESULTS, reason="no bench/results/*.txt run is committed yet")
def test_report_puts_runs_of_the_hot_path_side_by_side_with_the_profile_before_and_after(tmp_path: Path) -> None:
    def run(healthz: float, frame: str) -> dict[str, Any]:
        profile = {"samples": 100, "inclusive": [[0.5, frame]], "self": [[0.2, frame]]}
        cells = {"healthz.bare": throughput_cell(10_000)}
        ratios = {"healthzShippedOverBare": healthz}
        machine = {"seconds": 5, "connections": 50}
        return {"machine": machine, "cells": cells, "ratios": ratios, "appendProfile": profile}

    full = tmp_path / "full.txt"
    full.write_text(RESULTS[-1].read_text() + f"HISTORY_HOT_PATH_RESULT {json.dumps(run(0.1, 'old'))}\n")
    paths = []
    for i, (healthz, frame) in enumerate([(0.85, "new (a)"), (0.7, "new (b)")]):
        paths.append(tmp_path / f"hot{i}.txt")
        paths[-1].write_text(f"noise\nHISTORY_HOT_PATH_RESULT {json.dumps(run(healthz, frame))}\n")
    before = tmp_path / "before.txt"
    before.write_text(f"HISTORY_HOT_PATH_RESULT {json.dumps(run(0.5, 'before (x)'))}\n")
    docs = tmp_path / "docs"
    argv = [str(full), "--docs", str(docs), "--hot-path", *map(str, paths), "--hot-path-before", str(before)]
    argv += ["--hot-path-note", "What is left: uvicorn's send."]
    assert main(argv) == 0
    markdown = (docs / "benchmarks.md").read_text()
    section = markdown.split("## The hot path")[1]
    assert "| `/healthz`, shipped settings, vs bare Starlette | ≥ 0.8× | 0.85× (met) | 0.7× (**missed**) |" in section
    assert "0.1×" not in section and "Run 1:" in section and "Run 2:" in section
    assert "append cell, before (100 samples)" in section and "`before (x)`" in section
    assert "append cell, after (100 samples)" in section and "`new (b)`" in section and "`new (a)`" not in section
    assert f"`{paths[0]}`, `{paths[1]}`" in markdown
    assert "`new (b)` |\n\nWhat is left: uvicorn's send.\n" in section
    (tmp_path / "none.txt").write_text("no result here\n")
    assert main([str(full), "--docs", str(docs), "--hot-path-before", str(tmp_path / "none.txt")]) == 1


def capacity_step(sessions: int, p99: float, passed: bool) -> dict[str, Any]:
    return {"sessions": sessions, "p99Ms": p99, "pass": passed, "clientCpu": 0.3, "serverCpu": 1.6, "machineCpu": 1.9}


def capacity_cell(capacity: int, bound: str) -> dict[str, Any]:
    steps = [capacity_step(25, 12.5, True), capacity_step(50, 400.0, False), capacity_step(40, 30.0, True)]
    return {"capacity": capacity, "workers": 2, "bound": bound, "steps": steps}


def test_report_renders_the_capacity_goals_and_cells() -> None:
    entry = {
        "machine": {
            "seconds": 10,
            "warmup": 1,
            "steps": [25, 50],
            "bisect": 2,
            "cores": 2,
            "throughputSeconds": 5,
            "connections": 50,
        },
        "follow": {"sqlite.w2": {"p50Ms": 9.5, "p99Ms": 31.0, "maxMs": 60.0, "perWorker": [52, 49]}},
        "capacity": {
            "v1.sqlite.w1": capacity_cell(40, "server CPU (p99)"),
            "v1.sqlite.w2": capacity_cell(70, "machine (p99)"),
            "ds.sqlite.w1": capacity_cell(40, "latency (p99, lost)"),
            "ds.sqlite.w2": capacity_cell(60, "machine (p99)"),
            "ds.reference": None,
            "v1.postgresql.w2": capacity_cell(1200, "not reached"),
        },
        "loadgen": {"cpuPerSessionSecondMs": 0.42},
        "ratios": {
            "pagesW2OverW1": 1.62,
            "appendsW2OverW1": 1.1,
            "followP99MsW2": 31.0,
            "capacityW2OverW1": 1.75,
            "dsCapacityW2OverReference": None,
        },
        "goals": {
            "pagesW2OverW1": 1.5,
            "appendsW2OverW1": 1.2,
            "followP99MsW2": 50.0,
            "capacityW2OverW1": 1.5,
            "dsCapacityW2OverReference": 0.5,
        },
        "referenceMissing": "node is missing",
        "postgresqlMissing": None,
    }
    text = render_markdown({"CAPACITY": [entry]}, command="make bench", source="run.txt")
    section = text.split("## Every core, and the capacity of live sessions")[1]
    for needle in (
        "| small pages/s (`maxMessages=5`), SQLite, `--workers 2` over `--workers 1` | ≥ 1.5× | 1.62× | met |",
        "| durable 1-event appends/s, SQLite, `--workers 2` over `--workers 1` | ≥ 1.2× | 1.1× | **missed** |",
        "100 followers over 2 SQLite workers | ≤ 50 ms | 31 ms | met |",
        "over the reference | ≥ 0.5× | not run: node is missing | |",
        "connections per worker at the busiest moment 52, 49",
        "| `/v1`, SQLite, `--workers 2` | 70 | machine (p99) | 25 → 12.5 ✓, 50 → 400.0 ✗, 40 → 30.0 ✓ | "
        "0.3, 1.6, 1.9 |",
        "| `/ds`, the reference server (Node, in memory) | not run: node is missing | | | |",
        "| `/v1`, PostgreSQL, `--workers 2` | 1,200 | not reached |",
        "0.42 ms of CPU per session-second",
    ):
        assert needle in section, needle


def test_report_renders_the_in_process_cost_beside_the_frameworks_floor() -> None:
    entry = {
        "machine": {"rounds": 15, "requests": 1000},
        "microseconds": {"healthz.bare": 13.0, "append.shipped": 150.5},
        "bareOver": {"append.shipped": 0.086},
    }
    markdown = render_markdown({"ASGI_COST": [entry]}, command="make bench", source="run.txt")
    section = markdown.split("### In process, without a server")[1]
    assert "15 interleaved rounds of 1,000 requests" in section
    assert "| bare Starlette `/healthz` | 13.0 |  |" in section
    assert "| 1-event append, memory, shipped | 150.5 | 0.086× |" in section
    assert "page" not in section


def test_report_sets_the_in_process_cost_before_beside_after() -> None:
    def run(micros: float, ratio: float) -> dict[str, Any]:
        machine = {"rounds": 15, "requests": 1000}
        return {"machine": machine, "microseconds": {"append.quiet": micros}, "bareOver": {"append.quiet": ratio}}

    results = {"ASGI_COST": [run(130.0, 0.1)], "ASGI_COST_BEFORE": [run(190.0, 0.07)]}
    section = render_markdown(results, command="make bench", source="run.txt").split("### In process")[1]
    assert "| cell | µs per request, before | bare over cell, before | µs per request, after |" in section
    assert "| 1-event append, memory, quiet | 190.0 | 0.07× | 130.0 | 0.1× |" in section


def wire_stream(per_event: float) -> dict[str, Any]:
    return {"bytesPerEvent": per_event, "p50Ms": 2.0, "p99Ms": 9.0}


def test_report_renders_the_live_wire_by_form_with_its_goals(tmp_path: Path) -> None:
    forms = {"frames": 180.0, "framesGzip": 30.0, "packed": 220.0, "packedGzip": 36.0}
    streams = {key: wire_stream(value) for key, value in forms.items()}
    entry = {
        "machine": {"coalesceMs": 40, "loadAverage": [1.5, 2.0]},
        "live": {"50": {"streams": streams}, "500": {"streams": streams}},
        "burst": {"events": 10_000, **streams},
        "memory": {
            "packed": {"bytesPerFollower": 30_000, "followers": 2000},
            "packedGzip": {"bytesPerFollower": 45_000, "followers": 2000},
        },
        "reference": None,
        "ratios": {
            "packedGzipOverFramesBytesAt50": 0.2,
            "packedGzipOverFramesBytesBurst": 0.02,
            "packedGzipOverFramesP99At500": 0.96,
        },
    }
    run = tmp_path / "wire.txt"
    run.write_text(f"HISTORY_LIVE_WIRE_RESULT {json.dumps(entry)}\n")
    assert main([str(RESULTS[-1]), "--docs", str(tmp_path), "--live-wire", str(run)]) == 0
    section = (tmp_path / "benchmarks.md").read_text().split("## Follow on the wire")[1].split("\n## ")[0]
    assert "| packed, gzip | 36.0 | 2.0 / 9.0 | 36.0 | 2.0 / 9.0 | 36.0 |" in section
    assert "| delivery p99 at 500/s, packed + gzip over event frames | ≤ 1.2 | 0.96 |" in section
    assert "| memory per compressed follower, 2,000 idle | ≤ 64 KB | 45,000 B |" in section
    assert "reference server" not in section  # no Node, no reference cells
    empty = tmp_path / "empty.txt"
    empty.write_text("noise\n")
    assert main([str(RESULTS[-1]), "--docs", str(tmp_path), "--live-wire", str(empty)]) == 1


def search_store(ratios: dict[str, float], p50: float, p99: float) -> dict[str, Any]:
    """A store's part of a search result line: its appends' ratio by streams, and every query's p50 and p99."""
    kinds = {"common": ["session"], "rare": ["zephyr00001"], "none": ["quixotry"]}
    summary = {"p50Ms": p50, "p99Ms": p99, "maxMs": p99 + 1, "samples": 60}
    by_kind = {
        kind: {**summary, "queries": said, "hits": [0 if kind == "none" else 20]} for kind, said in kinds.items()
    }
    cells = {
        streams: {
            "indexedPerSec": [900, 950],
            "plainPerSec": [1000, 1000],
            "indexedMedian": 925.0,
            "plainMedian": 1000.0,
            "indexedOverPlain": ratio,
        }
        for streams, ratio in ratios.items()
    }
    return {
        "appends": {"cells": cells},
        "corpus": {"sessions": 1000, "events": 2_400_000, "passages": 30_000, "passageChars": 25_000_000},
        "size": {
            "method": "dbstat",
            "indexBytes": 60_000_000,
            "historyBytes": 40_000_000,
            "indexOverHistory": 1.5,
            "indexBytesPerHistoryMb": 1_500_000,
            "objects": {"search_passages": 50_000_000, "search_fts_data": 10_000_000, "history_records": 40_000_000},
        },
        "queries": {"store": {**summary, "byKind": by_kind}, "http": {**summary, "p99Ms": p99 + 5, "byKind": by_kind}},
    }


def search_entry(
    streams: list[int], sqlite: dict[str, Any], postgresql: dict[str, Any] | None, missing: str | None = None
) -> dict[str, Any]:
    """A search result line's value, of the stores given."""
    machine = {"seconds": 3, "rounds": 6, "streams": streams, "queryRounds": 20, "limit": 20, "loadAverage": [1, 2]}
    return {
        "machine": machine,
        "goals": {"appendIndexedOverPlain": 0.9, "queryP50Ms": 20.0, "queryP99Ms": 100.0},
        "stores": {"sqlite": sqlite, "postgresql": postgresql},
        "postgresqlMissing": missing,
    }


def test_report_renders_search_with_its_goals_and_postgresql_not_run(tmp_path: Path) -> None:
    sqlite = search_store({"1": 0.97, "50": 0.62}, 4.5, 98.0)
    entry = search_entry([1, 50], sqlite, None, "HISTORY_TEST_PG_URL is not set")
    run = tmp_path / "search.txt"
    run.write_text(f"noise\nHISTORY_SEARCH_RESULT {json.dumps(entry)}\n")
    assert main([str(RESULTS[-1]), "--docs", str(tmp_path), "--search", str(run)]) == 0
    markdown = (tmp_path / "benchmarks.md").read_text()
    section = markdown.split("## Search")[1].split("\n## ")[0]
    assert f"`{run}`" in markdown.split("## Goals")[0]
    for needle in (
        "1,000 sessions of `bench.search` (2,400,000 events, 30,000 passages of 25,000,000 characters)",
        "| durable 1-event appends/s, indexed / unindexed, 1 stream at once | ≥ 0.9 | 0.97 (925 vs 1,000/s) (met) "
        "| not run: HISTORY_TEST_PG_URL is not set |",
        "| durable 1-event appends/s, indexed / unindexed, 50 streams at once | ≥ 0.9 | 0.62 (925 vs 1,000/s) "
        "(**missed**) |",
        "| query p50, the whole mix, `HistoryStore.search` | ≤ 20 ms on SQLite | 4.5 ms (met) |",
        "| query p99, the whole mix, `GET /v1/search` | ≤ 100 ms on SQLite | 103 ms (**missed**) |",
        "| index bytes over `history_records` bytes (with their indexes) | report | 1.5 (60,000,000 / 40,000,000 B) |",
        "| rare word (one session's ticket) | `zephyr00001` | 4.5 / 98 | 4.5 / 98 | 20 |",
        "| no hit | `quixotry` | 4.5 / 98 | 4.5 / 98 | 0 |",
        "| SQLite | 50 | 925 | 1,000 | 0.62 | 900, 950 | 1,000, 1,000 |",
        "| SQLite | 60,000,000 | 40,000,000 | 1,500,000 | dbstat | search_passages 50,000,000, search_fts_data",
    ):
        assert needle in section, needle
    assert "PostgreSQL store" not in section and "each query 20 times after an untimed round" in section
    empty = tmp_path / "empty.txt"
    empty.write_text("noise\n")
    assert main([str(RESULTS[-1]), "--docs", str(tmp_path), "--search", str(empty)]) == 1


def test_report_sets_postgresql_search_beside_sqlite_without_its_query_goals() -> None:
    entry = search_entry([50], search_store({"50": 0.95}, 4.5, 30.0), search_store({"50": 0.91}, 40.0, 300.0))
    section = render_markdown({"SEARCH": [entry]}, command="make bench", source="run.txt").split("## Search")[1]
    assert "| query p50, the whole mix, `HistoryStore.search` | ≤ 20 ms on SQLite | 4.5 ms (met) | 40 ms |" in section
    assert "(met) | 0.91 (925 vs 1,000/s) (met) |" in section
    assert "| SQLite store p50 / p99 ms | SQLite HTTP p50 / p99 ms | PostgreSQL store p50 / p99 ms |" in section
    assert "| common word | `session` | 4.5 / 30 | 4.5 / 30 | 40 / 300 | 40 / 300 | 20 |" in section

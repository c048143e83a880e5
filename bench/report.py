"""Turn a run's result lines into ``docs/benchmarks.md`` and ``docs/benchmarks.svg``.

Usage: ``python -m bench.report RESULTS [--docs DIR] [--command TEXT] [--hot-path RUN ...]
[--hot-path-before RUN] [--live-wire RUN] [--search RUN]``, where RESULTS is a file of ``HISTORY_*_RESULT``
lines (``make bench`` writes one per run under ``bench/results/``). Lines of other text are ignored, so a whole pytest
log works too. ``--hot-path`` takes runs of ``bench/test_hot_path.py`` alone (under
``bench/results/hot-path/``), shown a column each in place of RESULTS' own; ``--hot-path-before``
is a run before the change they measure, whose append profile is shown beside theirs.
``--live-wire`` takes a run of ``bench/test_live_wire.py`` alone, shown in place of RESULTS' own, and
``--search`` one of ``bench/test_search.py`` (under ``bench/results/search/``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

__all__ = ["main", "read_results", "render_markdown", "render_svg"]

# The seed's published production sample (dsh-packed-rows §6.4): another session, another
# machine, another implementation. Shown beside ours for scale, never as a like-for-like.
SEED_TABLE: Final = {
    "raw": {"records": 416_756, "json": 69_433_638, "gzip": 4_190_226, "brotli": 1_972_998},
    "projection": {"records": 228_129, "json": 38_427_209, "gzip": 2_324_688, "brotli": 957_350},
    "packed": {"records": 696, "json": 6_362_724, "gzip": 1_154_206, "brotli": 528_145},
}
SEED_CLIENT: Final = {"rawMs": 4682.11, "packedMs": 276.10, "rawHeap": 612_523_344, "packedHeap": 199_436_928}
LABELS: Final = {
    "raw": "Raw logical events",
    "projection": "Completed-step projection (lossy)",
    "packed": "Lossless packed",
}


def read_results(path: Path) -> dict[str, list[Any]]:
    """Every result line of a file, by its name (``HISTORY_TRANSPORT_PERF_RESULT`` → ``TRANSPORT_PERF``)."""
    out: dict[str, list[Any]] = {}
    for line in path.read_text().splitlines():
        head, _, payload = line.strip().partition(" ")
        if head.startswith("HISTORY_") and head.endswith("_RESULT") and payload:
            out.setdefault(head.removeprefix("HISTORY_").removesuffix("_RESULT"), []).append(json.loads(payload))
    return out


def n(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def vs(raw: float, packed: float) -> str:
    """Packed against raw, as a speed ratio."""
    if packed <= 0 or raw <= 0:
        return ""
    return f"{raw / packed:.1f}× faster" if raw >= packed else f"{packed / raw:.1f}× slower"


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.2f}%"


def _bytes_table(result: dict[str, Any]) -> list[str]:
    b, fixture = result["bytes"], result["fixture"]
    records = {
        "raw": fixture["logicalEvents"],
        "projection": fixture["projectionRecords"],
        "packed": fixture["packedRecords"],
    }
    rows = [
        "| Representation | Records | JSON bytes | gzip 6 | brotli 5 | zstd 3 "
        "| seed records | seed JSON | seed gzip | seed brotli |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in ("raw", "projection", "packed"):
        seed = SEED_TABLE[kind]
        rows.append(
            f"| {LABELS[kind]} | {records[kind]:,} | {b[kind + 'Json']:,} | {b[kind + 'Gzip']:,} | "
            f"{b[kind + 'Brotli']:,} | {b[kind + 'Zstd']:,} | {seed['records']:,} | {seed['json']:,} | "
            f"{seed['gzip']:,} | {seed['brotli']:,} |"
        )
    rows.append(
        f"| packed / raw | | {pct(b['packedJson'], b['rawJson'])} | {pct(b['packedGzip'], b['rawGzip'])} | "
        f"{pct(b['packedBrotli'], b['rawBrotli'])} | {pct(b['packedZstd'], b['rawZstd'])} | | "
        f"{pct(SEED_TABLE['packed']['json'], SEED_TABLE['raw']['json'])} | "
        f"{pct(SEED_TABLE['packed']['gzip'], SEED_TABLE['raw']['gzip'])} | "
        f"{pct(SEED_TABLE['packed']['brotli'], SEED_TABLE['raw']['brotli'])} |"
    )
    return rows


def _fixture_section(result: dict[str, Any]) -> list[str]:
    f, host, client, transport = result["fixture"], result["host"], result["client"], result["transport"]
    memory, combined, store = result["memory"], result["combined"], result["store"]
    lines = [
        f"### `{f['name']}`",
        "",
        f"Session of {f['sessionEvents']:,} events; the page is `[{f['fromSeq']:,}, {f['sessionEvents']:,})`: "
        f"{f['logicalEvents']:,} logical events ({f['ordinaryEvents']:,} ordinary, {f['deltaEvents']:,} deltas in "
        f"{f['deltaRuns']} runs) → {f['packedRecords']:,} packed records; the client decoded "
        f"{f['decodedEvents']:,} events. Fixture built in {n(f['buildMs'])} ms.",
        "",
        *_bytes_table(result),
        "",
        "| ms (median) | raw | packed | packed vs raw |",
        "|---|---:|---:|---:|",
        f"| host: select the cut | {n(host['selectMs'])} | {n(host['selectMs'])} | same |",
        f"| host: wrap or pack | {n(host['rawEntryWrapMs'])} | {n(host['packMs'] + host['packedRecordWrapMs'])} | |",
        f"| host: encode | {n(host['rawStringifyMs'])} | {n(host['packedStringifyMs'])} | |",
        f"| host response (from memory) | {n(host['rawResponseMs'])} | {n(host['packedResponseMs'])} | "
        f"{vs(host['rawResponseMs'], host['packedResponseMs'])} |",
        f"| loopback transfer, total | {n(transport['rawTotalMs'])} | {n(transport['packedTotalMs'])} | "
        f"{vs(transport['rawTotalMs'], transport['packedTotalMs'])} |",
        f"| client: parse (untyped) | {n(client['rawParseMs'])} | {n(client['packedParseMs'])} | |",
        f"| client: validated page | {n(client['rawValidationMs'])} | {n(client['packedValidationMs'])} | "
        f"{vs(client['rawValidationMs'], client['packedValidationMs'])} |",
        f"| client: exact expansion | {n(client['rawPrepareMs'])} | {n(client['packedPrepareMs'])} | |",
        f"| client: fold (events; packed by rows) | {n(client['rawFoldMs'])} | {n(client['packedCompactFoldMs'])} | |",
        f"| client history | {n(client['rawHistoryMs'])} | {n(client['packedHistoryMs'])} | "
        f"{vs(client['rawHistoryMs'], client['packedHistoryMs'])} |",
        f"| client history with exact expansion | {n(client['rawHistoryMs'])} | {n(client['packedExactHistoryMs'])} | "
        f"{vs(client['rawHistoryMs'], client['packedExactHistoryMs'])} |",
        f"| synthetic API wait | {n(combined['rawSyntheticApiWaitMs'])} | {n(combined['packedSyntheticApiWaitMs'])} | "
        f"{vs(combined['rawSyntheticApiWaitMs'], combined['packedSyntheticApiWaitMs'])} |",
        f"| synthetic UI ready | {n(combined['rawSyntheticReadyMs'])} | {n(combined['packedSyntheticReadyMs'])} | "
        f"{vs(combined['rawSyntheticReadyMs'], combined['packedSyntheticReadyMs'])} |",
        "",
        "| heap peak (tracemalloc, median of " + str(memory["samples"]) + ") | raw | packed | raw / packed |",
        "|---|---:|---:|---:|",
        f"| host | {memory['rawHostAdditionalHeapPeakBytes']:,} | {memory['packedHostAdditionalHeapPeakBytes']:,} | "
        f"{memory['hostRawOverPacked']:.2f}× |",
        f"| client (packed: row fold) | {memory['rawClientAdditionalHeapPeakBytes']:,} | "
        f"{memory['packedClientAdditionalHeapPeakBytes']:,} | {memory['clientRawOverPacked']:.2f}× |",
        f"| client (packed: exact expansion) | {memory['rawClientAdditionalHeapPeakBytes']:,} | "
        f"{memory['packedExactClientAdditionalHeapPeakBytes']:,} | {memory['clientRawOverPackedExact']:.2f}× |",
        "",
        "| cold tail page (new store instance), ms | raw | packed | raw / packed |",
        "|---|---:|---:|---:|",
    ]
    for backend, cell in store.items():
        if backend == "versusRealistic":
            continue
        if "packedColdMs" not in cell:
            packed = store["sqlite"]["packedColdMs"]
            lines.append(
                f"| {backend} (raw only; packed is sqlite's) | {n(cell['rawColdMs'])} | {n(packed)} | "
                f"{cell['rawColdMs'] / packed:.1f}× |"
            )
            continue
        lines.append(f"| {backend} | {n(cell['rawColdMs'])} | {n(cell['packedColdMs'])} | {cell['speedup']:.1f}× |")
    side = store.get("versusRealistic")
    if side is not None:
        lines += [
            "",
            f"Alternating fresh host processes ({len(side['samplesMs'])} samples each), the cold packed SQLite page "
            f"took {n(side['packedColdMs'])} ms here against {n(side['realisticPackedColdMs'])} ms for `realistic`: "
            f"{side['ratio']:.2f}×.",
        ]
    return [*lines, ""]


def _goals(transport: dict[str, dict[str, Any]]) -> list[str]:
    real = transport.get("realistic")
    long = transport.get("long-session")
    lines = ["| goal | target | measured | |", "|---|---|---|---|"]
    if real is None:
        return []

    def row(name: str, target: str, value: str, ok: bool) -> None:
        lines.append(f"| {name} | {target} | {value} | {'met' if ok else '**missed**'} |")

    b = real["bytes"]
    row(
        "packed/raw JSON, realistic",
        "≤ 9.2%",
        pct(b["packedJson"], b["rawJson"]),
        b["packedJson"] / b["rawJson"] <= 0.092,
    )
    row(
        "packed/raw brotli, realistic",
        "≤ 26.8%",
        pct(b["packedBrotli"], b["rawBrotli"]),
        b["packedBrotli"] / b["rawBrotli"] <= 0.268,
    )
    sqlite = real["store"]["sqlite"]
    row(
        "packed host response, cold SQLite, vs raw from the same store (`?expand=raw`)",
        "≥ 15× faster",
        f"{sqlite['speedup']:.1f}×",
        sqlite["speedup"] >= 15,
    )
    if "vsRawEventsStore" in sqlite:
        versus = sqlite["vsRawEventsStore"]
        row(
            "packed host response, cold SQLite, vs a raw-events SQLite host",
            "≥ 15× faster",
            f"{versus:.1f}×",
            versus >= 15,
        )
    speedup = real["client"]["validatedPageSpeedup"]
    row("client time to a validated page", "≥ 5× faster", f"{speedup:.1f}×", speedup >= 5)
    memory = real["memory"]
    for side in ("host", "client"):
        ratio = memory[f"{side}RawOverPacked"]
        row(f"{side} heap peak", "≥ 3× smaller", f"{ratio:.2f}×", ratio >= 3)
    if long is not None:
        side = long["store"].get("versusRealistic")
        if side is not None:
            name = f"long-session tail page, cold SQLite, alternating with realistic's ({len(side['samplesMs'])} each)"
            row(name, "≤ 1.2× realistic", f"{side['ratio']:.2f}×", side["ratio"] <= 1.2)
        ratio = long["store"]["sqlite"]["packedColdMs"] / sqlite["packedColdMs"]
        row("long-session tail page, cold SQLite, separate runs", "≤ 1.2× realistic", f"{ratio:.2f}×", ratio <= 1.2)
    return [*lines, ""]


def _follow_scale_section(entry: dict[str, Any]) -> list[str]:
    machine = entry["machine"]
    lines = [
        "## Follow across two processes on one PostgreSQL",
        "",
        f"{machine['seconds']} s per cell; the producer appends through process A. Latency is from sending an append "
        "to reading its frame; followers on B hear of it only through PostgreSQL's head notices. "
        f"Open-file limit raised from {machine['nofileBefore']:,} to {machine['nofileAfter']:,}.",
        "",
        "| placement | followers | target ev/s | achieved ev/s | p50 ms | p99 ms | max ms | p99 ms per process "
        "| lost | dup |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for c in entry["cells"]:
        per = ", ".join(f"{v['p99Ms']} ({v['followers']})" for v in c["byFollowerUrl"].values())
        lines.append(
            f"| {c['placement']} | {c['followers']} | {c['targetEventsPerSec']:,} | {c['achievedEventsPerSec']:,} | "
            f"{c['p50Ms']} | {c['p99Ms']} | {c['maxMs']} | {per} | {c['lost']} | {c['duplicated']} |"
        )
    capacity = entry.get("capacity")
    if capacity:
        load = capacity["activeLoad"]
        lines += [
            "",
            f"Capacity: {capacity['idleFollowers']:,} idle followers over {capacity['sessions']} sessions, split "
            f"across two processes ({capacity['stillOpen']:,} still open at the end).",
            "",
            "| bytes per follower (A, B) | page p50 ms | page p99 ms | 500 ev/s on "
            f"{load['sessions']} sessions: p50 ms | p99 ms | lost | dup |",
            "|---|---:|---:|---:|---:|---:|---:|",
            f"| {', '.join(f'{b:,}' for b in capacity['bytesPerFollower'])} | {capacity['pageP50Ms']} | "
            f"{capacity['pageP99Ms']} | {load['p50Ms']} | {load['p99Ms']} | {load['lost']} | {load['duplicated']} |",
        ]
    return [*lines, ""]


def _page_path_section(entry: dict[str, Any], transport: dict[str, dict[str, Any]]) -> list[str]:
    """The page path's goals (docs/protocol.md §7.4) and the append rates behind them."""
    page, cold, service, appends = entry["page"], entry["cold"], entry["service"], entry["appends"]
    lines = [
        "## The page path",
        "",
        f"The `realistic` tail page: {page['events']:,} events in {page['records']:,} records, "
        f"{page['packedBytes']:,} B packed ({page['rawBytes']:,} B raw). Cold pages come from a new store "
        "instance in fresh host processes; service times from a real server process on the SQLite store.",
        "",
        "| goal | target | measured | |",
        "|---|---|---|---|",
    ]

    def row(name: str, target: str, value: str, ok: bool) -> None:
        lines.append(f"| {name} | {target} | {value} | {'met' if ok else '**missed**'} |")

    for backend, limit in (("sqlite", 25), ("jsonl", 25), ("jsonl-zstd", 25), ("postgresql", 40)):
        if backend in cold:
            value = cold[backend]["packedColdMs"]
            row(f"cold tail page, {backend}, identity", f"≤ {limit} ms", f"{n(value)} ms", value <= limit)
    versus = cold["sqliteVsRawEvents"]
    row("the same from SQLite, vs the raw-events SQLite host", "≥ 15× faster", f"{versus:.1f}×", versus >= 15)
    row(
        "tail page through the service, identity (`Server-Timing`)",
        "≤ 30 ms",
        f"{n(service['identityServerMs'])} ms",
        service["identityServerMs"] <= 30,
    )
    row(
        "tail page through the service, zstd, end to end",
        "≤ 60 ms",
        f"{n(service['zstdMs'])} ms",
        service["zstdMs"] <= 60,
    )
    long = transport.get("long-session", {}).get("store", {}).get("versusRealistic")
    if long is not None:
        row(
            "long-session tail page vs realistic (SQLite, alternating)",
            "≤ 1.1×",
            f"{long['ratio']:.2f}×",
            long["ratio"] <= 1.1,
        )
    heap = max(cold[backend]["heapOverPage"] for backend in appends)
    row("host heap peak on a page read, worst backend", "≤ 2× the page", f"{heap:.2f}×", heap <= 2)
    raw = service["rawServerOverColdPageRaw"]
    row(
        f"`?expand=raw` through the service ({n(service['rawServerMs'])} ms) vs `bench/cold_page.py` raw "
        f"({n(service['coldPageRawMs'])} ms)",
        "≤ 1.2×",
        f"{raw:.2f}×",
        raw <= 1.2,
    )
    for backend in ("sqlite", "jsonl"):
        rate = appends[backend]["batchEventsPerSec"]
        row(f"appends with sealing, {backend}, 512-event batches", "≥ 150k events/s", f"{rate:,}/s", rate >= 150_000)
    lines += [
        "",
        "| backend | cold page ms | heap peak / page | 512-event batches, events/s | 1-event batches, events/s "
        "| ms per 1-event append | write + fsync ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, a in appends.items():
        c = cold[backend]
        lines.append(
            f"| {backend} | {n(c['packedColdMs'])} | {c['heapOverPage']:.2f} | {a['batchEventsPerSec']:,} | "
            f"{a['singleEventsPerSec']:,} | {a['singleAppendMs']} | {a['fsyncMs']} |"
        )
    return [*lines, ""]


THROUGHPUT_STORES: Final = {"sqlite": "SQLite", "jsonl": "JSONL", "postgresql": "PostgreSQL"}
# Goals of issue 13 at 50 connections: page share of memory's, and durable 1-event appends/s.
THROUGHPUT_PAGE_SHARE: Final = {"sqlite": 0.6, "jsonl": 0.6, "postgresql": 0.4}
THROUGHPUT_APPENDS: Final = {"sqlite": 2500, "jsonl": 1500, "postgresql": 2000}


def _throughput_section(entry: dict[str, Any]) -> list[str]:
    """Many small requests (issue 13): goals, then pages and appends per store beside memory's."""
    machine, stores = entry["machine"], entry["stores"]
    lines = [
        "## Many small requests",
        "",
        f"{machine['seconds']} s per cell, closed loop: each of N keep-alive connections from one asyncio process "
        "owns one session and sends one request at a time. Pages are `maxMessages="
        f"{machine['pageMessages']}` of a {machine['seedEvents']}-event session; appends are durable one-event "
        "batches. Each cell runs on a memory-store service and then on the store's, back to back; server time is "
        "the median `Server-Timing`, and CPU is each process's share of one core over the window.",
        "",
        "| goal | target | measured | |",
        "|---|---|---|---|",
    ]

    def row(name: str, target: str, value: str, ok: bool | None) -> None:
        mark = "" if ok is None else "met" if ok else "**missed**"
        lines.append(f"| {name} | {target} | {value} | {mark} |")

    for store, label in THROUGHPUT_STORES.items():
        cells = stores.get(store)
        target = THROUGHPUT_PAGE_SHARE[store]
        if cells is None:
            row(f"{label} pages/s vs memory's, 50 connections", f"≥ {target:.0%}", "not run", None)
            continue
        share = cells["share"]
        at = "" if share["connections"] == 50 else f" (at {share['connections']})"
        pair = cells["page"][str(share["connections"])]
        value = f"{share['page']:.0%}: {pair['store']['perSec']:,} vs {pair['memory']['perSec']:,}/s{at}"
        row(f"{label} pages/s vs memory's, 50 connections", f"≥ {target:.0%}", value, share["page"] >= target)
    for store, label in THROUGHPUT_STORES.items():
        cells = stores.get(store)
        target = THROUGHPUT_APPENDS[store]
        name = f"{label} durable 1-event appends/s, 50 sessions"
        if cells is None:
            row(name, f"≥ {target:,}/s", "not run", None)
            continue
        most = str(cells["share"]["connections"])
        rate = cells["append"][most]["store"]["perSec"]
        at = "" if most == "50" else f" (at {most})"
        row(name, f"≥ {target:,}/s", f"{rate:,}/s{at}", rate >= target)
    sqlite = stores.get("sqlite")
    if sqlite is None:
        row("SQLite small-page server time, 1 connection", "≤ 0.5 ms", "not run", None)
    else:
        server = sqlite["page"]["1"]["store"]["serverP50Ms"]
        row("SQLite small-page server time, 1 connection", "≤ 0.5 ms", f"{server} ms", server <= 0.5)
    bounded = entry.get("bounded")
    if bounded is None:
        row("RSS growth over 100,000 touched sessions", "≤ 50 MB", "not run", None)
    else:
        sessions = "" if bounded["sessions"] == 100_000 else f" (over {bounded['sessions']:,})"
        growth = bounded["growthMb"]
        row("RSS growth over 100,000 touched sessions", "≤ 50 MB", f"{growth} MB{sessions}", growth <= 50)
    for workload, title in (("page", "pages"), ("append", "appends")):
        server = " | server p50 ms (memory)" if workload == "page" else ""
        lines += [
            "",
            f"| store | connections | {title}/s | memory {title}/s | store / memory | p50 ms (memory) "
            f"| p99 ms (memory){server} | CPU client, server (memory) |",
            "|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if server else "") + "---|",
        ]
        for store, label in THROUGHPUT_STORES.items():
            for connections, pair in stores.get(store, {}).get(workload, {}).items():
                s, m = pair["store"], pair["memory"]
                timing = f" | {s['serverP50Ms']} ({m['serverP50Ms']})" if server else ""
                lines.append(
                    f"| {label} | {connections} | {s['perSec']:,} | {m['perSec']:,} | "
                    f"{s['perSec'] / m['perSec']:.0%} | {s['p50Ms']} ({m['p50Ms']}) | {s['p99Ms']} ({m['p99Ms']})"
                    f"{timing} | {s['clientCpu']}, {s['serverCpu']} ({m['clientCpu']}, {m['serverCpu']}) |"
                )
    if bounded is not None:
        lines += [
            "",
            f"Bounded state ({bounded['store']}): {bounded['sessions']:,} new sessions, each created, appended to "
            f"once and paged once, over {bounded['connections']} connections in {bounded['seconds']} s "
            f"({bounded['sessionsPerSec']:,} sessions/s; request p50 {bounded['p50Ms']} ms, p99 "
            f"{bounded['p99Ms']} ms). Server RSS {bounded['rssFirstMb']} MB after the first "
            f"{bounded['firstSessions']:,}, {bounded['rssEndMb']} MB at the end: {bounded['growthMb']} MB more.",
        ]
    return [*lines, ""]


_NO_REF, _NO_G = "referenceMissing", "granianMissing"
# Goals of issue 44, side by side in one run at 50 connections: (ratio key, measure, goal or None to report,
# the key of the entry that says why a ratio is missing). The floor is bare Starlette's `/healthz` on uvicorn.
HOT_PATH_GOALS: Final = [
    ("healthzShippedOverBare", "`/healthz`, shipped settings, vs bare Starlette", 0.8, None),
    ("appendMemoryOverBare", "1-event append, memory, vs bare Starlette's `/healthz`", 0.5, None),
    ("appendSqliteOverBare", "1-event durable append, SQLite, vs bare Starlette's `/healthz`", 0.35, None),
    ("pageMemoryOverBare", "small page (`maxMessages=5`), memory, vs bare Starlette's `/healthz`", 0.35, None),
    ("appendShippedOverQuiet", "append with access log and metrics on vs off", 0.95, None),
    ("appendMemoryOverReference", "1-event append, memory, vs the Durable Streams reference server", None, _NO_REF),
    ("appendGranianOverUvicorn", "1-event append, memory, under granian vs uvicorn (adopted at ≥ 1.3×)", 1.3, _NO_G),
    ("appendSqliteGranianOverUvicorn", "1-event durable append, SQLite, under granian vs uvicorn", None, _NO_G),
    ("pageGranianOverUvicorn", "small page, memory, under granian vs uvicorn", None, _NO_G),
    ("healthzGranianOverUvicorn", "`/healthz`, shipped, under granian vs uvicorn", None, _NO_G),
    ("bareGranianOverUvicorn", "bare Starlette's `/healthz` under granian vs uvicorn", None, _NO_G),
]


def _hot_path_section(entries: list[dict[str, Any]], before: dict[str, Any] | None = None) -> list[str]:
    """The hot path (issues 26 and 44): each run's ratios against their goals, every cell, and the append's profiles.

    ``before`` is a run of the code before the change the section reports, for its profile.
    """
    machine = entries[-1]["machine"]
    runs = " | ".join(f"run {i + 1}" for i in range(len(entries)))
    lines = [
        "## The hot path",
        "",
        f"{machine['seconds']} s per cell, {machine['connections']} keep-alive connections from one asyncio process, "
        "each with its own session or stream. Bare Starlette is one route on uvicorn with httptools and uvloop; "
        "*quiet* is `HISTORY_METRICS=0` and `--log-level warning`; the reference is `@durable-streams/server` "
        "(Node, in memory) appending small `text/plain` messages. Cells named `.granian` run the same app under "
        "granian (one worker, single-threaded runtime, uvloop, HTTP/1.1) instead of uvicorn.",
        "",
        f"| measure | goal | {runs} |",
        "|---|---|" + "---:|" * len(entries),
    ]
    for key, name, goal, missing in HOT_PATH_GOALS:
        wanted = "report" if goal is None else f"≥ {goal:g}×"
        measured = []
        for entry in entries:
            value = entry["ratios"].get(key)
            if value is None:
                why = (entry.get(missing) if missing else None) or "not in this run"
                measured.append(f"not run: {why}")
            else:
                verdict = "" if goal is None else " (met)" if value >= goal else " (**missed**)"
                measured.append(f"{value:g}×{verdict}")
        lines.append(f"| {name} | {wanted} | {' | '.join(measured)} |")
    for i, entry in enumerate(entries):
        lines += [
            "",
            f"Run {i + 1}:" if len(entries) > 1 else "Cells:",
            "",
            "| cell | requests/s | p50 ms | p99 ms | CPU client, server |",
            "|---|---:|---:|---:|---|",
        ]
        for name, cell in entry["cells"].items():
            if cell is not None:
                lines.append(
                    f"| {name} | {cell['perSec']:,} | {cell['p50Ms']} | {cell['p99Ms']} | "
                    f"{cell['clientCpu']}, {cell['serverCpu']} |"
                )
    profiles = [("before", before), ("after", entries[-1])] if before is not None else [("", entries[-1])]
    for when, entry in profiles:
        lines.extend(_append_profile(entry.get("appendProfile") if entry else None, when))
    return [*lines, ""]


def _append_profile(profile: dict[str, Any] | None, when: str) -> list[str]:
    if not profile or not profile["samples"]:
        return []
    lines = [
        "",
        f"py-spy profile of the event loop's thread during the shipped memory append cell{f', {when}' if when else ''} "
        f"({profile['samples']:,} samples):",
        "",
        "| inclusive | frame | | self | frame |",
        "|---:|---|---|---:|---|",
    ]
    for (inclusive, frame), (own, where) in zip(profile["inclusive"], profile["self"], strict=False):
        lines.append(f"| {inclusive:.1%} | `{frame}` | | {own:.1%} | `{where}` |")
    return lines


ASGI_CELLS: Final = {
    "healthz.bare": "bare Starlette `/healthz`",
    "healthz.shipped": "`/healthz`, shipped",
    "healthz.quiet": "`/healthz`, quiet",
    "append.shipped": "1-event append, memory, shipped",
    "append.quiet": "1-event append, memory, quiet",
    "append.sqlite": "1-event durable append, SQLite, shipped",
    "page.shipped": "`maxMessages=5` page, memory, shipped",
    "page.quiet": "`maxMessages=5` page, memory, quiet",
}


def _asgi_cost_section(entry: dict[str, Any], before: dict[str, Any] | None = None) -> list[str]:
    """`bench.asgi_cost`: our time per request in process, beside bare Starlette's, without a server.

    With ``before``, a run of the code before the change, its figures stand beside these.
    """
    machine = entry["machine"]
    runs = [("before", before), ("after", entry)] if before is not None else [("", entry)]
    heads = " | ".join(
        f"µs per request{f', {when}' if when else ''} | bare over cell{f', {when}' if when else ''}" for when, _ in runs
    )
    lines = [
        "### In process, without a server",
        "",
        f"`python -m bench.asgi_cost`: each app called through ASGI from one event loop, {machine['rounds']} "
        f"interleaved rounds of {machine['requests']:,} requests per cell; medians. The ratio is bare Starlette's "
        "time over the cell's in the same round (1 is the floor).",
        "",
        f"| cell | {heads} |",
        "|---|" + "---:|---:|" * len(runs),
    ]
    for key, name in ASGI_CELLS.items():
        if key in entry["microseconds"]:
            figures = []
            for _, run in runs:
                assert run is not None
                ratio = run["bareOver"].get(key)
                micros = run["microseconds"].get(key)
                figures += ["" if micros is None else f"{micros:,}", "" if ratio is None else f"{ratio:g}×"]
            lines.append(f"| {name} | {' | '.join(figures)} |")
    return [*lines, ""]


# Goals of issue 43, side by side in one run: (ratio key, measure, goal, whether lower is better).
CAPACITY_GOALS: Final = [
    ("pagesW2OverW1", "small pages/s (`maxMessages=5`), SQLite, `--workers 2` over `--workers 1`", "≥ 1.5×", False),
    ("appendsW2OverW1", "durable 1-event appends/s, SQLite, `--workers 2` over `--workers 1`", "≥ 1.2×", False),
    ("followP99MsW2", "follow delivery p99 at 500 events/s, 100 followers over 2 SQLite workers", "≤ 50 ms", True),
    ("capacityW2OverW1", "capacity (live sessions), SQLite `--workers 2` over `--workers 1`", "≥ 1.5×", False),
    ("dsCapacityW2OverReference", "capacity through `/ds`, SQLite `--workers 2` over the reference", "≥ 0.5×", False),
]
CAPACITY_CELLS: Final = {
    "v1.sqlite.w1": "`/v1`, SQLite, `--workers 1`",
    "v1.sqlite.w2": "`/v1`, SQLite, `--workers 2`",
    "ds.sqlite.w1": "`/ds`, SQLite, `--workers 1`",
    "ds.sqlite.w2": "`/ds`, SQLite, `--workers 2`",
    "ds.reference": "`/ds`, the reference server (Node, in memory)",
    "v1.postgresql.w2": "`/v1`, PostgreSQL, `--workers 2`",
}


_WIRE_FORMS: Final = (
    ("frames", "event frames (today's default)"),
    ("framesGzip", "event frames, gzip"),
    ("packed", "packed (`records` frames)"),
    ("packedGzip", "packed, gzip"),
)


def _live_wire_section(entry: dict[str, Any]) -> list[str]:
    machine, ratios, live, burst = entry["machine"], entry["ratios"], entry["live"], entry["burst"]
    lines = [
        "## Follow on the wire",
        "",
        "One session streams text deltas, one 1-event append per ~5-character token, to one reader per form "
        "at once; bytes are read off the socket (compressed when coded), latency is from sending an append to "
        f"the reader holding the decoded event. Coalescing: {machine['coalesceMs']} ms. Load average during the "
        f"run: {', '.join(map(str, machine['loadAverage']))} (other work on the machine shows in the latencies).",
        "",
        "| form | B/token 50/s | p50 / p99 ms 50/s | B/token 500/s | p50 / p99 ms 500/s "
        f"| B/event, catch-up of {burst['events']:,} |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    slow, fast = live["50"]["streams"], live["500"]["streams"]
    for key, label in _WIRE_FORMS:
        lines.append(
            f"| {label} | {slow[key]['bytesPerEvent']} | {slow[key]['p50Ms']} / {slow[key]['p99Ms']} | "
            f"{fast[key]['bytesPerEvent']} | {fast[key]['p50Ms']} / {fast[key]['p99Ms']} | "
            f"{burst[key]['bytesPerEvent']} |"
        )
    memory = entry["memory"]
    reference = entry.get("reference") or {}
    lines += [
        "",
        "| measure | goal | figure |",
        "|---|---|---:|",
        f"| bytes per token at 50/s, packed + gzip over event frames | ≤ 0.25 "
        f"| {ratios['packedGzipOverFramesBytesAt50']} |",
        f"| the same in the catch-up burst | ≤ 0.10 | {ratios['packedGzipOverFramesBytesBurst']} |",
        f"| delivery p99 at 500/s, packed + gzip over event frames | ≤ 1.2 "
        f"| {ratios['packedGzipOverFramesP99At500']} |",
        f"| memory per compressed follower, {memory['packedGzip']['followers']:,} idle | ≤ 64 KB "
        f"| {memory['packedGzip']['bytesPerFollower']:,} B |",
        f"| memory per uncompressed follower, the same | – | {memory['packed']['bytesPerFollower']:,} B |",
    ]
    if reference:
        lines += [
            f"| SSE bytes per token at 50/s over the reference server's (same event JSON), packed + gzip | report "
            f"| {ratios['packedGzipOverReferenceJsonAt50']} |",
            f"| the same, event frames | report | {ratios['framesOverReferenceJsonAt50']} |",
            f"| packed + gzip over the reference server carrying the bare token as text | report "
            f"| {ratios['packedGzipOverReferenceTextAt50']} |",
        ]
    return [*lines, ""]


def _capacity_section(entry: dict[str, Any]) -> list[str]:
    """Every core on SQLite (issue 43): the ratios against their goals, and each capacity cell with its bound."""
    machine, ratios, goals = entry["machine"], entry["ratios"], entry["goals"]
    lines = [
        "## Every core, and the capacity of live sessions",
        "",
        f"One live session is a producer appending 5 token deltas every 100 ms and one SSE follower. A step runs "
        f"{machine['seconds']} s (after {machine['warmup']} s of warm-up) and passes when the p99 delay from append "
        "to delivery is ≤ 250 ms with nothing lost, duplicated or refused; the ramp doubles from "
        f"{machine['steps'][0]} to its first failure, then bisects {machine['bisect']} times. The load generator is "
        f"one open-loop asyncio process on the same {machine['cores']} cores as the server, so `--workers 2` can "
        "never show 2× here: the columns give both processes' CPU, in cores, and each cell says what bounded it. "
        f"Throughput is {machine['throughputSeconds']} s per cell at {machine['connections']} connections, "
        "`--workers 1`, 2, 2, 1, the median of each.",
        "",
        "| measure | goal | measured | |",
        "|---|---|---|---|",
    ]
    for key, name, goal, lower in CAPACITY_GOALS:
        value, target = ratios.get(key), goals[key]
        if value is None:
            why = entry.get("referenceMissing") if key == "dsCapacityW2OverReference" else None
            lines.append(f"| {name} | {goal} | not run{': ' + why if why else ''} | |")
            continue
        met = value <= target if lower else value >= target
        shown = f"{value:g} ms" if lower else f"{value:g}×"
        lines.append(f"| {name} | {goal} | {shown} | {'met' if met else '**missed**'} |")
    follow = entry["follow"].get("sqlite.w2") or {}
    if follow:
        lines += [
            "",
            f"Follow: p50 {follow['p50Ms']} ms, p99 {follow['p99Ms']} ms, max {follow['maxMs']} ms; connections per "
            f"worker at the busiest moment {', '.join(map(str, follow['perWorker']))} (the producer's one included).",
        ]
    lines += [
        "",
        "| cell | capacity | bound | steps: sessions → p99 ms (pass) | CPU client, server, machine at the last step |",
        "|---|---:|---|---|---|",
    ]
    for key, name in CAPACITY_CELLS.items():
        cell = entry["capacity"].get(key)
        if cell is None:
            why = entry.get("referenceMissing") if key == "ds.reference" else entry.get("postgresqlMissing")
            lines.append(f"| {name} | not run: {why or 'missing'} | | | |")
            continue
        steps = ", ".join(f"{s['sessions']} → {s['p99Ms']}{' ✓' if s['pass'] else ' ✗'}" for s in cell["steps"])
        last = cell["steps"][-1]
        lines.append(
            f"| {name} | {cell['capacity']:,} | {cell['bound']} | {steps} | "
            f"{last['clientCpu']}, {last['serverCpu']}, {last.get('machineCpu', '?')} |"
        )
    cost = entry["loadgen"]["cpuPerSessionSecondMs"]
    if cost is not None:
        lines += [
            "",
            f"The load generator's own cost: {cost} ms of CPU per session-second (each cell's largest passing step).",
        ]
    if entry["capacity"].get("v1.postgresql.w2") is not None:
        lines += ["", "The server CPU of the PostgreSQL cell is the service's alone, not the database's."]
    return [*lines, ""]


SEARCH_STORES: Final = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
SEARCH_KINDS: Final = {
    "common": "common word",
    "rare": "rare word (one session's ticket)",
    "phrase": "phrase",
    "prefix": "prefix",
    "words": "two words",
    "cjk": "Chinese or Japanese word",
    "none": "no hit",
}


def _search_section(entry: dict[str, Any]) -> list[str]:
    """Search across sessions (`bench/test_search.py`): the index's cost per append, its size, and query latency."""
    machine, goals, stores = entry["machine"], entry["goals"], entry["stores"]
    ran = {key: stores[key] for key in SEARCH_STORES if stores.get(key) is not None}
    corpus = next(iter(ran.values()))["corpus"]
    missing = entry.get("postgresqlMissing") or "not in this run"
    times = "once" if machine["queryRounds"] == 1 else f"{machine['queryRounds']} times"
    lines = [
        "## Search",
        "",
        "Full-text search across sessions (docs/protocol.md §14). **Appends**: the sessions of each side stream the "
        "same talk (a user message, text and reasoning deltas of 1 to 7 characters, tool calls and results), one "
        "event per durable append to the store itself, not through HTTP, so the service's own cost per request does "
        f"not dilute the index's. Windows of {machine['seconds']} s alternate between a store with the index and one "
        f"opened without it (`indexed=False`), {machine['rounds']} rounds with the order swapped each round; the "
        "ratio is the median of the rounds' indexed / unindexed ratios. **Size and queries**: "
        f"{corpus['sessions']:,} sessions of `bench.search` ({corpus['events']:,} events, {corpus['passages']:,} "
        f"passages of {corpus['passageChars']:,} characters) written in batches of 512; each query {times} after "
        f"an untimed round, {machine['limit']} hits a page, through "
        "`HistoryStore.search` and through `GET /v1/search` on the service in a thread (the time from the request's "
        "first byte to the answer's last). PostgreSQL's sizes and queries follow a `VACUUM ANALYZE`. Load average "
        f"during the run: {', '.join(map(str, machine['loadAverage']))}.",
        "",
        f"| measure | goal | {' | '.join(SEARCH_STORES.values())} |",
        "|---|---|" + "---|" * len(SEARCH_STORES),
    ]

    def row(name: str, goal: str, figure: Any, ok: Any = None) -> None:
        """A row of the goals: ``figure(cells)`` per store that ran, and ``ok(cells)`` whether it met the goal
        (``None``: no goal on that store)."""
        cells = []
        for key in SEARCH_STORES:
            if key not in ran:
                cells.append(f"not run: {missing}")
                continue
            met = None if ok is None else ok(key, ran[key])
            cells.append(figure(ran[key]) + ("" if met is None else " (met)" if met else " (**missed**)"))
        lines.append(f"| {name} | {goal} | {' | '.join(cells)} |")

    floor = goals["appendIndexedOverPlain"]
    for count in machine["streams"]:
        key = str(count)
        row(
            f"durable 1-event appends/s, indexed / unindexed, {count} stream{'s' if count > 1 else ''} at once",
            f"≥ {floor:g}",
            lambda c, k=key: (
                f"{c['appends']['cells'][k]['indexedOverPlain']:g} ({c['appends']['cells'][k]['indexedMedian']:,g} "
                f"vs {c['appends']['cells'][k]['plainMedian']:,g}/s)"
            ),
            lambda _, c, k=key: c["appends"]["cells"][k]["indexedOverPlain"] >= floor,
        )
    for path, label in (("store", "`HistoryStore.search`"), ("http", "`GET /v1/search`")):
        for figure, goal in (("p50Ms", goals["queryP50Ms"]), ("p99Ms", goals["queryP99Ms"])):
            row(
                f"query {figure[:3]}, the whole mix, {label}",
                f"≤ {goal:g} ms on SQLite",
                lambda c, p=path, f=figure: f"{c['queries'][p][f]:g} ms",
                lambda key, c, p=path, f=figure, g=goal: c["queries"][p][f] <= g if key == "sqlite" else None,
            )
    row(
        "index bytes over `history_records` bytes (with their indexes)",
        "report",
        lambda c: f"{c['size']['indexOverHistory']:g} ({c['size']['indexBytes']:,} / {c['size']['historyBytes']:,} B)",
    )
    paths = [(key, path) for key in ran for path in ("store", "http")]
    lines += [
        "",
        "| kind | queries | "
        + " | ".join(
            f"{SEARCH_STORES[key]} {'store' if path == 'store' else 'HTTP'} p50 / p99 ms" for key, path in paths
        )
        + " | hits (of each query) |",
        "|---|---|" + "---:|" * len(paths) + "---|",
    ]
    first = next(iter(ran.values()))["queries"]["store"]["byKind"]
    for kind, cell in first.items():
        by_path = [ran[key]["queries"][path]["byKind"][kind] for key, path in paths]
        figures = " | ".join(f"{one['p50Ms']:g} / {one['p99Ms']:g}" for one in by_path)
        said = ", ".join(f"`{q}`" for q in cell["queries"])
        lines.append(f"| {SEARCH_KINDS.get(kind, kind)} | {said} | {figures} | {', '.join(map(str, cell['hits']))} |")
    lines += [
        "",
        "| store | streams | indexed appends/s, median | unindexed, median | indexed / unindexed | indexed, each round "
        "| unindexed, each round |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for key, cells in ran.items():
        for count, cell in cells["appends"]["cells"].items():
            lines.append(
                f"| {SEARCH_STORES[key]} | {count} | {cell['indexedMedian']:,g} | {cell['plainMedian']:,g} | "
                f"{cell['indexedOverPlain']:g} | {', '.join(f'{v:,}' for v in cell['indexedPerSec'])} | "
                f"{', '.join(f'{v:,}' for v in cell['plainPerSec'])} |"
            )
    lines += [
        "",
        "| store | index bytes | `history_records` bytes | index bytes per MB of records | measured by | by object |",
        "|---|---:|---:|---:|---|---|",
    ]
    for key, cells in ran.items():
        size = cells["size"]
        objects = ", ".join(f"{name} {value:,}" for name, value in size["objects"].items())
        lines.append(
            f"| {SEARCH_STORES[key]} | {size['indexBytes']:,} | {size['historyBytes']:,} | "
            f"{size['indexBytesPerHistoryMb']:,} | {size['method']} | {objects} |"
        )
    return [*lines, ""]


def _browser_section(js: dict[str, Any] | None, viewer: dict[str, Any] | None) -> list[str]:
    """The JavaScript codec in Node, and the viewer in Chromium, against the browser goals."""
    lines = ["## In the browser", ""]
    if js is not None:
        page, valid, heap = js["page"], js["validatedPage"], js["heap"]

        def mark(ok: bool) -> str:
            return "met" if ok else "**missed**"

        lines += [
            f"The `realistic` tail page in Node {js['machine']['node']}: {page['events']:,} events, "
            f"{page['records']:,} records, {page['packedBytes']:,} B packed and {page['rawBytes']:,} B raw. "
            "Times are medians; heap peaks are `heapUsed + external`, medians of fresh processes.",
            "",
            "| measure | goal | packed | raw | ratio | |",
            "|---|---|---:|---:|---:|---|",
            f"| time to a validated page | ≥ 10× faster | {valid['packed']['medianMs']} ms | "
            f"{valid['raw']['medianMs']} ms | {valid['speedup']}× | {mark(valid['speedup'] >= 10)} |",
            f"| exact expansion | ≤ 150 ms | {js['expansion']['medianMs']} ms | | | "
            f"{mark(js['expansion']['medianMs'] <= 150)} |",
        ]
        for use, label in (("page", "the validated page"), ("stream", "events streamed"), ("events", "all events")):
            h = heap[use]
            lines.append(
                f"| heap peak, {label} | ≥ 3× smaller | {h['packedPeakBytes']:,} B | {h['rawPeakBytes']:,} B | "
                f"{h['heapRatio']}× | {mark(h['heapRatio'] >= 3)} |"
            )
        lines.append("")
    if viewer is not None:
        lines += [
            f"The viewer in Chromium {viewer['browser']}, opening `{viewer['session']}` ({viewer['events']:,} "
            "events): from the tail page's last byte to the tail rendered, measured in the page "
            f"(median of {viewer['loads']} fresh loads; goal ≤ 500 ms).",
            "",
            "| coding | wire bytes | records | median ms | samples ms |",
            "|---|---:|---:|---:|---|",
        ]
        for coding, cell in viewer["codings"].items():
            rendered = cell["rendered_ms"]
            lines.append(
                f"| {coding} | {cell['transfer_bytes']:,} | {cell['records']:,} | {rendered['median']} | "
                f"{', '.join(map(str, rendered['samples']))} |"
            )
        lines.append("")
    return lines


def render_markdown(
    results: dict[str, list[Any]],
    *,
    command: str,
    source: str,
    hot_path: Sequence[str] = (),
    hot_path_note: str = "",
) -> str:
    transport = {r["fixture"]["name"]: r for r in results.get("TRANSPORT_PERF", [])}
    any_result = next(iter(transport.values()), None)
    machine = any_result["machine"] if any_result else {}
    lines = [
        "# History-transport benchmarks",
        "",
        f"Generated by `python -m bench.report` from `{source}`, the result lines of one run of:",
        "",
        f"    {command}",
        "",
        *(
            [
                "The hot path's, the live wire's and search's sections come from runs of their benches alone, "
                "newer than that run: " + ", ".join(f"`{path}`" for path in hot_path) + ".",
                "",
            ]
            if hot_path
            else []
        ),
        f"Machine: {machine.get('cpus', '?')} CPUs, Python {machine.get('python', '?')}, "
        f"{machine.get('platform', '?')}; packages "
        + ", ".join(f"{k} {v}" for k, v in machine.get("packages", {}).items())
        + ". The machine is a shared 2-core VM whose speed varies; every time is a median, and ratios "
        "are measured side by side in the same run.",
        "",
        "The **seed** columns are the deepseek-harness production sample (dsh-packed-rows §6.4): another "
        "session, another machine and another implementation (Node). They are there for scale, not as a "
        f"like-for-like comparison. The seed's client took {SEED_CLIENT['rawMs']:,} ms raw and "
        f"{SEED_CLIENT['packedMs']:,} ms packed, with heap peaks of {SEED_CLIENT['rawHeap']:,} and "
        f"{SEED_CLIENT['packedHeap']:,} B.",
        "",
        "![bytes and times per representation](benchmarks.svg)",
        "",
        "## Goals (`realistic` unless named)",
        "",
        *_goals(transport),
        "## Fixtures",
        "",
    ]
    for entry in results.get("PAGE_PATH_PERF", []):
        lines.extend(_page_path_section(entry, transport))
    for entry in results.get("THROUGHPUT_PERF", []):
        lines.extend(_throughput_section(entry))
    if results.get("HOT_PATH"):
        lines.extend(_hot_path_section(results["HOT_PATH"], (results.get("HOT_PATH_BEFORE") or [None])[-1]))
        if hot_path_note:
            lines += [hot_path_note, ""]
    for entry in results.get("ASGI_COST", [])[-1:]:
        lines.extend(_asgi_cost_section(entry, (results.get("ASGI_COST_BEFORE") or [None])[-1]))
    for entry in results.get("CAPACITY", []):
        lines.extend(_capacity_section(entry))
    for entry in results.get("LIVE_WIRE", [])[-1:]:
        lines.extend(_live_wire_section(entry))
    for entry in results.get("SEARCH", [])[-1:]:
        lines.extend(_search_section(entry))
    js, viewer = results.get("JS_PAGE_PERF", [None])[-1], results.get("VIEWER_PERF", [None])[-1]
    if js is not None or viewer is not None:
        lines.extend(_browser_section(js, viewer))
    for result in transport.values():
        lines.extend(_fixture_section(result))
    for entry in results.get("FOLLOW_LOAD", []):
        lines += [
            "## Follow under load",
            "",
            f"{entry['machine']['seconds']} s per cell; latency is from sending an append to reading its frame.",
            "",
            "| followers | sessions | target ev/s | achieved ev/s | deliveries/s | p50 ms | p99 ms | max ms "
            "| lost | dup | undelivered |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c in entry["cells"]:
            lines.append(
                f"| {c['followers']} | {c['sessions']} | {c['targetEventsPerSec']:,} | {c['achievedEventsPerSec']:,} | "
                f"{c['deliveriesPerSec']:,} | {c['p50Ms']} | {c['p99Ms']} | {c['maxMs']} | {c['lost']} | "
                f"{c['duplicated']} | {c['undeliveredAtTimeout']} |"
            )
        lines.append("")
    for entry in results.get("FOLLOW_SCALE", []):
        lines.extend(_follow_scale_section(entry))
    for name, title in (("WHITESPACE_PREFIX_PERF", "exact decode"), ("JOINED_TEXT_PERF", "joined-text view")):
        for entry in results.get(name, []):
            lines += [
                f"## Whitespace-prefix rows: {title}",
                "",
                "| members | median ms | samples ms |",
                "|---:|---:|---|",
            ]
            lines += [f"| {e['members']:,} | {e['medianMs']} | {', '.join(map(str, e['samplesMs']))} |" for e in entry]
            lines.append("")
    return "\n".join(lines)


def render_svg(results: dict[str, list[Any]]) -> str:
    """Two bar panels for ``realistic``: bytes per coding and times per stage, raw/projection/packed."""
    transport = {r["fixture"]["name"]: r for r in results.get("TRANSPORT_PERF", [])}
    result = transport.get("realistic") or next(iter(transport.values()))
    b, host, transfer, client = result["bytes"], result["host"], result["transport"], result["client"]
    colors = {"raw": "#c0392b", "projection": "#7f8c8d", "packed": "#2471a3"}
    panels = [
        (
            "bytes (MB)",
            [
                (coding, {kind: b.get(f"{kind}{coding}", 0) / 1e6 for kind in ("raw", "projection", "packed")})
                for coding in ("Json", "Gzip", "Brotli", "Zstd")
            ],
        ),
        (
            "time (ms)",
            [
                ("host response", {"raw": host["rawResponseMs"], "packed": host["packedResponseMs"]}),
                ("transfer", {"raw": transfer["rawTotalMs"], "packed": transfer["packedTotalMs"]}),
                ("validated page", {"raw": client["rawValidationMs"], "packed": client["packedValidationMs"]}),
                ("client history", {"raw": client["rawHistoryMs"], "packed": client["packedHistoryMs"]}),
            ],
        ),
    ]
    width, bar, gap, left = 760, 14, 10, 130
    y = 40
    parts = [
        f'<text x="10" y="22" font-size="15" font-weight="bold">{result["fixture"]["name"]}: '
        "raw, projection and packed, side by side</text>"
    ]
    for title, groups in panels:
        top = max(v for _, values in groups for v in values.values()) or 1
        parts.append(f'<text x="10" y="{y + 12}" font-size="13" font-weight="bold">{title}</text>')
        y += 22
        for label, values in groups:
            parts.append(f'<text x="10" y="{y + 11}" font-size="12">{label}</text>')
            for kind, value in values.items():
                length = max(1.0, (width - left - 120) * value / top)
                parts.append(f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar}" fill="{colors[kind]}"/>')
                parts.append(
                    f'<text x="{left + length + 6:.1f}" y="{y + 11}" font-size="11">{kind} {value:,.2f}</text>'
                )
                y += bar + 2
            y += gap
        y += 10
    body = "\n".join(parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" font-family="sans-serif">\n'
        f'<rect width="100%" height="100%" fill="white"/>\n{body}\n</svg>\n'
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a file of HISTORY_*_RESULT lines (e.g. bench/results/<run>.txt)")
    parser.add_argument("--docs", type=Path, default=Path("docs"), help="where to write the report (default: docs)")
    parser.add_argument("--command", default="make bench", help="the command that produced the results")
    parser.add_argument(
        "--hot-path",
        type=Path,
        nargs="+",
        default=[],
        help="runs of bench/test_hot_path.py alone, whose HOT_PATH lines replace those of RESULTS, a run each",
    )
    parser.add_argument(
        "--hot-path-before",
        type=Path,
        nargs="+",
        default=[],
        help="runs before the change: of bench/test_hot_path.py, for its profile, and of bench.asgi_cost",
    )
    parser.add_argument("--hot-path-note", default="", help="what the profiles say is left, and where (markdown)")
    parser.add_argument(
        "--live-wire", type=Path, help="a run of bench/test_live_wire.py alone, whose LIVE_WIRE line replaces RESULTS'"
    )
    parser.add_argument(
        "--search", type=Path, help="a run of bench/test_search.py alone, whose SEARCH line replaces RESULTS'"
    )
    args = parser.parse_args(argv)
    results = read_results(args.results)
    runs = [read_results(path) for path in args.hot_path]
    befores = [read_results(path) for path in args.hot_path_before]
    for path, run in zip([*args.hot_path, *args.hot_path_before], [*runs, *befores], strict=True):
        if not run.get("HOT_PATH") and not run.get("ASGI_COST"):
            print(
                f"bench.report: {path} has no HISTORY_HOT_PATH_RESULT or HISTORY_ASGI_COST_RESULT line", file=sys.stderr
            )
            return 1
    if runs:
        results["HOT_PATH"] = [run["HOT_PATH"][-1] for run in runs if run.get("HOT_PATH")]
        results["ASGI_COST"] = [entry for run in runs for entry in run.get("ASGI_COST", [])] or results.get(
            "ASGI_COST", []
        )
    for path, name in ((args.live_wire, "LIVE_WIRE"), (args.search, "SEARCH")):
        if path is None:
            continue
        found = read_results(path).get(name)
        if not found:
            print(f"bench.report: {path} has no HISTORY_{name}_RESULT line", file=sys.stderr)
            return 1
        results[name] = found
    results["HOT_PATH_BEFORE"] = [entry for run in befores for entry in run.get("HOT_PATH", [])]
    results["ASGI_COST_BEFORE"] = [entry for run in befores for entry in run.get("ASGI_COST", [])]
    if not results.get("TRANSPORT_PERF"):
        print(f"bench.report: {args.results} has no HISTORY_TRANSPORT_PERF_RESULT line", file=sys.stderr)
        return 1
    args.docs.mkdir(parents=True, exist_ok=True)
    hot_path = [str(path) for path in [*args.hot_path, *(run for run in (args.live_wire, args.search) if run)]]
    markdown = render_markdown(
        results, command=args.command, source=str(args.results), hot_path=hot_path, hot_path_note=args.hot_path_note
    )
    (args.docs / "benchmarks.md").write_text(markdown)
    (args.docs / "benchmarks.svg").write_text(render_svg(results))
    print(f"bench.report: wrote {args.docs / 'benchmarks.md'} and {args.docs / 'benchmarks.svg'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The history-transport inventory (the seed's §6): raw, projection and packed, side by side.

For each fixture this prints one line, ``HISTORY_TRANSPORT_PERF_RESULT {json}``, with the
seed's sections (``fixture``, ``bytes``, ``memory``, ``host``, ``transport``, ``client``,
``combined``) plus ``store`` and ``machine``. The page is the fixture's tail page: the
whole session for ``dsh-synthetic`` and ``realistic`` (50 messages), and the last
repetition for ``long-session`` (35 messages), which is the same content as
``realistic``'s page, so the two isolate the cost of session length.

* ``host``: from events in memory: select the cut, wrap or pack, encode, compress.
* ``store``: a cold tail page (a new store instance, timed in a fresh host process by
  `bench.cold_page`, so this process's fixture cannot tax it) from SQLite, JSONL, JSONL+zstd and,
  when ``HISTORY_TEST_PG_URL`` is set, PostgreSQL; raw is ``read_events`` then encode (what
  ``?expand=raw`` costs). ``sqlite-raw-events`` is the host without packing: one SQLite row
  per logical event, its stored JSON spliced into the raw page without decoding.
* ``transport``: the bodies through a real uvicorn server on 127.0.0.1, chunked (no
  content-length): headers, body and total, median of 5 after a warm-up.
* ``client``: ``parse`` is an untyped JSON decode (``JSON.parse``); ``validation`` is the
  SDK's typed decode with every check (it parses too, so ``history`` does not add
  ``parse``); ``prepare`` is the exact expansion; ``fold`` is `bench.fold`. Raw history
  is validation + prepare + fold. Packed history is validation + the row fold (the seed's
  v2, no per-delta objects); ``packedExactHistoryMs`` is validation + exact expansion +
  the event fold (its v1). All three fold states must be identical.
* ``memory``: ``tracemalloc`` peaks over the stages, the median of 3 runs; the client's
  packed stages are the row fold's, with the exact expansion's reported beside them.
* ``combined``: ``syntheticApiWaitMs = response + transfer + validation`` and
  ``syntheticReadyMs = response + transfer + history``.

``HISTORY_BENCH_SMOKE=1`` scales every fixture down 100× and runs each stage once.
Asserts structure only: cardinalities, decoded counts, identical content and fold state.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import socket
import statistics
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import brotli
import httpx
import msgspec
import pytest
import uvicorn
import zstandard

from bench.cold_page import fill_raw_events, in_host
from bench.fixtures import (
    REALISTIC_LOGICAL_EVENTS,
    REALISTIC_ORDINARY_EVENTS,
    REALISTIC_PACKED_RECORDS,
    REALISTIC_PROJECTION_RECORDS,
    completed_step_projection,
    dsh_synthetic,
    is_delta,
    long_session,
    realistic,
    tail_cut,
)
from bench.fold import digest, fold_events, fold_records
from bench.machine import emit, machine
from bench.stores import BACKENDS, reset, url_for
from codec import Event, Page, PageRecord, SessionHeader, encode, pack
from codec.pages import page_record
from history_client import read_page
from persistence import open_store

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
SCALE = 100 if SMOKE else 1
ROUNDS = 1 if SMOKE else 5
HEAP_RUNS = 1 if SMOKE else 3
BATCH = 512

FIXTURES: dict[str, tuple[Callable[[], list[Event]], int]] = {
    "dsh-synthetic": (lambda: dsh_synthetic(scale=SCALE), 50),
    "realistic": (lambda: realistic(scale=SCALE), 50),
    "long-session": (lambda: long_session(scale=SCALE), 35),
}


def progress(name: str, stage: str) -> None:
    print(f"[transport {name}] {stage}", file=sys.stderr, flush=True)


def r2(value: float) -> float:
    return round(value, 2)


def reduction(raw: float, packed: float) -> float:
    return r2((1 - packed / raw) * 100) if raw else 0.0


def timed(fn: Callable[[], Any], rounds: int = ROUNDS) -> tuple[float, list[float], Any]:
    """Median ms of ``rounds`` calls after a warm-up, all samples, and the last result."""
    value = fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        value = fn()
        samples.append(r2((time.perf_counter() - start) * 1000))
    return r2(statistics.median(samples)), samples, value


def heap_peaks(stages: list[Callable[[Any], Any]]) -> list[int]:
    """Peak traced bytes above the start while the stages run in turn, each fed the last's result."""
    peaks = []
    for _ in range(HEAP_RUNS):
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        value: Any = None
        for stage in stages:
            value = stage(value)
        peaks.append(tracemalloc.get_traced_memory()[1] - base)
        tracemalloc.stop()
        del value
    return peaks


def wrap(page: list[Event]) -> list[PageRecord]:
    return [PageRecord(event=event) for event in page]


def expand(validated: Any) -> list[Event]:
    return list(validated.events())


def _read_page(body: bytes, _: Any) -> Any:
    return read_page(body)


def _fold_rows(validated: Any) -> Any:
    return fold_records(list(validated.records))


def page_json(records: list[PageRecord], from_seq: int, to_seq: int) -> bytes:
    return encode(Page(records, from_seq > 0, from_seq, to_seq))


# --- the sections -----------------------------------------------------------------------


def fixture_section(name: str, events: list[Event], page: list[Event], build_ms: float) -> dict[str, Any]:
    packed = pack(page)
    rows = [record for record in packed if type(record) is not Event]
    return {
        "name": name,
        "scale": SCALE,
        "buildMs": build_ms,
        "sessionEvents": len(events),
        "logicalEvents": len(page),
        "ordinaryEvents": sum(not is_delta(event) for event in page),
        "deltaEvents": sum(map(is_delta, page)),
        "deltaRuns": len(rows),
        "packedRecords": len(packed),
        "fromSeq": page[0].seq if page else 0,
    }


def compressed_sizes(body: bytes) -> dict[str, int]:
    return {
        "Gzip": len(gzip.compress(body, 6)),
        "Brotli": len(brotli.compress(body, quality=5)),
        "Zstd": len(zstandard.ZstdCompressor(level=3).compress(body)),
    }


def bytes_section(bodies: dict[str, bytes]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, body in bodies.items():
        out[f"{kind}Json"] = len(body)
        for coding, size in compressed_sizes(body).items():
            out[f"{kind}{coding}"] = size
    for suffix in ("Json", "Gzip", "Brotli", "Zstd"):
        key = suffix[0].lower() + suffix[1:]
        out[f"{key}ReductionPct"] = reduction(out[f"raw{suffix}"], out[f"packed{suffix}"])
        out[f"{key}VsProjectionReductionPct"] = reduction(out[f"projection{suffix}"], out[f"packed{suffix}"])
        out[f"{key}PackedOfRawPct"] = r2(100 * out[f"packed{suffix}"] / out[f"raw{suffix}"])
    return out


def host_section(events: list[Event], page: list[Event], max_messages: int, bodies: dict[str, bytes]) -> dict[str, Any]:
    from_seq, to_seq = page[0].seq, page[-1].seq + 1
    select_ms, select_samples, cut = timed(lambda: tail_cut(events, max_messages))
    assert cut == from_seq
    wrap_ms, _, raw_records = timed(lambda: [PageRecord(event=event) for event in page])
    pack_ms, _, packed = timed(lambda: pack(page))
    record_wrap_ms, _, packed_records = timed(lambda: [page_record(record) for record in packed])
    raw_encode_ms, _, raw_body = timed(lambda: page_json(raw_records, from_seq, to_seq))
    packed_encode_ms, _, packed_body = timed(lambda: page_json(packed_records, from_seq, to_seq))
    assert (raw_body, packed_body) == (bodies["raw"], bodies["packed"])
    out: dict[str, Any] = {
        "selectMs": select_ms,
        "rawEntryWrapMs": wrap_ms,
        "packMs": pack_ms,
        "packedRecordWrapMs": record_wrap_ms,
        "rawStringifyMs": raw_encode_ms,
        "packedStringifyMs": packed_encode_ms,
    }
    compressors: dict[str, Callable[[bytes], bytes]] = {
        "Gzip": lambda body: gzip.compress(body, 6),
        "Brotli": lambda body: brotli.compress(body, quality=5),
        "Zstd": lambda body: zstandard.ZstdCompressor(level=3).compress(body),
    }
    for coding, compress in compressors.items():
        for kind in ("raw", "packed"):
            out[f"{kind}{coding}Ms"] = timed(partial(compress, bodies[kind]), rounds=min(ROUNDS, 3))[0]
    out["rawResponseMs"] = r2(wrap_ms + raw_encode_ms)
    out["packedResponseMs"] = r2(pack_ms + record_wrap_ms + packed_encode_ms)
    out["responseReductionPct"] = reduction(out["rawResponseMs"], out["packedResponseMs"])
    out["selectSamplesMs"] = select_samples
    return out


def client_section(bodies: dict[str, bytes], page: list[Event]) -> tuple[dict[str, Any], str]:
    out: dict[str, Any] = {}
    digests = {}
    for kind in ("raw", "packed"):
        body = bodies[kind]
        out[f"{kind}ParseMs"] = timed(partial(msgspec.json.decode, body), rounds=min(ROUNDS, 3))[0]
        validation_ms, _, validated = timed(partial(read_page, body))
        prepare_ms, _, prepared = timed(partial(expand, validated))
        assert len(prepared) == len(page) and prepared == page
        fold_ms, _, state = timed(partial(fold_events, prepared))
        digests[kind] = digest(state)
        out[f"{kind}ValidationMs"] = validation_ms
        out[f"{kind}PrepareMs"] = prepare_ms
        out[f"{kind}FoldMs"] = fold_ms
        out[f"{kind}DecodedEvents"] = len(prepared)
        if kind == "raw":
            out["rawHistoryMs"] = r2(validation_ms + prepare_ms + fold_ms)
        else:
            # Exact expansion then the event fold (the seed's v1), and the row fold (its v2).
            out["packedExactHistoryMs"] = r2(validation_ms + prepare_ms + fold_ms)
            compact_ms, _, compact = timed(partial(fold_records, list(validated.records)))
            digests["packedCompact"] = digest(compact)
            out["packedCompactFoldMs"] = compact_ms
            out["packedHistoryMs"] = r2(validation_ms + compact_ms)
    assert digests["raw"] == digests["packed"] == digests["packedCompact"], digests
    out["historyReductionPct"] = reduction(out["rawHistoryMs"], out["packedHistoryMs"])
    out["exactHistoryReductionPct"] = reduction(out["rawHistoryMs"], out["packedExactHistoryMs"])
    out["validatedPageSpeedup"] = r2(out["rawValidationMs"] / out["packedValidationMs"])
    out["foldDigest"] = digests["raw"]
    return out, digests["raw"]


def memory_section(page: list[Event], bodies: dict[str, bytes]) -> dict[str, Any]:
    from_seq, to_seq = page[0].seq, page[-1].seq + 1
    host = {
        "raw": heap_peaks(
            [
                lambda _: wrap(page),
                lambda records: page_json(records, from_seq, to_seq),
            ]
        ),
        "packed": heap_peaks(
            [
                lambda _: pack(page),
                lambda packed: [page_record(record) for record in packed],
                lambda records: page_json(records, from_seq, to_seq),
            ]
        ),
    }
    client = {
        "raw": heap_peaks([partial(_read_page, bodies["raw"]), expand, fold_events]),
        "packed": heap_peaks([partial(_read_page, bodies["packed"]), _fold_rows]),
        "packedExact": heap_peaks([partial(_read_page, bodies["packed"]), expand, fold_events]),
    }
    out: dict[str, Any] = {"samples": HEAP_RUNS}
    for side, peaks in (("Host", host), ("Client", client)):
        for kind in ("raw", "packed"):
            out[f"{kind}{side}AdditionalHeapPeakBytes"] = int(statistics.median(peaks[kind]))
            out[f"{kind}{side}PeakSamples"] = peaks[kind]
        raw, packed = out[f"raw{side}AdditionalHeapPeakBytes"], out[f"packed{side}AdditionalHeapPeakBytes"]
        out[f"{side.lower()}ReductionPct"] = reduction(raw, packed)
        out[f"{side.lower()}RawOverPacked"] = r2(raw / packed)
    exact = int(statistics.median(client["packedExact"]))
    out["packedExactClientAdditionalHeapPeakBytes"] = exact
    out["packedExactClientPeakSamples"] = client["packedExact"]
    out["clientRawOverPackedExact"] = r2(out["rawClientAdditionalHeapPeakBytes"] / exact)
    return out


def store_section(
    name: str, events: list[Event], page: list[Event], max_messages: int, bodies: dict[str, bytes], root: Path
) -> dict[str, Any]:
    from_seq, to_seq = page[0].seq, page[-1].seq + 1
    out: dict[str, Any] = {}

    async def fill(url: str) -> None:
        await reset(url)
        store = await open_store(url, create=True)
        await store.create_session(SessionHeader(id="s", createdAt=0))
        for start in range(0, len(events), BATCH):
            await store.append("s", events[start : start + BATCH])
        await store.close()

    for backend in BACKENDS:
        url = url_for(backend, root / name / backend)
        (root / name / backend).mkdir(parents=True, exist_ok=True)
        progress(name, f"store {backend}: writing {len(events):,} events")
        anyio.run(fill, url)
        section: dict[str, Any] = {}
        for kind in ("raw", "packed"):
            progress(name, f"store {backend}: cold {kind} tail pages")
            samples = in_host(url, kind, str(max_messages), bodies[kind], ROUNDS)
            section[f"{kind}ColdMs"] = r2(statistics.median(samples))
            section[f"{kind}ColdSamplesMs"] = samples
        section["speedup"] = r2(section["rawColdMs"] / section["packedColdMs"])
        out[backend] = section
    progress(name, "store sqlite-raw-events: a table of one raw event per row")
    raw_db = root / name / "raw-events.db"
    fill_raw_events(raw_db, events)
    samples = in_host(str(raw_db), "raw-events", f"{from_seq}:{to_seq}", bodies["raw"], ROUNDS)
    out["sqlite-raw-events"] = {"rawColdMs": r2(statistics.median(samples)), "rawColdSamplesMs": samples}
    out["sqlite"]["vsRawEventsStore"] = r2(out["sqlite-raw-events"]["rawColdMs"] / out["sqlite"]["packedColdMs"])
    SQLITE_PAGES[name] = (url_for("sqlite", root / name / "sqlite"), max_messages, bodies["packed"])
    if name == "long-session" and "realistic" in SQLITE_PAGES:
        progress(name, "store sqlite: cold packed pages, alternating with realistic's")
        out["versusRealistic"] = _side_by_side(SQLITE_PAGES["realistic"], SQLITE_PAGES[name])
    return out


# The SQLite store of each fixture already measured, so long-session can be timed beside realistic.
SQLITE_PAGES: dict[str, tuple[str, int, bytes]] = {}
SIDE_BY_SIDE_PAIRS = 3 if SMOKE else 9


def _side_by_side(base: tuple[str, int, bytes], other: tuple[str, int, bytes]) -> dict[str, Any]:
    """Cold packed pages from two stores in alternating fresh host processes, so drift hits both alike."""
    base_samples: list[float] = []
    other_samples: list[float] = []
    for _ in range(SIDE_BY_SIDE_PAIRS):
        for (url, max_messages, body), samples in ((base, base_samples), (other, other_samples)):
            samples.extend(in_host(url, "packed", str(max_messages), body, 3))
    base_ms, other_ms = statistics.median(base_samples), statistics.median(other_samples)
    return {
        "realisticPackedColdMs": r2(base_ms),
        "packedColdMs": r2(other_ms),
        "ratio": r2(other_ms / base_ms),
        "realisticSamplesMs": base_samples,
        "samplesMs": other_samples,
    }


class _Bodies:
    """A raw ASGI app that sends a fixed body in 64 KiB chunks with no content-length."""

    def __init__(self, bodies: dict[str, bytes]) -> None:
        self.bodies = bodies

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = self.bodies[scope["path"].strip("/")]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        for start in range(0, len(body), 65536):
            await send({"type": "http.response.body", "body": body[start : start + 65536], "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def transport_section(bodies: dict[str, bytes]) -> dict[str, Any]:
    server = uvicorn.Server(uvicorn.Config(_Bodies(bodies), log_level="warning", lifespan="off"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(sockets=[sock]),), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    out: dict[str, Any] = {"samples": ROUNDS}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=300) as client:
            for kind in ("raw", "packed"):

                def fetch(kind: str = kind) -> dict[str, float]:
                    start = time.perf_counter()
                    with client.stream("GET", f"/{kind}") as response:
                        headers = time.perf_counter()
                        assert response.headers.get("transfer-encoding") == "chunked"
                        body = response.read()
                    end = time.perf_counter()
                    assert body == bodies[kind]
                    return {
                        "headersMs": r2((headers - start) * 1000),
                        "bodyMs": r2((end - headers) * 1000),
                        "totalMs": r2((end - start) * 1000),
                    }

                fetch()
                samples = [fetch() for _ in range(ROUNDS)]
                for part in ("headersMs", "bodyMs", "totalMs"):
                    out[f"{kind}{part[0].upper()}{part[1:]}"] = r2(statistics.median(s[part] for s in samples))
                out[f"{kind}Samples"] = samples
    finally:
        server.should_exit = True
        thread.join(30)
        loop.close()
        sock.close()
    out["totalReductionPct"] = reduction(out["rawTotalMs"], out["packedTotalMs"])
    return out


def combined_section(host: dict[str, Any], transport: dict[str, Any], client: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for kind in ("raw", "packed"):
        base = host[f"{kind}ResponseMs"] + transport[f"{kind}TotalMs"]
        out[f"{kind}SyntheticApiWaitMs"] = r2(base + client[f"{kind}ValidationMs"])
        out[f"{kind}SyntheticReadyMs"] = r2(base + client[f"{kind}HistoryMs"])
    out["syntheticApiWaitReductionPct"] = reduction(out["rawSyntheticApiWaitMs"], out["packedSyntheticApiWaitMs"])
    out["syntheticReadyReductionPct"] = reduction(out["rawSyntheticReadyMs"], out["packedSyntheticReadyMs"])
    return out


# --- the suite --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, dict[str, Any]]]:
    collected: dict[str, dict[str, Any]] = {}
    yield collected
    for name in FIXTURES:
        if name in collected:
            emit("TRANSPORT_PERF", collected[name])


@pytest.mark.parametrize("name", list(FIXTURES))
def test_history_transport(
    name: str, benchmark: Any, results: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    build, max_messages = FIXTURES[name]
    progress(name, "building the fixture")
    start = time.perf_counter()
    events = build()
    build_ms = r2((time.perf_counter() - start) * 1000)
    page = events[tail_cut(events, max_messages) :]
    from_seq, to_seq = page[0].seq, page[-1].seq + 1
    packed_records = [page_record(record) for record in pack(page)]
    projection = completed_step_projection(page)
    bodies = {
        "raw": page_json([PageRecord(event=event) for event in page], from_seq, to_seq),
        "projection": page_json([PageRecord(event=event) for event in projection], from_seq, to_seq),
        "packed": page_json(packed_records, from_seq, to_seq),
    }
    result: dict[str, Any] = {"fixture": fixture_section(name, events, page, build_ms)}
    result["fixture"]["projectionRecords"] = len(projection)
    check_cardinalities(name, result["fixture"], len(events))
    progress(name, "bytes")
    result["bytes"] = bytes_section(bodies)
    # dsh-synthetic never ends its step, so its projection drops nothing.
    assert result["bytes"]["packedJson"] < result["bytes"]["projectionJson"] <= result["bytes"]["rawJson"]
    progress(name, "host from memory")
    result["host"] = host_section(events, page, max_messages, bodies)
    del bodies["projection"]
    progress(name, "client")
    result["client"], _ = client_section(bodies, page)
    result["fixture"]["decodedEvents"] = result["client"]["packedDecodedEvents"]
    progress(name, "heap")
    result["memory"] = memory_section(page, bodies)
    progress(name, "loopback transfer")
    result["transport"] = transport_section(bodies)
    result["combined"] = combined_section(result["host"], result["transport"], result["client"])
    result["store"] = store_section(name, events, page, max_messages, bodies, tmp_path_factory.mktemp("stores"))
    result["machine"] = machine(smoke=SMOKE)
    progress(name, "packed decode and validate (pytest-benchmark)")
    benchmark.pedantic(read_page, args=(bodies["packed"],), rounds=ROUNDS, warmup_rounds=1)
    results[name] = result


def check_cardinalities(name: str, fixture: dict[str, Any], session_events: int) -> None:
    """The seed's counts at full scale; at smoke scale, the same structure."""
    assert fixture["packedRecords"] == fixture["ordinaryEvents"] + fixture["deltaRuns"]
    assert fixture["logicalEvents"] == fixture["ordinaryEvents"] + fixture["deltaEvents"]
    if name == "long-session":
        assert (
            session_events == 10 * fixture["logicalEvents"] + 10
            and fixture["fromSeq"] == session_events - fixture["logicalEvents"]
        )
    else:
        assert fixture["fromSeq"] == 0 and fixture["logicalEvents"] == session_events
    if SMOKE:
        assert fixture["deltaRuns"] == 116
        return
    if name == "long-session":
        # The last repetition less its turn/start, which the 35-message cut leaves to the page before.
        expected = (REALISTIC_LOGICAL_EVENTS - 1, REALISTIC_ORDINARY_EVENTS - 1, 116, REALISTIC_PACKED_RECORDS - 1)
    else:
        expected = (REALISTIC_LOGICAL_EVENTS, REALISTIC_ORDINARY_EVENTS, 116, REALISTIC_PACKED_RECORDS)
    got = (fixture["logicalEvents"], fixture["ordinaryEvents"], fixture["deltaRuns"], fixture["packedRecords"])
    assert got == expected, got
    if name == "realistic":
        assert fixture["projectionRecords"] == REALISTIC_PROJECTION_RECORDS

"""Codec benchmarks on the dsh-synthetic fixture. Run with ``make bench``.

Prints ``HISTORY_CODEC_PERF_RESULT {json}`` and ``HISTORY_WHITESPACE_PREFIX_PERF_RESULT [...]``.
Asserts structure only: counts, and that every decoded form equals the original events.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench.fixtures import DSH_DELTA_RUNS, DSH_LOGICAL_EVENTS, DSH_PACKED_RECORDS, TIME_ZERO, dsh_synthetic
from bench.machine import emit, machine
from codec import (
    Event,
    Page,
    PageRecord,
    ReasoningChunks,
    TextRowData,
    decode_page,
    decode_storage_line,
    encode,
    expand_row,
    iter_page_events,
    pack,
    pack_page,
)

ROUNDS = 7


@pytest.fixture(scope="module")
def events() -> list[Event]:
    return dsh_synthetic()


@pytest.fixture(scope="module")
def packed_body(events: list[Event]) -> bytes:
    return encode(Page(pack_page(events), False, 0, len(events)))


@pytest.fixture(scope="module")
def raw_body(events: list[Event]) -> bytes:
    return encode(Page([PageRecord(event=e) for e in events], False, 0, len(events)))


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, Any]]:
    collected: dict[str, Any] = {}
    yield collected
    collected["machine"] = machine()
    emit("CODEC_PERF", collected)


def _record(results: dict[str, Any], name: str, benchmark: Any) -> None:
    stats = benchmark.stats.stats
    results[name] = {"medianMs": round(stats.median * 1000, 2), "rounds": stats.rounds}


def test_pack(benchmark, events, results):
    records = benchmark.pedantic(pack, args=(events,), rounds=ROUNDS, warmup_rounds=1)
    assert len(records) == DSH_PACKED_RECORDS
    assert sum(type(r) is ReasoningChunks for r in records) == DSH_DELTA_RUNS
    _record(results, "packMs", benchmark)


def test_encode_packed_page(benchmark, events, packed_body, results):
    page = Page(pack_page(events), False, 0, len(events))
    body = benchmark.pedantic(encode, args=(page,), rounds=ROUNDS, warmup_rounds=1)
    assert body == packed_body
    _record(results, "encodePackedMs", benchmark)
    results["packedJsonBytes"] = len(body)


def test_encode_raw_page(benchmark, events, raw_body, results):
    page = Page([PageRecord(event=e) for e in events], False, 0, len(events))
    body = benchmark.pedantic(encode, args=(page,), rounds=ROUNDS, warmup_rounds=1)
    assert body == raw_body
    _record(results, "encodeRawMs", benchmark)
    results["rawJsonBytes"] = len(body)


def test_decode_and_validate_packed_page(benchmark, packed_body, results):
    page = benchmark.pedantic(decode_page, args=(packed_body,), rounds=ROUNDS, warmup_rounds=1)
    assert len(page.records) == DSH_PACKED_RECORDS
    _record(results, "decodeValidatePackedMs", benchmark)


def test_expand_packed_page(benchmark, events, packed_body, results):
    records = decode_page(packed_body).records
    expanded = benchmark.pedantic(lambda: list(iter_page_events(records)), rounds=ROUNDS, warmup_rounds=1)
    assert len(expanded) == DSH_LOGICAL_EVENTS
    assert expanded == events
    _record(results, "expandMs", benchmark)


def test_decode_raw_page_into_the_same_structs(benchmark, events, raw_body, results):
    page = benchmark.pedantic(decode_page, args=(raw_body,), rounds=ROUNDS, warmup_rounds=1)
    assert [record.event for record in page.records] == events
    _record(results, "decodeRawMs", benchmark)


def _whitespace_row(members: int) -> bytes:
    texts = [" "] * (members - 1) + ["x"]
    return encode(ReasoningChunks(0, TIME_ZERO, TextRowData(1, 1, 0, [1] * (members - 1), texts)))


def _exact_decode(line: bytes) -> list[Event]:
    return expand_row(decode_storage_line(line))  # type: ignore[arg-type]


def test_whitespace_prefix_inventory():
    _exact_decode(_whitespace_row(1))
    inventory = []
    for members in (10_000, 20_000, 40_000):
        line = _whitespace_row(members)
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            decoded = _exact_decode(line)
            samples.append((time.perf_counter() - start) * 1000)
            last = decoded[-1]
            assert len(decoded) == members
            assert (last.seq, last.time, last.data.chunk.text) == (members - 1, TIME_ZERO + members - 1, "x")
        inventory.append(
            {
                "members": members,
                "medianMs": round(statistics.median(samples), 3),
                "samplesMs": [round(s, 3) for s in samples],
            }
        )
    emit("WHITESPACE_PREFIX_PERF", inventory)
    assert [entry["members"] for entry in inventory] == [10_000, 20_000, 40_000]

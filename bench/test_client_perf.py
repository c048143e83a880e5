"""Client SDK benchmarks: the dsh-synthetic tail page from a local service process. Run with ``make bench``.

Prints ``HISTORY_CLIENT_PERF_RESULT {json}``:

* time to a validated page (decode + validate + cover check, no expansion), packed vs raw,
  both from bodies already fetched and end to end through `HistoryClient.page`;
* full exact expansion of the packed page into 416,756 events;
* heap peaks (`tracemalloc`): `iter_history` streaming the whole session, against
  decoding the raw page into events.

Asserts structure only (event counts and identical events), never time.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bench.fixtures import DSH_LOGICAL_EVENTS, dsh_synthetic
from bench.machine import emit, machine
from codec import Event, SessionHeader
from history_client import HistoryClient, read_page
from persistence import open_store
from testing.servers import ServerProcess

ROUNDS = 7
EVERYTHING = {"maxBytes": 1_000_000_000}  # one page holds the whole session, packed or raw


@pytest.fixture(scope="module")
def events() -> list[Event]:
    return dsh_synthetic()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, events: list[Event]) -> Iterator[str]:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('client')) / 'h.db'}"

    async def prepare() -> None:
        store = await open_store(url, create=True)
        await store.create_session(SessionHeader(id="dsh", createdAt=0))
        for start in range(0, len(events), 512):
            await store.append("dsh", events[start : start + 512])
        await store.close()

    anyio.run(prepare)
    process = ServerProcess(url)
    process.start()
    yield process.url
    process.stop()


@pytest.fixture(scope="module")
def bodies(server: str) -> dict[str, bytes]:
    with httpx.Client(base_url=server, timeout=300) as http:
        packed = http.get("/v1/sessions/dsh/page", params=EVERYTHING).content
        raw = http.get("/v1/sessions/dsh/page", params={**EVERYTHING, "expand": "raw"}).content
    return {"packed": packed, "raw": raw}


@pytest.fixture(scope="module")
def results() -> Iterator[dict[str, Any]]:
    collected: dict[str, Any] = {}
    yield collected
    collected["machine"] = machine()
    emit("CLIENT_PERF", collected)


def ms(samples: list[float]) -> dict[str, Any]:
    return {"medianMs": round(statistics.median(samples), 2), "samplesMs": [round(s, 2) for s in samples]}


def timed(fn: Callable[[], Any], rounds: int = ROUNDS) -> tuple[list[float], Any]:
    fn()
    samples, value = [], None
    for _ in range(rounds):
        value = None
        gc.collect()
        start = time.perf_counter()
        value = fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples, value


def heap_peak(fn: Callable[[], Any]) -> int:
    """Peak traced bytes above the starting point while ``fn`` runs; its result is dropped inside."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def test_time_to_a_validated_page(bodies: dict[str, bytes], server: str, results: dict[str, Any]) -> None:
    section: dict[str, Any] = {"bodyBytes": {name: len(body) for name, body in bodies.items()}}
    for name, body in bodies.items():
        samples, page = timed(lambda body=body: read_page(body))  # type: ignore[misc]
        assert (page.from_seq, page.to_seq) == (0, DSH_LOGICAL_EVENTS)
        section[f"{name}DecodeValidate"] = ms(samples)
    with HistoryClient(server, timeout=300) as client:
        for name, extra in (("packed", {}), ("raw", {"expand": "raw"})):
            params = {**EVERYTHING, **extra}

            def fetch_and_validate(params: dict[str, Any] = params) -> Any:
                response = client._http.get("/v1/sessions/dsh/page", params=params)
                return read_page(response.content)

            samples, page = timed(fetch_and_validate, rounds=5)
            assert len(page) == DSH_LOGICAL_EVENTS
            section[f"{name}EndToEnd"] = ms(samples)
    section["decodeValidateSpeedup"] = round(
        section["rawDecodeValidate"]["medianMs"] / section["packedDecodeValidate"]["medianMs"], 2
    )
    section["endToEndSpeedup"] = round(section["rawEndToEnd"]["medianMs"] / section["packedEndToEnd"]["medianMs"], 2)
    results["validatedPage"] = section


def test_full_exact_expansion(bodies: dict[str, bytes], events: list[Event], results: dict[str, Any]) -> None:
    page = read_page(bodies["packed"])
    samples, expanded = timed(lambda: list(page.events()))
    assert len(expanded) == DSH_LOGICAL_EVENTS and expanded == events
    results["expand"] = {**ms(samples), "events": len(expanded)}


def test_streaming_heap_peak(server: str, bodies: dict[str, bytes], results: dict[str, Any]) -> None:
    raw_body = bodies["raw"]
    with HistoryClient(server, timeout=300, max_bytes=EVERYTHING["maxBytes"]) as client:

        def stream() -> None:
            count = 0
            for _ in client.iter_history("dsh"):
                count += 1
            assert count == DSH_LOGICAL_EVENTS

        streaming = [heap_peak(stream) for _ in range(3)]
    raw_decoded = [heap_peak(lambda: list(read_page(raw_body).events())) for _ in range(3)]
    results["heap"] = {
        "iterHistoryPeakBytes": streaming,
        "rawPageDecodedPeakBytes": raw_decoded,
        "ratio": round(statistics.median(streaming) / statistics.median(raw_decoded), 4),
    }

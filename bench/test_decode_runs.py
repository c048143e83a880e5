"""Whitespace-prefix rows (the seed's §6.3): exact decoding and the joined-text view.

Each row is ``reasoning-chunks`` with turn 1, step 1, index 0, ``dt`` all ones, and texts
of (members - 1) spaces then ``"x"``, so the first visible token is the last member: any
scan that re-trims the accumulated text is quadratic here.

Prints ``HISTORY_WHITESPACE_PREFIX_PERF_RESULT [{members, medianMs, samplesMs}]`` for the
exact decode, and ``HISTORY_JOINED_TEXT_PERF_RESULT`` in the same shape for `joined_text`.
``HISTORY_BENCH_SMOKE=1`` shrinks the rows 100×. Asserts structure only, never time.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench.fixtures import TIME_ZERO
from bench.machine import emit
from codec import CHUNK_EVENT_TYPE, ReasoningChunks, ReasoningDelta, TextRowData, expand_row
from history_client import joined_text

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"
MEMBERS = [100, 200, 400] if SMOKE else [10_000, 20_000, 40_000]
SAMPLES = 5


def row(members: int, *, seq0: int = 0, time0: int = TIME_ZERO) -> ReasoningChunks:
    return ReasoningChunks(seq0, time0, TextRowData(1, 1, 0, [1] * (members - 1), [" "] * (members - 1) + ["x"]))


def samples(fn: Callable[[], Any]) -> list[float]:
    fn()
    out = []
    for _ in range(SAMPLES):
        start = time.perf_counter()
        fn()
        out.append(round((time.perf_counter() - start) * 1000, 3))
    return out


@pytest.fixture(scope="module")
def lines() -> Iterator[dict[str, list[dict[str, Any]]]]:
    collected: dict[str, list[dict[str, Any]]] = {"decode": [], "joined": []}
    yield collected
    emit("WHITESPACE_PREFIX_PERF", collected["decode"])
    emit("JOINED_TEXT_PERF", collected["joined"])


@pytest.mark.parametrize("members", MEMBERS)
def test_exact_decode_of_a_whitespace_prefix_row(members: int, lines: dict[str, list[dict[str, Any]]]) -> None:
    expand_row(row(1))
    data = row(members)
    events = expand_row(data)
    last = events[-1]
    assert len(events) == members
    assert (last.seq, last.time, last.type) == (members - 1, TIME_ZERO + members - 1, CHUNK_EVENT_TYPE)
    assert last.data.chunk == ReasoningDelta(0, "x")
    timings = samples(lambda: expand_row(data))
    lines["decode"].append({"members": members, "medianMs": statistics.median(timings), "samplesMs": timings})


@pytest.mark.parametrize("members", MEMBERS)
def test_joined_text_finds_the_first_visible_token_in_one_pass(members: int, lines: dict[str, Any]) -> None:
    joined_text(row(1))
    data = row(members, seq0=1, time0=TIME_ZERO + 1)
    view = joined_text(data)
    assert (view.visible_start, view.visible_seq, view.visible_time) == (members - 1, members, TIME_ZERO + members)
    assert view.text == " " * (members - 1) + "x" and view.token_start == 0
    timings = samples(lambda: joined_text(data))
    lines["joined"].append({"members": members, "medianMs": statistics.median(timings), "samplesMs": timings})

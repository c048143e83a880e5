"""Fixtures of the Durable Streams contract: every store backend that keeps streams, and a clock to move."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from itertools import count
from pathlib import Path

import pytest

import persistence.sql.streams
import persistence.streams.memory
from persistence.clock import now_ms
from persistence.streams import StreamStore
from testing.postgres import PG_URL, PG_URL_ENV
from testing.stores import open_backend

STREAM_BACKEND_NAMES = ("memory", "sqlite", "postgresql")
STREAM_BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.skipif(not PG_URL, reason=f"{PG_URL_ENV} is not set")),
]


@pytest.fixture(params=STREAM_BACKENDS)
async def streams(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StreamStore]:
    """The streams of an empty store of each backend that keeps them (PostgreSQL only with ``HISTORY_TEST_PG_URL``)."""
    store = await open_backend(request.param, tmp_path)
    try:
        assert store.streams is not None
        yield store.streams
    finally:
        await store.close()


@pytest.fixture
def names() -> Iterator[str]:
    """Fresh stream names: hypothesis examples share one store, so each takes names of its own."""
    return (f"stream-{n}" for n in count())


class Clock:
    """The streams' clock, stopped at a real time and moved only by the test."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Every stream backend's clock, for expiry that comes without sleeping."""
    stopped = Clock(now_ms())
    monkeypatch.setattr(persistence.streams.memory, "now_ms", stopped)
    monkeypatch.setattr(persistence.sql.streams, "now_ms", stopped)
    return stopped

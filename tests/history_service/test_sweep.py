"""The sweep's turn: only the process that holds it sweeps, and in it the store first recovers what a dead one left."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from codec import SessionHeader
from history_service.service import HistoryService
from history_service.settings import Settings
from persistence import MemoryStore, open_store

pytestmark = pytest.mark.anyio


class TurnStore(MemoryStore):
    """A memory store whose sweep turn is ``mine`` or not, and which writes down what the sweep asks of it."""

    def __init__(self, mine: bool) -> None:
        super().__init__()
        self.mine = mine
        self.asked: list[str] = []

    def sweeping(self) -> AbstractAsyncContextManager[bool]:
        @asynccontextmanager
        async def turn() -> AsyncIterator[bool]:
            self.asked.append("turn")
            yield self.mine
            self.asked.append("turn over")

        return turn()

    async def recover(self) -> None:
        self.asked.append("recover")

    async def expired(
        self, *, now: int, retention_ms: int | None, limit: int | None, skip: Collection[str] = ()
    ) -> list[str]:
        self.asked.append("expired")
        return await super().expired(now=now, retention_ms=retention_ms, limit=limit, skip=skip)


async def test_the_store_recovers_in_the_turn_before_anything_expired_is_looked_for() -> None:
    store = TurnStore(mine=True)
    await store.create_session(SessionHeader(id="old", createdAt=0, expiresAt=1))  # long past
    await store.create_session(SessionHeader(id="kept", createdAt=0))
    service = HistoryService(Settings(), store)
    swept = await service.sweep()
    assert swept is not None and swept.deleted == ["old"]
    assert store.asked == ["turn", "recover", "expired", "turn over"]


async def test_without_the_turn_nothing_is_recovered_or_swept() -> None:
    store = TurnStore(mine=False)
    assert await HistoryService(Settings(), store).sweep() is None
    assert store.asked == ["turn", "turn over"]


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_two_processes_on_one_file_store_sweep_one_at_a_time(tmp_path: Path, kind: str) -> None:
    """Two services on one SQLite file or JSONL root, as two workers: while one holds the turn, the other skips."""
    url = {"sqlite": f"sqlite:///{tmp_path / 'h.db'}", "jsonl": f"jsonl:///{tmp_path / 'h'}"}[kind]
    first = await open_store(url, create=True)
    second = await open_store(url)
    try:
        await first.create_session(SessionHeader(id="old", createdAt=0, expiresAt=1))
        one, other = HistoryService(Settings(), first), HistoryService(Settings(), second)
        async with one.sweeping() as mine:
            assert mine
            assert await other.sweep() is None  # it tries again at its next interval
        swept = await other.sweep()  # the turn was let go: the other takes it
        assert swept is not None and swept.deleted == ["old"]
    finally:
        await second.close()
        await first.close()

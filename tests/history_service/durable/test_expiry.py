"""The stream sweep (docs/protocol.md §13.5): expired streams deleted in the sweep turn, their readers told."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
import pytest

from history_service.durable.expiry import StreamExpiry
from persistence import MemoryStore, now_ms
from persistence.streams.model import CreateRequest

pytestmark = pytest.mark.anyio


def turn(mine: bool) -> Callable[[], AbstractAsyncContextManager[bool]]:
    @asynccontextmanager
    async def sweeping() -> AsyncIterator[bool]:
        yield mine

    return sweeping


async def test_the_expired_streams_are_deleted_and_each_is_told_once() -> None:
    streams = MemoryStore().streams
    assert streams is not None
    for name in ("old", "older"):
        await streams.create(CreateRequest(name=name, owner="a", content_type=None, expires_ms=now_ms() + 20))
    await streams.create(CreateRequest(name="kept", owner="a", content_type=None))
    await anyio.sleep(0.05)
    changed: list[str] = []
    expiry = StreamExpiry(streams, batch=1, turn=turn(True), changed=changed.append)
    assert sorted(await expiry.expire() or []) == ["old", "older"]
    assert sorted(changed) == ["old", "older"]
    assert await expiry.expire() == [] and len(changed) == 2


async def test_no_stream_is_deleted_outside_the_sweep_turn() -> None:
    streams = MemoryStore().streams
    assert streams is not None
    await streams.create(CreateRequest(name="old", owner="a", content_type=None, expires_ms=now_ms() + 20))
    await anyio.sleep(0.05)
    changed: list[str] = []
    assert await StreamExpiry(streams, batch=10, turn=turn(False), changed=changed.append).expire() is None
    assert changed == [] and await streams.expired(now_ms(), 10) == ["old"]

"""When the subscriptions' background work runs: touched subscriptions, leases and the store's reloads."""

from __future__ import annotations

import time

import anyio
import pytest

from history_service.durable.subscription import now_ms
from history_service.durable.tending import RELOAD_S, Tending

pytestmark = pytest.mark.anyio


async def test_the_first_round_reads_the_store_and_the_next_only_after_the_reload_interval() -> None:
    tending = Tending()
    assert await tending.next_round([]) is True
    tending.loaded()
    tending.touch("alice", "s1", "a")
    assert await tending.next_round([]) is False


async def test_a_touch_wakes_the_round_and_is_taken_once_with_the_first_stream_that_touched() -> None:
    tending = Tending()
    tending.loaded()
    tending.touch("alice", "s1", "a")
    tending.touch("alice", "s1", "b")
    tending.touch("bob", "s2", None)
    started = time.monotonic()
    await tending.next_round([])
    assert time.monotonic() - started < RELOAD_S
    assert tending.take() == {("alice", "s1"): "a", ("bob", "s2"): ""}
    assert tending.take() == {}


async def test_a_lease_bounds_the_wait_of_a_round() -> None:
    tending = Tending()
    tending.loaded()
    started = time.monotonic()
    with anyio.fail_after(RELOAD_S):
        await tending.next_round([now_ms() + 100])
    assert time.monotonic() - started < RELOAD_S


async def test_a_closed_tending_takes_no_more_touches() -> None:
    tending = Tending()
    tending.close()
    tending.touch("alice", "s1", "a")
    assert tending.closing and tending.take() == {}


async def test_a_forgotten_subscription_is_not_tended() -> None:
    tending = Tending()
    tending.touch("alice", "s1", "a")
    tending.forget("alice", "s1")
    assert tending.take() == {}

"""Per-key locks: one holder per key at a time, and nothing kept for a key nobody holds."""

from __future__ import annotations

import anyio
import pytest

from persistence import KeyedLocks

pytestmark = pytest.mark.anyio


async def test_holders_of_one_key_take_turns_and_the_lock_goes_with_the_last() -> None:
    locks = KeyedLocks()
    inside: list[str] = []
    order: list[int] = []

    async def hold(key: str, number: int) -> None:
        async with locks.hold(key):
            assert key not in inside
            inside.append(key)
            order.append(number)
            await anyio.sleep(0)
            inside.remove(key)

    async with anyio.create_task_group() as group:
        for number in range(6):
            group.start_soon(hold, "a" if number % 2 else "b", number)
        await anyio.sleep(0)
        assert len(locks) == 2
    assert sorted(order) == list(range(6))
    assert len(locks) == 0


async def test_a_failing_holder_releases_its_key() -> None:
    locks = KeyedLocks()
    with pytest.raises(RuntimeError):
        async with locks.hold("k"):
            raise RuntimeError("boom")
    assert len(locks) == 0
    async with locks.hold("k"):
        assert len(locks) == 1


async def test_many_keys_used_once_leave_nothing() -> None:
    locks = KeyedLocks()
    for number in range(100_000):
        async with locks.hold(f"s{number}"):
            pass
    assert len(locks) == 0


async def test_a_lock_an_idle_key_left_serves_a_new_key_as_a_new_lock_would() -> None:
    locks = KeyedLocks()
    cancelled = False
    with anyio.move_on_after(0.01):
        async with locks.hold("left"):
            try:
                await anyio.sleep(10)
            except anyio.get_cancelled_exc_class():
                cancelled = True
                raise
    assert cancelled and len(locks) == 0
    inside: list[int] = []

    async def hold(number: int) -> None:
        async with locks.hold("new"):
            assert not inside
            inside.append(number)
            await anyio.sleep(0)
            inside.remove(number)

    async with anyio.create_task_group() as group:
        for number in range(4):
            group.start_soon(hold, number)
    assert len(locks) == 0


async def test_many_keys_held_at_once_keep_only_a_few_spare_locks() -> None:
    locks = KeyedLocks()
    entered = anyio.Event()
    held = 0

    async def hold(key: str) -> None:
        nonlocal held
        async with locks.hold(key):
            held += 1
            await entered.wait()

    async with anyio.create_task_group() as group:
        for number in range(500):
            group.start_soon(hold, f"k{number}")
        while held < 500:
            await anyio.sleep(0)
        assert len(locks) == 500
        entered.set()
    assert len(locks) == 0 and len(locks._spare) <= 64

"""The waker, shared reads and cursors of live Durable Streams reads (docs/protocol.md §13.4)."""

from __future__ import annotations

import anyio
import pytest

from history_service.durable.live import SharedReads, Waker, response_cursor

pytestmark = pytest.mark.anyio


async def test_a_ticket_taken_before_a_write_is_set_by_it_and_wakes_only_its_stream() -> None:
    waker = Waker()
    mine, other = waker.watch("a"), waker.watch("b")
    assert waker.watch("a") is mine
    waker.wake("a")
    assert mine.is_set() and not other.is_set()
    assert await Waker.wait(mine, 10) is True
    assert waker.watched == 1
    waker.wake_all()
    assert other.is_set() and waker.watched == 0
    assert await Waker.wait(waker.watch("c"), 0.01) is False


async def test_readers_woken_together_share_one_read() -> None:
    waker = Waker()
    shared = SharedReads(waker)
    calls = 0
    release = anyio.Event()

    async def work() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return 42

    results: list[int] = []

    async def reader() -> None:
        results.append(await shared.read(("s", 0), work))

    async with anyio.create_task_group() as tasks:
        for _ in range(100):
            tasks.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        release.set()
    assert results == [42] * 100 and calls == 1


async def test_a_reader_after_a_wake_never_joins_a_read_begun_before_it() -> None:
    waker = Waker()
    shared = SharedReads(waker)
    seen = 0
    first_may_end = anyio.Event()

    async def work() -> int:
        # What the store holds when the read begins.
        held = seen
        await first_may_end.wait()
        return held

    results: list[int] = []

    async def reader() -> None:
        results.append(await shared.read(("s", 0), work))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        seen = 1  # a write commits, and wakes its readers
        waker.wake("s")
        tasks.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        first_may_end.set()
    assert sorted(results) == [0, 1]


async def test_a_failed_shared_read_fails_every_reader_and_is_not_kept() -> None:
    shared = SharedReads(Waker())

    async def broken() -> int:
        raise RuntimeError("store down")

    for _ in range(2):
        with pytest.raises(RuntimeError, match="store down"):
            await shared.read(("s", 0), broken)

    async def fine() -> int:
        return 7

    assert await shared.read(("s", 0), fine) == 7


def test_a_cursor_never_goes_back_past_the_clients() -> None:
    current = int(response_cursor(None))
    assert int(response_cursor("0")) == current
    assert int(response_cursor("not a number")) == current
    ahead = current + 10
    assert all(int(response_cursor(str(ahead))) > ahead for _ in range(50))


@pytest.mark.parametrize(
    "cursor",
    ["²", "٣", "9" * 5000, "9007199254740992", "-5", "+5", " 5", ""],
    ids=["superscript", "arabic-indic", "5000-digits", "past-2^53", "negative", "plus", "space", "empty"],
)
def test_a_cursor_that_is_not_a_numeral_counts_as_none(cursor: str) -> None:
    """As the reference server does: an unreadable cursor is the current interval, never a 500 (issue 41 F5)."""
    before = int(response_cursor(None))
    answered = response_cursor(cursor)
    assert answered.isascii() and before <= int(answered) <= int(response_cursor(None))


def test_the_largest_cursor_is_read_and_advanced() -> None:
    assert int(response_cursor("9007199254740991")) > 9007199254740991

"""The bounded LRU that per-session state lives in."""

from __future__ import annotations

import threading

import pytest

from persistence import Lru


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2


def test_pop_and_clear_and_a_bound_that_must_be_positive() -> None:
    cache: Lru[str, int] = Lru(3)
    cache.put("a", 1)
    assert cache.pop("a") == 1 and cache.pop("a") is None
    cache.put("b", 2)
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError, match="positive"):
        Lru(0)


def test_threads_may_share_one() -> None:
    cache: Lru[int, int] = Lru(8)
    errors: list[BaseException] = []

    def churn(offset: int) -> None:
        try:
            for k in range(20_000):
                cache.put(offset + k % 50, k)
                cache.get(offset + (k * 7) % 50)
                if k % 13 == 0:
                    cache.pop(offset + k % 50)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=churn, args=(offset,)) for offset in (0, 25, 0, 25)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == [] and len(cache) <= 8

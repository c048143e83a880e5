"""The bounded LRU that per-session state lives in."""

from __future__ import annotations

import pytest

from persistence.lru import Lru


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

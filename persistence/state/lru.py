"""A dict bounded in entries that drops the least recently used: per-session state that idle sessions give back."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["Lru"]

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """At most ``bound`` entries; `get` and `put` make an entry the most recent, `put` evicts the least.

    Safe to share between threads (a store's event loop, its worker threads and its writer).
    """

    def __init__(self, bound: int) -> None:
        if bound < 1:
            raise ValueError("an Lru bound must be positive")
        self.bound = bound
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.bound:
                self._entries.popitem(last=False)

    def pop(self, key: K) -> V | None:
        with self._lock:
            return self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

"""Per-session state a process keeps beside any store: a bounded cache and one lock per key."""

from __future__ import annotations

from persistence.state.locks import KeyedLocks
from persistence.state.lru import Lru

__all__ = ["KeyedLocks", "Lru"]

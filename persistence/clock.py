"""The stores' clock: epoch milliseconds, what ``touched_at`` and a stream's times record."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """The store's clock, in epoch ms: what ``touched_at`` records."""
    return time.time_ns() // 1_000_000

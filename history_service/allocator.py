"""Giving freed memory back to the system after a burst of large pages (glibc only; elsewhere nothing).

glibc serves a large allocation from its own mapping and unmaps it when freed, but it raises
that threshold each time such a buffer is freed, up to 32 MiB: after a burst of large reads,
their buffers come from heaps it keeps, and the process stays at its peak. A fixed threshold
keeps large buffers returnable; `Trimmer` returns what the heaps still keep once the bytes in
flight have drained. Both change only how much memory the process keeps, never what it serves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Final

import anyio.to_thread

__all__ = ["Trimmer", "fix_mmap_threshold"]

_M_MMAP_THRESHOLD: Final = -3
# Buffers of this size or more are mapped on their own, and unmapped when freed.
MMAP_THRESHOLD: Final = 256 * 1024


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def fix_mmap_threshold() -> bool:
    """Fix glibc's threshold for mapping a buffer on its own; ``False`` where there is no glibc."""
    libc = _libc()
    return libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


class Trimmer:
    """Calls ``malloc_trim`` in a worker thread after a burst: once ``every`` bytes have drained and few are held."""

    def __init__(self, *, every: int, interval: float = 1.0) -> None:
        self._libc = _libc()
        self._every = every
        self._interval = interval
        self.trims = 0

    async def run(self, drained: Callable[[], int], held: Callable[[], int]) -> None:
        """Look every ``interval`` seconds at the bytes drained so far and the bytes held now, until cancelled."""
        if self._libc is None:
            return
        last = drained()
        while True:
            await anyio.sleep(self._interval)
            # Nearly idle is enough: one slow reader must not keep a burst's memory forever.
            if drained() - last >= self._every and held() <= self._every // 8:
                last = drained()
                await anyio.to_thread.run_sync(self._libc.malloc_trim, 0)
                self.trims += 1

"""zstd contexts kept per thread: making one costs several times more than compressing a small line."""

from __future__ import annotations

import threading
from typing import Any

import zstandard

__all__ = ["ZstdContexts"]


class ZstdContexts:
    """A compressor with fixed parameters and a decompressor, one pair per thread (contexts are not thread-safe)."""

    def __init__(self, **compression: Any) -> None:
        self._compression = compression
        self._local = threading.local()

    def _pair(self) -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
        pair: tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor] | None = getattr(self._local, "pair", None)
        if pair is None:
            pair = self._local.pair = (zstandard.ZstdCompressor(**self._compression), zstandard.ZstdDecompressor())
        return pair

    def compress(self, data: bytes) -> bytes:
        return self._pair()[0].compress(data)

    def decompressor(self) -> zstandard.ZstdDecompressor:
        return self._pair()[1]

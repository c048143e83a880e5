"""Content coding of a follow stream (docs/protocol.md §5.4): one compressor per stream, flushed at every frame.

A follow stream's frames repeat the same ``id:``, ``event:`` and envelope around a few bytes
of token, so a compressor that keeps a window across frames shrinks them several times: a
text delta's frame of about 180 bytes goes out as about 25 (gzip) or 28 (zstd), measured on
2,000 frames of varied tokens. Each frame's bytes are compressed and flushed at once, so no
frame waits in the compressor for the next one; a reader decodes every frame as it arrives.

A stream holds its compressor for as long as it is open, so both are small. A 1 KiB window
holds a whole frame's envelope, and a larger one compressed these frames no better:

* ``gzip`` with ``wbits`` 10 and ``memLevel`` 1: about 11.4 KiB a stream (RSS over 2,000
  compressors), counted as 16 KiB;
* ``zstd`` at level 1 with ``window_log`` 10 and hash and chain logs 8: about 38 KiB,
  counted as 40 KiB.

gzip comes first among equals: smaller on the wire for one flushed frame at a time, and in
memory. ``br`` is not offered for streams: a brotli compressor of quality 2 or more holds
about 290 KiB whatever its window, and quality 0 or 1 barely compresses these frames.
Each stream's compressor is counted against the budget of bytes being sent
(`history_service.budget`) for as long as the stream is open.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Final

import zstandard

__all__ = ["FOLLOW_CODINGS", "FrameCoder", "frame_coder"]

# In order of preference when a client accepts both equally.
FOLLOW_CODINGS: Final = ("gzip", "zstd")
_WINDOW_LOG: Final = 10
_ZSTD: Final = zstandard.ZstdCompressionParameters.from_level(
    1, window_log=_WINDOW_LOG, hash_log=_WINDOW_LOG - 2, chain_log=_WINDOW_LOG - 2
)
# What one stream's compressor holds, rounded up from measurements (RSS over 2,000 compressors).
_SIZES: Final = {"gzip": 16 * 1024, "zstd": 40 * 1024}


class FrameCoder:
    """One stream's compressor: `code` compresses a frame and flushes it, so its bytes can be sent whole."""

    __slots__ = ("_compress", "_finish", "_flush", "coding", "size")

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self.size = _SIZES[coding]
        self._compress: Callable[[bytes | memoryview], bytes]
        self._flush: Callable[[], bytes]
        self._finish: Callable[[], bytes]
        if coding == "zstd":
            zstd = zstandard.ZstdCompressor(compression_params=_ZSTD).compressobj()
            self._compress = zstd.compress
            self._flush = lambda: zstd.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
            self._finish = lambda: zstd.flush(zstandard.COMPRESSOBJ_FLUSH_FINISH)
        else:
            gzip = zlib.compressobj(6, zlib.DEFLATED, 16 + _WINDOW_LOG, 1)
            self._compress = gzip.compress
            self._flush = lambda: gzip.flush(zlib.Z_SYNC_FLUSH)
            self._finish = lambda: gzip.flush(zlib.Z_FINISH)

    def code(self, frame: bytes | memoryview) -> bytes:
        """``frame`` compressed and flushed: the bytes that decode to it, given every earlier frame's."""
        return self._compress(frame) + self._flush()

    def finish(self) -> bytes:
        """The bytes that end the coded stream, so a decoder knows it whole (a zstd frame's end, gzip's trailer)."""
        return self._finish()

    async def coded(self, frames: AsyncGenerator[bytes | memoryview, None]) -> AsyncIterator[bytes]:
        """``frames``, each coded as it comes, then the coding's end once they end (closing ``frames`` with it)."""
        async with aclosing(frames):
            async for frame in frames:
                yield self.code(frame)
        yield self.finish()


def frame_coder(coding: str) -> FrameCoder | None:
    """The compressor for a stream sent in ``coding`` (one of `FOLLOW_CODINGS`), or ``None`` for identity."""
    return None if coding == "identity" else FrameCoder(coding)

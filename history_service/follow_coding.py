"""Content coding of a follow stream (docs/protocol.md §5.4): one gzip compressor per stream, flushed at every write.

A follow stream's frames repeat the same ``id:``, ``event:`` and envelope around a few bytes
of token, so a compressor that keeps a window across frames shrinks them several times: a
text delta's frame of about 180 bytes goes out as about 25, measured on 2,000 frames of
varied tokens. Each write is compressed and flushed at once (a deflate sync flush), so no
frame waits in the compressor for the next one; a reader decodes every frame as it arrives.

A stream holds its compressor for as long as it is open, so it is small: ``wbits`` 10 and
``memLevel`` 1, about 11 KiB a stream (RSS over 2,000 compressors). A 1 KiB window holds a
frame's envelope, and a larger one compressed these frames no better. gzip is the only
coding offered for streams:

* a zstd compressor object keeps a 128 KiB output buffer besides its context (33 to 163 KiB
  a stream, measured), and came out larger for one flushed frame at a time (28 bytes);
* a brotli compressor of quality 2 or more holds about 290 KiB whatever its window, and
  quality 0 or 1 barely compresses these frames.

A write of `persistence.OFF_LOOP_BYTES` or more (a snapshot's pieces) is compressed in a
worker thread, as a page is, so a large snapshot never holds up the event loop.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Final

import anyio.to_thread

from persistence import OFF_LOOP_BYTES

__all__ = ["FOLLOW_CODINGS", "FrameCoder", "frame_coder"]

FOLLOW_CODINGS: Final = ("gzip",)
_WBITS: Final = 10
_MEM_LEVEL: Final = 1


class FrameCoder:
    """One stream's gzip compressor: `code` compresses a write and flushes it, so its bytes can be sent whole."""

    __slots__ = ("_gzip",)

    coding: Final = "gzip"

    def __init__(self) -> None:
        self._gzip = zlib.compressobj(6, zlib.DEFLATED, 16 + _WBITS, _MEM_LEVEL)

    def code(self, frame: bytes | memoryview) -> bytes:
        """``frame`` compressed and flushed: the bytes that decode to it, given every earlier frame's."""
        return self._gzip.compress(frame) + self._gzip.flush(zlib.Z_SYNC_FLUSH)

    def finish(self) -> bytes:
        """The bytes that end the coded stream (gzip's trailer), so a decoder knows it whole."""
        return self._gzip.flush(zlib.Z_FINISH)

    async def coded(self, frames: AsyncGenerator[bytes | memoryview, None]) -> AsyncIterator[bytes]:
        """``frames``, each coded as it comes, then the coding's end once they end (closing ``frames`` with it)."""
        async with aclosing(frames):
            async for frame in frames:
                if len(frame) >= OFF_LOOP_BYTES:
                    # One call at a time, in order: the compressor is never used by two threads at once.
                    yield await anyio.to_thread.run_sync(self.code, frame)
                else:
                    yield self.code(frame)
        yield self.finish()


def frame_coder(coding: str) -> FrameCoder | None:
    """The compressor for a stream sent in ``coding`` (one of `FOLLOW_CODINGS`), or ``None`` for identity."""
    if coding == "identity":
        return None
    assert coding in FOLLOW_CODINGS, coding
    return FrameCoder()

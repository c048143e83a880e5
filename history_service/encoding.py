"""Content codings of HTTP bodies: ``zstd``, ``br`` and ``gzip`` (docs/protocol.md §4).

A response is compressed by one compressor, so a zstd body is a single frame: several
widely used clients stop decoding after the first frame of a body.

Levels suit dynamic responses: zstd 3 with a window of at most 8 MiB, brotli 5, gzip 6.
Decompression is always bounded by an output limit, so a decompression bomb costs at most
``max_size + 1`` bytes of memory before it is refused. A body is decoded to its end:
several zstd frames or gzip members are decoded in turn, and any byte after the end of
the last one is refused, never ignored.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, Literal, get_args

import brotli
import zstandard

from history_service.errors import ContentEncodingError, ContentTooLargeError

__all__ = [
    "CODINGS",
    "DEFAULT_MAX_DECODED_SIZE",
    "Coding",
    "accept_weights",
    "choose_encoding",
    "compress",
    "decompress",
    "gather",
    "spoken",
]

# The one list of content codings: requests decode them, pages are sent in them, and the
# OpenAPI document and the messages that name them are made from it. Offered in this order.
Coding = Literal["zstd", "br", "gzip"]
CODINGS: Final[tuple[str, ...]] = get_args(Coding)
DEFAULT_MAX_DECODED_SIZE: Final = 64 * 1024 * 1024
_ZSTD_LEVEL: Final = 3
_ZSTD_MAX_WINDOW: Final = 8 * 1024 * 1024
_BROTLI_QUALITY: Final = 5
_GZIP_LEVEL: Final = 6
_READ_SIZE: Final = 256 * 1024
_GZIP_MAGIC: Final = b"\x1f\x8b"
# Input is fed a slice at a time: what a decoder leaves over is then at most a slice, never the
# rest of the body copied once per gzip member or zstd frame.
_FEED: Final = 64 * 1024
# Parts are compressed in slices of this size: brotli emits a block per call, so small slices cost ratio.
_COMPRESS_SLICE: Final = 1024 * 1024


def gather(parts: Iterable[bytes | memoryview], size: int) -> Iterator[bytes]:
    """``parts`` joined into bytes of about ``size`` each, made one at a time (a larger part stays whole)."""
    group: list[bytes | memoryview] = []
    total = 0
    for part in parts:
        group.append(part)
        total += len(part)
        if total >= size:
            yield b"".join(group)
            group, total = [], 0
    if group:
        yield b"".join(group)


def spoken(codings: Sequence[str] = CODINGS) -> str:
    """``codings`` as a message names them: ``"zstd, br or gzip"``."""
    return " or ".join(filter(None, (", ".join(codings[:-1]), codings[-1])))


def compress(body: bytes | Sequence[bytes | memoryview], coding: str) -> bytes:
    """Compress ``body``, one buffer or parts in order, with one of `CODINGS`.

    Parts are fed to one compressor a gathered slice at a time, so they are never joined
    whole and a zstd body is still one frame, with its content size.
    """
    parts = [body] if isinstance(body, bytes) else body
    slices = gather(parts, _COMPRESS_SLICE)
    if coding == "zstd":
        size = sum(map(len, parts))
        params = zstandard.ZstdCompressionParameters.from_level(_ZSTD_LEVEL, source_size=size)
        if params.window_log > 23:
            params = zstandard.ZstdCompressionParameters.from_level(_ZSTD_LEVEL, window_log=23)
        compressor = zstandard.ZstdCompressor(compression_params=params).compressobj(size=size)
        return b"".join([*map(compressor.compress, slices), compressor.flush()])
    if coding == "br":
        encoder = brotli.Compressor(quality=_BROTLI_QUALITY)
        return b"".join([*map(encoder.process, slices), encoder.finish()])
    if coding == "gzip":
        deflate = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)
        return b"".join([*map(deflate.compress, slices), deflate.flush()])
    raise ContentEncodingError(f"unsupported content coding {coding!r}")


def decompress(body: bytes | bytearray, coding: str, *, max_size: int = DEFAULT_MAX_DECODED_SIZE) -> bytes:
    """Decompress ``body``; raise `ContentEncodingError` if it is corrupt or decodes past ``max_size`` bytes."""
    try:
        if coding == "zstd":
            out = _zstd_decompress(body, max_size)
        elif coding == "br":
            out = _brotli_decompress(body, max_size)
        elif coding == "gzip":
            out = _gzip_decompress(body, max_size)
        else:
            raise ContentEncodingError(f"unsupported content coding {coding!r}")
    except (zstandard.ZstdError, brotli.error, zlib.error, EOFError) as exc:
        raise ContentEncodingError(f"corrupt {coding} body: {exc}") from exc
    if len(out) > max_size:
        raise ContentTooLargeError(f"{coding} body decodes to more than {max_size} bytes")
    return out


def _zstd_decompress(body: bytes | bytearray, max_size: int) -> bytes:
    dctx = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
    # First bound the output without keeping it: a bomb stops after max_size + 1 bytes.
    size = 0
    with dctx.stream_reader(body, read_across_frames=True) as reader:
        while size <= max_size:
            chunk = reader.read(_READ_SIZE)
            if not chunk:
                break
            size += len(chunk)
    if size > max_size:
        raise ContentTooLargeError(f"zstd body decodes to more than {max_size} bytes")
    # The stream reader does not report a truncated frame; a frame-by-frame decode does.
    if not body:
        raise ContentEncodingError("corrupt zstd body: empty")
    out = bytearray()
    with memoryview(body) as view:
        offset = 0
        while offset < len(view):
            frame = dctx.decompressobj()
            while not frame.eof:
                if offset >= len(view):
                    raise ContentEncodingError("corrupt zstd body: truncated frame")
                piece = view[offset : offset + _FEED]
                out += frame.decompress(piece)
                offset += len(piece) - len(frame.unused_data)
    return bytes(out)


def _brotli_decompress(body: bytes | bytearray, max_size: int) -> bytes:
    decoder = brotli.Decompressor()
    out = bytearray(decoder.process(body, output_buffer_limit=max_size + 1))
    while len(out) <= max_size and not decoder.is_finished() and not decoder.can_accept_more_data():
        out += decoder.process(b"", output_buffer_limit=max_size + 1 - len(out))
    if not decoder.is_finished() and len(out) <= max_size:
        raise ContentEncodingError("corrupt br body: truncated stream")
    return bytes(out)


def _gzip_decompress(body: bytes | bytearray, max_size: int) -> bytes:
    # RFC 1952 allows several members; each is decoded, and anything else after one is an error.
    out = bytearray()
    with memoryview(body) as view:
        offset = 0
        while True:
            decoder = zlib.decompressobj(wbits=31)
            while not decoder.eof:
                if offset >= len(view):
                    raise ContentEncodingError("corrupt gzip body: truncated stream")
                piece = view[offset : offset + _FEED]
                out += decoder.decompress(piece, max_size + 1 - len(out))
                if len(out) > max_size:
                    return bytes(out)
                offset += len(piece) - len(decoder.unused_data)
            if offset == len(view):
                return bytes(out)
            if view[offset : offset + 2].tobytes() != _GZIP_MAGIC:
                raise ContentEncodingError(f"corrupt gzip body: {len(view) - offset} bytes after the end of the stream")


def accept_weights(header: str) -> dict[str, float]:
    """The q-value of each item an ``Accept``-style header lists (RFC 9110 §12.4.2), by its name in
    lower case, parameters other than ``q`` dropped; a malformed q is 0."""
    weights: dict[str, float] = {}
    for item in header.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
                if not 0.0 <= q <= 1.0:
                    q = 0.0
        weights[name] = max(q, weights.get(name, q))
    return weights


def choose_encoding(accept_encoding: str | None, offered: Sequence[str]) -> str | None:
    """Pick a content coding for a response (RFC 9110 §12.5.3).

    Returns the acceptable offered coding with the highest q-value (ties go to the order of
    ``offered``: with `CODINGS`, zstd before br, as zstd 3 compresses a large page several
    times faster than brotli 5), ``"identity"`` when no offered coding is acceptable, or identity is listed
    with a higher q, and identity is acceptable; or
    ``None`` when nothing is acceptable (``identity;q=0`` or ``*;q=0`` with no match). A
    missing header means identity.
    """
    if accept_encoding is None:
        return "identity"
    weights = accept_weights(accept_encoding)
    star = weights.get("*")
    best: str | None = None
    best_q = 0.0
    for coding in offered:
        q = weights.get(coding, star if star is not None else 0.0)
        if q > best_q:
            best, best_q = coding, q
    # Identity is acceptable unless excluded, but it wins only when listed with a higher q.
    identity_q = weights.get("identity", star if star is not None else 1.0)
    if best is not None and not ("identity" in weights and identity_q > best_q):
        return best
    return "identity" if identity_q > 0 else None

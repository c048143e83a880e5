"""Content codings and Accept-Encoding negotiation."""

from __future__ import annotations

import gzip
import os
from itertools import pairwise

import brotli
import pytest
import zstandard

from history_service.encoding import CODINGS, choose_encoding, compress, decompress
from history_service.errors import ContentEncodingError, ContentTooLargeError

BODY = b'{"records":[' + b'{"event":{"type":"x","seq":1,"time":2,"data":"hello"}},' * 500 + b"]}"


@pytest.mark.parametrize("coding", CODINGS)
def test_round_trip(coding):
    packed = compress(BODY, coding)
    assert len(packed) < len(BODY)
    assert decompress(packed, coding) == BODY


def test_bodies_interoperate_with_the_reference_libraries():
    assert zstandard.ZstdDecompressor().decompress(compress(BODY, "zstd")) == BODY
    assert brotli.decompress(compress(BODY, "br")) == BODY
    assert gzip.decompress(compress(BODY, "gzip")) == BODY
    assert decompress(zstandard.ZstdCompressor(level=19).compress(BODY), "zstd") == BODY


@pytest.mark.parametrize("coding", CODINGS)
def test_parts_compress_as_their_join_does(coding):
    cut = [0, 7, 700, 701, len(BODY) // 2, len(BODY)]
    parts = [BODY[a:b] if i % 2 else memoryview(BODY)[a:b] for i, (a, b) in enumerate(pairwise(cut))]
    assert decompress(compress(parts, coding), coding) == BODY
    if coding != "gzip":
        assert compress(parts, coding) == compress(BODY, coding)


def test_a_zstd_body_of_parts_is_one_frame_with_its_size():
    parts = [BODY[i : i + 1000] for i in range(0, len(BODY), 1000)]
    frame = compress(parts, "zstd")
    assert zstandard.frame_content_size(frame) == len(BODY)
    # A decoder that stops after the first frame still gets the whole body.
    assert zstandard.ZstdDecompressor().decompressobj().decompress(frame) == BODY


def test_zstd_window_stays_within_eight_mib():
    body = os.urandom(1024) * 20_000
    frame = compress(body, "zstd")
    assert zstandard.get_frame_parameters(frame).window_size <= 8 * 1024 * 1024


@pytest.mark.parametrize("coding", CODINGS)
def test_decompression_bomb_is_refused_at_the_limit(coding):
    bomb = compress(b"\0" * 10_000_000, coding)
    with pytest.raises(ContentEncodingError, match="more than 1000000 bytes"):
        decompress(bomb, coding, max_size=1_000_000)
    assert len(decompress(bomb, coding, max_size=10_000_000)) == 10_000_000


@pytest.mark.parametrize("coding", CODINGS)
def test_corrupt_and_truncated_bodies_are_codec_errors(coding):
    packed = compress(BODY, coding)
    for broken in (b"garbage!" * 4, packed[: len(packed) // 2]):
        with pytest.raises(ContentEncodingError):
            decompress(broken, coding)


def test_unknown_coding_is_refused():
    with pytest.raises(ContentEncodingError, match="unsupported content coding 'lz4'"):
        compress(BODY, "lz4")
    with pytest.raises(ContentEncodingError, match="unsupported content coding 'lz4'"):
        decompress(BODY, "lz4")


OFFERED = ("zstd", "br", "gzip")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, "identity"),
        ("", "identity"),
        ("gzip", "gzip"),
        ("gzip, br", "br"),
        ("gzip, deflate, br, zstd", "zstd"),
        ("br;q=0.5, gzip;q=0.9", "gzip"),
        ("BR;Q=1, GZIP", "br"),
        ("zstd;q=0, br;q=0", "identity"),
        ("*", "zstd"),
        ("*;q=0.1, br;q=0.5", "br"),
        ("*;q=0.5, zstd;q=0", "br"),
        ("identity;q=0, gzip;q=0.2", "gzip"),
        ("identity;q=0", None),
        ("*;q=0", None),
        ("*;q=0, identity", "identity"),
        ("deflate", "identity"),
        ("gzip;q=0.5, identity;q=1", "identity"),
        ("gzip;q=abc", "identity"),
        ("gzip;q=2", "identity"),
        (" , ;q=1, gzip ; q=0.3 ", "gzip"),
    ],
)
def test_choose_encoding(header, expected):
    assert choose_encoding(header, OFFERED) == expected


def test_choose_encoding_breaks_ties_by_offer_order():
    assert choose_encoding("gzip, br", ("gzip", "br")) == "gzip"


def test_gzip_members_are_all_decoded():
    """F10: RFC 1952 allows several members; each one is decoded, none dropped."""
    body = gzip.compress(BODY[:1000]) + gzip.compress(BODY[1000:])
    assert decompress(body, "gzip") == BODY


def test_gzip_members_share_the_size_limit():
    member = gzip.compress(b"\0" * 600_000)
    with pytest.raises(ContentTooLargeError):
        decompress(member + member, "gzip", max_size=1_000_000)


@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize("tail", [b"garbage", b"\0\0\0\0", b"\x1f"], ids=["garbage", "zeros", "half-magic"])
def test_bytes_after_the_end_of_the_stream_are_refused(coding, tail):
    """F10: nothing may follow the end of a coding's stream."""
    with pytest.raises(ContentEncodingError) as refused:
        decompress(compress(BODY, coding) + tail, coding)
    assert not isinstance(refused.value, ContentTooLargeError)


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
def test_a_hundred_thousand_members_decode_in_one_pass(coding):
    """Each member or frame is fed a slice at a time: the rest of the body is never copied once per member."""
    empty = gzip.compress(b"") if coding == "gzip" else zstandard.ZstdCompressor().compress(b"")
    one = gzip.compress(b"x") if coding == "gzip" else zstandard.ZstdCompressor().compress(b"x")
    assert decompress(empty * 100_000 + one, coding) == b"x"


def test_zstd_wins_over_br_at_equal_q():
    assert choose_encoding("br, zstd", CODINGS) == "zstd"
    assert choose_encoding("gzip;q=0.8, br;q=0.8, zstd;q=0.8", CODINGS) == "zstd"
    assert choose_encoding("br;q=1, zstd;q=0.9", CODINGS) == "br"

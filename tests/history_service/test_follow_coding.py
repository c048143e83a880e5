"""Coded follow streams: each write flushed as it is sent, large ones off the event loop, the stream ended whole."""

from __future__ import annotations

import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from hypothesis import given, settings, strategies as st

from history_service.follow_coding import FOLLOW_CODINGS, FrameCoder, frame_coder
from history_service.settings import Settings
from persistence import OFF_LOOP_BYTES
from testing.servers import serve_in_thread

pytestmark = pytest.mark.anyio

JSON = {"Content-Type": "application/json"}


def _gunzip() -> Callable[[bytes], bytes]:
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=400), min_size=1, max_size=40))
def test_each_coded_frame_decodes_to_that_frame_as_it_arrives(frames: list[bytes]) -> None:
    coder = FrameCoder()
    decode = _gunzip()
    for frame in frames:
        assert decode(coder.code(frame)) == frame
    assert decode(coder.finish()) == b""


def test_a_finished_stream_is_whole_for_a_strict_decoder_and_several_times_smaller() -> None:
    coder = FrameCoder()
    data = b'{"type":"assistant/chunk","seq":%d,"time":%d,"data":{"chunk":{"text":" t%d"}}}'
    frame = b"id: %d\nevent: event\ndata: " + data + b"\n\n"
    coded = b"".join(coder.code(frame % (n, n, 1_700_000_000_000 + n, n)) for n in range(50)) + coder.finish()
    whole = zlib.decompressobj(31)
    text = whole.decompress(coded)
    assert text.count(b"event: event") == 50 and whole.eof
    assert len(coded) < len(text) // 4


async def test_a_large_write_is_coded_off_the_event_loop_in_order() -> None:
    pieces = [b"a" * 10, bytes(range(256)) * (OFF_LOOP_BYTES // 256 + 1), b"b" * 10]

    async def frames() -> AsyncGenerator[bytes | memoryview, None]:
        for piece in pieces:
            yield piece

    decode = _gunzip()
    coded = [chunk async for chunk in FrameCoder().coded(frames())]
    assert [decode(chunk) for chunk in coded] == [*pieces, b""]


def test_identity_has_no_coder_and_gzip_is_the_only_coding_of_streams() -> None:
    assert frame_coder("identity") is None and FOLLOW_CODINGS == ("gzip",)
    assert isinstance(frame_coder("gzip"), FrameCoder)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    served = Settings(store_url=f"sqlite:///{tmp_path / 'coded.db'}", ping_interval=30)
    with serve_in_thread(served) as running:
        yield running.url


async def _frames(response: httpx.Response, coding: str) -> AsyncIterator[bytes]:
    """The decoded frames of a raw coded stream, each yielded once its bytes have all arrived."""
    decode = _gunzip() if coding == "gzip" else (lambda data: data)
    pending = b""
    async for raw in response.aiter_raw():
        pending += decode(raw)
        while b"\n\n" in pending:
            frame, pending = pending.split(b"\n\n", 1)
            yield frame


@pytest.mark.parametrize("accept", ["gzip", "br, gzip;q=0.5", "*", "zstd", "br", "identity", "gzip;q=0"])
async def test_a_follower_reads_each_frame_while_the_stream_is_open_in_the_coding_it_accepts(
    server: str, accept: str
) -> None:
    expected = "gzip" if accept in ("gzip", "br, gzip;q=0.5", "*") else "identity"
    async with httpx.AsyncClient(base_url=server, timeout=30) as client:
        created = await client.post("/v1/sessions", content=b'{"id":"c1","createdAt":1}', headers=JSON)
        assert created.status_code == 201
        headers = {"Accept-Encoding": accept}
        async with client.stream("GET", "/v1/sessions/c1/follow", headers=headers) as response:
            assert response.status_code == 200
            assert response.headers.get("content-encoding", "identity") == expected
            assert response.headers["vary"] == "Accept-Encoding"
            frames = _frames(response, expected)
            assert (await anext(frames)).startswith(b"retry: ")
            assert b"event: snapshot" in await anext(frames)
            for seq in range(3):
                # Each event is read before the next is appended: no frame waits in the compressor.
                event = b'{"type":"user/message","seq":%d,"time":1,"data":{"text":"t%d"}}' % (seq, seq)
                appended = await client.post("/v1/sessions/c1/events", content=b'{"events":[%b]}' % event, headers=JSON)
                assert appended.status_code == 201
                with anyio.fail_after(20):
                    frame = await anext(frames)
                assert frame.startswith(b"id: ") and b":%d\nevent: event\n" % seq in frame and b'"t%d"' % seq in frame


async def test_a_client_that_refuses_every_coding_of_a_stream_gets_406(server: str) -> None:
    async with httpx.AsyncClient(base_url=server, timeout=30) as client:
        await client.post("/v1/sessions", content=b'{"id":"c2","createdAt":1}', headers=JSON)
        refused = await client.get("/v1/sessions/c2/follow", headers={"Accept-Encoding": "br, zstd, identity;q=0"})
    assert refused.status_code == 406
    assert refused.json()["error"]["code"] == "not_acceptable"

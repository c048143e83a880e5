"""Follow stream behaviour in process: resume rules, pings, headers, and the channel buffer."""

from __future__ import annotations

import anyio
import httpx
import pytest

from history_service.app import create_app
from history_service.follow import Channel
from history_service.settings import Settings
from history_service.shutdown import Shutdown
from persistence import MemoryStore
from tests.history_service.conftest import seed, serving

pytestmark = pytest.mark.anyio


async def test_a_cursor_ahead_of_the_head_gets_one_error_frame(client: httpx.AsyncClient) -> None:
    (session,) = await seed(client, scenario="multi-turn", seed=1, turns=1)
    response = await client.get("/v1/sessions/multi-turn-1/follow", params={"after": session["headSeq"] + 1})
    assert response.status_code == 200
    assert (
        response.text
        == f'retry: 1000\n\nevent: error\ndata: {{"code":"cursor_ahead","headSeq":{session["headSeq"]}}}\n\n'
    )


async def test_idle_streams_ping_and_are_never_compressed() -> None:
    settings = Settings(ping_interval=0.05, enable_test_seed=True)
    shutdown = Shutdown()
    async with serving(create_app(settings, store=MemoryStore(), shutdown=shutdown)) as client:
        await seed(client, scenario="multi-turn", seed=1, turns=1)
        result: dict[str, httpx.Response] = {}

        async def read() -> None:
            headers = {"Accept-Encoding": "gzip, zstd"}
            result["response"] = await client.get("/v1/sessions/multi-turn-1/follow", headers=headers)

        async with anyio.create_task_group() as group:
            group.start_soon(read)
            await anyio.sleep(0.5)
            shutdown.trigger()
        response = result["response"]
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "content-encoding" not in response.headers
        assert response.headers["cache-control"] == "no-cache" and response.headers["x-accel-buffering"] == "no"
        assert response.text.count(": ping\n\n") >= 3
        assert response.text.startswith("retry: 1000\n\nid: ")


def test_channel_keeps_a_bounded_contiguous_buffer() -> None:
    channel = Channel(4)
    channel.publish(10, [b"a", b"b", b"c"])
    assert (channel.first_seq, channel.next_seq) == (10, 13)
    assert channel.frames_from(11) == b"bc" and channel.frames_from(13) == b"" and channel.frames_from(9) is None
    channel.publish(13, [b"d"] * 6)
    assert channel.next_seq == 19 and channel.first_seq == 15 and channel.frames_from(15) == b"dddd"
    channel.publish(40, [b"z"])
    assert (channel.first_seq, channel.next_seq) == (40, 41)

"""Generic Durable Streams over HTTP (history_service/durable/streams.py): offsets carry the stream's life (§13.3)."""

from __future__ import annotations

import httpx

from history_service.settings import Settings
from persistence import MemoryStore
from testing.servers import serve_in_thread

FAST = Settings(ds_long_poll=0.3, max_followers=3, limit_concurrency=8)
TEXT = {"content-type": "text/plain"}


def test_an_offset_of_an_earlier_life_is_gone_and_one_inside_an_append_is_refused() -> None:
    with serve_in_thread(FAST, store=MemoryStore()) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        url = "/ds/v1/stream/reused"
        created = http.put(url, content=b"old", headers=TEXT)
        old = http.post(url, content=b" life", headers=TEXT).headers["stream-next-offset"]
        first = created.headers["stream-next-offset"]
        assert old[:16] == first[:16] != "0" * 16  # one life, and not the epoch of a stream without one
        assert http.delete(url).status_code == 204
        renewed = http.put(url, content=b"new life, longer", headers=TEXT).headers["stream-next-offset"]
        assert renewed[:16] != first[:16]
        for params in ({"offset": first}, {"offset": first, "live": "long-poll"}, {"offset": old, "live": "sse"}):
            assert http.get(url, params=params).status_code == 410, params
        assert http.head(url).headers["stream-next-offset"] == renewed
        start = http.get(url, params={"offset": "-1"})
        assert start.content == b"new life, longer" and start.headers["stream-next-offset"] == renewed
        # The position of `first` (3) lies inside this life's one append: no offset the stream gave.
        inside = renewed[:16] + "_" + first[17:]
        assert http.get(url, params={"offset": inside}).status_code == 400
        # Every offset the stream gives is of its life: an append's, a closed stream's refusal's.
        http.post(url, headers={"stream-closed": "true"})
        refused = http.post(url, content=b"x", headers=TEXT)
        assert refused.status_code == 409 and refused.headers["stream-next-offset"] == renewed

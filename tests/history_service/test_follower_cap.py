"""The one cap on follow streams: ``/v1`` follows and live ``/ds`` reads count together, and are refused alike."""

from __future__ import annotations

import json

import httpx
import pytest

from history_service.errors import Overloaded
from history_service.follower_cap import FollowerCap
from history_service.settings import Settings
from persistence import MemoryStore
from testing.servers import serve_in_thread

REFUSED = "2 follow streams are open, the most this server keeps"


def test_the_cap_refuses_a_stream_past_it_until_one_leaves() -> None:
    cap = FollowerCap(2)
    cap.admit()
    cap.admit()
    with pytest.raises(Overloaded, match=REFUSED):
        cap.admit()
    assert cap.open == 2
    cap.leave()
    cap.admit()
    assert cap.open == 2


def refusal(response: httpx.Response) -> tuple[int, str, str]:
    error = json.loads(response.read())["error"]
    return response.status_code, error["code"], error["message"]


@pytest.mark.parametrize("kind", ["v1", "ds"])
def test_a_v1_follow_and_a_ds_live_read_share_one_cap_and_one_refusal(kind: str) -> None:
    settings = Settings(ds_long_poll=0.3, max_followers=2, limit_concurrency=8)
    with serve_in_thread(settings, store=MemoryStore()) as server, httpx.Client(base_url=server.url) as http:
        assert http.post("/v1/sessions", json={"id": "s", "createdAt": 1}).status_code == 201
        assert http.put("/ds/v1/stream/a", headers={"content-type": "text/plain"}).status_code == 201
        # The cap is full with one stream of each kind, whichever came first.
        follow = ("/v1/sessions/s/follow", None)
        read = ("/ds/v1/stream/a", {"offset": "-1", "live": "sse"})
        first, second = (follow, read) if kind == "v1" else (read, follow)
        with (
            http.stream("GET", first[0], params=first[1]) as one,
            http.stream("GET", second[0], params=second[1]) as two,
        ):
            assert one.status_code == two.status_code == 200
            with http.stream("GET", "/v1/sessions/s/follow") as refused:
                assert refusal(refused) == (503, "overloaded", REFUSED)
            with http.stream("GET", "/ds/v1/stream/a", params={"offset": "-1", "live": "long-poll"}) as refused:
                assert refusal(refused) == (503, "overloaded", REFUSED)

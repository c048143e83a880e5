"""Request ids: the caller's when safe, else a new one, echoed and carried by every line of its request."""

from __future__ import annotations

import httpx
import pytest

from history_service.app import create_app
from history_service.logs import ACCESS_LOGGER, current_request_id, request_id
from history_service.settings import Settings
from persistence.errors import StoreError
from persistence.memory import MemoryStore
from testing.asgi import serving
from tests.history_service.logs.conftest import access_lines, captured, json_lines

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ([b"abc-123"], True),
        ([b"0af7651916cd43dd8448eb211c80319c"], True),
        ([b"trace:3f2a/span.9+x=@_"], True),
        ([b"a" * 128], True),
        ([b"a" * 129], False),
        ([b""], False),
        ([b"has space"], False),
        ([b'quote"d'], False),
        ([b"line\nbreak"], False),
        ([b"caf\xc3\xa9"], False),
        ([b"one", b"two"], False),
        ([], False),
    ],
    ids=[
        "plain",
        "hex",
        "punctuation",
        "at-the-bound",
        "too-long",
        "empty",
        "space",
        "quote",
        "newline",
        "utf8",
        "two-headers",
        "none",
    ],
)
def test_a_callers_request_id_is_kept_only_when_bounded_and_safe(given: list[bytes], kept: bool) -> None:
    found = request_id([(b"x-request-id", value) for value in given] + [(b"host", b"x")])
    if kept:
        assert found == given[0].decode()
    else:
        assert len(found) == 32 and int(found, 16) >= 0


class UnreadyStore(MemoryStore):
    async def check_ready(self) -> None:
        raise StoreError("store unavailable: the disk is on fire")


async def test_a_callers_request_id_is_echoed_and_carried_by_every_line_of_its_request() -> None:
    async with serving(create_app(Settings(), store=UnreadyStore())) as client:
        with captured("json") as buffer:
            response = await client.get("/readyz", headers={"X-Request-ID": "gateway-42"})
    assert response.status_code == 503
    assert response.headers["X-Request-ID"] == "gateway-42"
    lines = [line for line in json_lines(buffer) if line["logger"].startswith("history_service")]
    assert [(line["logger"], line["level"]) for line in lines] == [
        (ACCESS_LOGGER, "DEBUG"),
        ("history_service.readiness", "WARNING"),
        (ACCESS_LOGGER, "INFO"),
    ]
    assert all(line["request_id"] == "gateway-42" for line in lines)
    assert lines[0]["message"] == "GET /readyz started"
    assert (lines[2]["status"], lines[2]["route"], lines[2]["content_coding"]) == (503, "/readyz", "identity")
    assert current_request_id() is None


async def test_an_unsafe_request_id_is_replaced_in_the_response_and_the_log(client: httpx.AsyncClient) -> None:
    with captured("json") as buffer:
        response = await client.get("/healthz", headers={"X-Request-ID": "evil id\twith tab"})
    rid = response.headers["X-Request-ID"]
    assert rid != "evil id\twith tab" and len(rid) == 32
    (line,) = access_lines(json_lines(buffer))
    assert line["request_id"] == rid and "evil" not in buffer.getvalue()

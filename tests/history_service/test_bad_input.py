"""Every endpoint refuses bad input with its documented 4xx and leaves the store unchanged."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any, Final

import httpx
import pytest

from codec import encode
from history_service.app import create_app
from history_service.encoding import compress
from history_service.settings import Settings
from persistence import MemoryStore
from testing.asgi import serving
from testing.events import plain

pytestmark = pytest.mark.anyio

TOKEN = {"Authorization": "Bearer service-token", "X-Principal": "alice"}
JSON = {"Content-Type": "application/json"}
EVENT = {"type": "x", "seq": 0, "time": 0, "data": 1}


@pytest.fixture
async def api() -> AsyncIterator[tuple[httpx.AsyncClient, MemoryStore]]:
    store = MemoryStore()
    settings = Settings(
        auth="token", tokens=("service-token",), max_body_bytes=100_000, max_batch_events=50, max_body_values=5_000
    )
    async with serving(create_app(settings, store=store)) as client:
        client.headers.update(TOKEN)
        assert (await client.post("/v1/sessions", json={"id": "s", "createdAt": 0})).status_code == 201
        assert (await client.post("/v1/sessions/s/events", json={"events": [EVENT]})).status_code == 201
        yield client, store


async def snapshot(store: MemoryStore) -> bytes:
    return encode([(s, await store.read_events(s, 0, 10**6)) for s in sorted(store._sessions)])


def bomb() -> bytes:
    return gzip.compress(b'{"events":[' + b" " * 5_000_000 + b"]}")


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def text_row(seq0: int, members: int, *, dt_entries: int | None = None) -> dict[str, Any]:
    dt = [1] * (members - 1 if dt_entries is None else dt_entries)
    data = {"turn": 1, "step": 1, "index": 0, "dt": dt, "texts": ["a"] * members}
    return {"type": "text-chunks", "seq0": seq0, "time0": 0, "data": data}


INVALID_UTF8 = b"\xff\xfe"
EVENTS_UTF8 = b'{"events":[{"type":"x","seq":1,"time":0,"data":"' + INVALID_UTF8 + b'"}]}'
HEADER_UTF8 = b'{"id":"u","createdAt":0,"meta":{"k":"' + INVALID_UTF8 + b'"}}'
FORGED = b" 2026-12-01T00:00:00.000Z INFO history_service.access [forged] GET /admin 200"


BAD: list[Any] = [
    # POST /v1/sessions
    ("post", "/v1/sessions", {"content": b"{nope"}, 400, "malformed_json"),
    ("post", "/v1/sessions", {"json": {"id": "t"}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "t", "createdAt": "0"}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "t", "createdAt": 2**53}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "t", "createdAt": 0, "owner": "bob"}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "", "createdAt": 0}}, 422, "invalid_header"),
    ("post", "/v1/sessions", {"json": {"id": "s", "createdAt": 0}}, 409, "session_exists"),
    (
        "post",
        "/v1/sessions",
        {"json": {"id": "c", "createdAt": 0, "parentSession": "nope", "origin": "subagent"}},
        422,
        "invalid_parent",
    ),
    ("post", "/v1/sessions", {"content": b"[" * 100_001}, 413, "body_too_large"),
    # POST events
    ("post", "/v1/sessions/s/events", {"content": b"{nope"}, 400, "malformed_json"),
    ("post", "/v1/sessions/s/events", {"content": b"[" * 4_000 + b"]" * 4_000}, 422, "invalid_batch"),
    (
        "post",
        "/v1/sessions/s/events",
        {"content": b'{"events":[{"type":"x","seq":1,"time":0,"data":' + b"[" * 4_000 + b"]" * 4_000 + b"}]}"},
        400,
        "malformed_json",
    ),
    ("post", "/v1/sessions/s/events", {"json": {"events": []}}, 422, "invalid_batch"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [EVENT], "extra": 1}}, 422, "invalid_batch"),
    ("post", "/v1/sessions/s/events", {"json": {"events": "no"}}, 422, "invalid_batch"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 1, "time": 1.5}]}}, 422, "invalid_event"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": -1}]}}, 422, "invalid_event"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 2**64}]}}, 422, "invalid_event"),
    (
        "post",
        "/v1/sessions/s/events",
        {"json": {"events": [{**EVENT, "seq": 1, "surfaceOp": "x"}]}},
        422,
        "invalid_event",
    ),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 1, "bad": 1}]}}, 422, "invalid_event"),
    (
        "post",
        "/v1/sessions/s/events",
        {"json": {"events": [{"type": "text-chunks", "seq0": 1, "time0": 0, "data": {"turn": 1}}]}},
        422,
        "invalid_event",
    ),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 5}]}}, 409, "seq_conflict"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 0, "data": 2}]}}, 409, "seq_conflict"),
    (
        "post",
        "/v1/sessions/s/events",
        {"json": {"events": [{**EVENT, "seq": 1 + k} for k in range(51)]}},
        413,
        "batch_too_large",
    ),
    ("post", "/v1/sessions/s/events", {"content": b" " * 100_001}, 413, "body_too_large"),
    (
        "post",
        "/v1/sessions/s/events",
        {"content": bomb(), "headers": {"Content-Encoding": "gzip"}},
        413,
        "body_too_large",
    ),
    (
        "post",
        "/v1/sessions/s/events",
        {"content": b"garbage", "headers": {"Content-Encoding": "br"}},
        400,
        "bad_encoding",
    ),
    (
        "post",
        "/v1/sessions/s/events",
        {"content": b"x", "headers": {"Content-Encoding": "lz4"}},
        415,
        "unsupported_encoding",
    ),
    ("post", "/v1/sessions/nope/events", {"json": {"events": [EVENT]}}, 404, "session_not_found"),
    ("post", "/v1/sessions/..%2F..%2Fetc/events", {"json": {"events": [EVENT]}}, 404, "not_found"),
    ("post", "/v1/sessions/%2e%2e/events", {"json": {"events": [EVENT]}}, 422, "invalid_session_id"),
    ("get", "/v1/sessions/s/subagents/..%2F..%2Fs/page", {}, 404, "not_found"),
    # GET page
    ("get", "/v1/sessions/s/page?maxMessages=0", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?maxMessages=1001", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?maxMessages=abc", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?through=-2", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?through=1", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?through=1.5", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?through=99999999999999999999", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?before=-1", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?maxBytes=0", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?bogus=1", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?expand=all", {}, 400, "invalid_parameter"),
    # Issue 41 F5: one numeral rule (codec.numerals): ASCII digits, at most 16, a sign only where the range has one.
    ("get", "/v1/sessions/s/page?through=%C2%B2", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?maxMessages=%D9%A3", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?before=" + "9" * 5000, {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?before=9007199254740992", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/page?before=-0", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/follow?after=%C2%B2", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions?limit=" + "9" * 5000, {}, 400, "invalid_parameter"),
    ("post", "/v1/sessions?ttlMs=%C2%B2", {"json": {"id": "t", "createdAt": 0}}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/nope/page", {}, 404, "session_not_found"),
    ("get", "/v1/sessions/s/subagents/nope/page", {}, 404, "session_not_found"),
    ("get", "/v1/sessions/s/page", {"headers": {"Accept-Encoding": "identity;q=0"}}, 406, "not_acceptable"),
    # GET follow
    ("get", "/v1/sessions/s/follow?after=abc", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/follow?after=-2", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/follow", {"headers": {"Last-Event-ID": "x"}}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/follow?bogus=1", {}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/nope/follow", {}, 404, "session_not_found"),
    # Auth and routing
    ("get", "/v1/sessions/s/page", {"headers": {"Authorization": ""}}, 401, "unauthorized"),
    ("get", "/v1/sessions/s/page", {"headers": {"Authorization": "Bearer wrong"}}, 401, "unauthorized"),
    ("get", "/v1/sessions/s/page", {"headers": {"Authorization": "Basic service-token"}}, 401, "unauthorized"),
    (
        "post",
        "/v1/sessions/s/events",
        {"headers": {"X-Principal": ""}, "json": {"events": [EVENT]}},
        401,
        "unauthorized",
    ),
    ("get", "/v1/sessions/s/follow", {"headers": {"X-Principal": "x" * 300}}, 401, "unauthorized"),
    ("get", "/v1/nothing", {}, 404, "not_found"),
    ("delete", "/v1/sessions/s/page", {}, 405, "method_not_allowed"),
    ("post", "/v1/test-only/seed", {"json": {"scenario": "multi-turn"}}, 404, "not_found"),
    # F1: a row's members and a body's values are counted before anything is decoded or expanded.
    ("post", "/v1/sessions/s/events", {"json": {"events": [text_row(1, 51)]}}, 413, "batch_too_large"),
    (
        "post",
        "/v1/sessions/s/events",
        {"json": {"events": [text_row(1, 40), text_row(41, 11)]}},
        413,
        "batch_too_large",
    ),
    ("post", "/v1/sessions/s/events", {"json": {"events": [text_row(1, 60, dt_entries=0)]}}, 413, "batch_too_large"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [text_row(1, 3, dt_entries=70)]}}, 413, "batch_too_large"),
    ("post", "/v1/sessions/s/events", {"content": b'{"events":[' + b"1," * 60 + b"1]}"}, 413, "batch_too_large"),
    ("post", "/v1/sessions/s/events", {"content": b'{"events":[' + b"0," * 6000 + b"0]}"}, 413, "body_too_large"),
    ("post", "/v1/sessions/s/events", {"json": {"events": [text_row(1, 3000)]}}, 413, "body_too_large"),
    (
        "post",
        "/v1/sessions/s/events",
        {"json": {"events": [{**EVENT, "seq": 1, "data": [0] * 6000}]}},
        413,
        "body_too_large",
    ),
    ("post", "/v1/sessions", {"json": {"id": "v", "createdAt": 0, "meta": {"k": [0] * 6000}}}, 413, "body_too_large"),
    # F3: invalid UTF-8 inside any JSON string.
    ("post", "/v1/sessions/s/events", {"content": EVENTS_UTF8}, 400, "malformed_json"),
    ("post", "/v1/sessions", {"content": HEADER_UTF8}, 400, "malformed_json"),
    (
        "post",
        "/v1/sessions/s/events",
        {"content": gzip.compress(EVENTS_UTF8), "headers": {"Content-Encoding": "gzip"}},
        400,
        "malformed_json",
    ),
    # F5: data nests at most 64 levels.
    (
        "post",
        "/v1/sessions/s/events",
        {"json": {"events": [{**EVENT, "seq": 1, "data": nested(65)}]}},
        422,
        "invalid_event",
    ),
    ("post", "/v1/sessions", {"json": {"id": "d", "createdAt": 0, "meta": {"k": nested(64)}}}, 422, "invalid_header"),
    # F7: one session id rule, on create, on parentSession and on every path parameter.
    ("post", "/v1/sessions", {"json": {"id": "a/b", "createdAt": 0}}, 422, "invalid_session_id"),
    ("post", "/v1/sessions", {"json": {"id": "../escape", "createdAt": 0}}, 422, "invalid_session_id"),
    ("post", "/v1/sessions", {"json": {"id": ".", "createdAt": 0}}, 422, "invalid_session_id"),
    ("post", "/v1/sessions", {"json": {"id": "..", "createdAt": 0}}, 422, "invalid_session_id"),
    ("post", "/v1/sessions", {"json": {"id": "a b", "createdAt": 0}}, 422, "invalid_session_id"),
    ("post", "/v1/sessions", {"json": {"id": "é", "createdAt": 0}}, 422, "invalid_session_id"),
    ("post", "/v1/sessions", {"json": {"id": "x" * 201, "createdAt": 0}}, 422, "invalid_session_id"),
    (
        "post",
        "/v1/sessions",
        {"json": {"id": "c", "createdAt": 0, "parentSession": "s/..", "origin": "subagent"}},
        422,
        "invalid_session_id",
    ),
    ("post", "/v1/sessions/a%20b/events", {"json": {"events": [EVENT]}}, 422, "invalid_session_id"),
    ("get", "/v1/sessions/" + "x" * 201 + "/page", {}, 422, "invalid_session_id"),
    ("get", "/v1/sessions/s/subagents/" + "x" * 201 + "/page", {}, 422, "invalid_session_id"),
    ("get", "/v1/sessions/s/subagents/" + "x" * 201 + "/follow", {}, 422, "invalid_session_id"),
    ("get", "/v1/sessions/%2e/follow", {}, 422, "invalid_session_id"),
    ("get", "/v1/sessions/s/subagents/%2e%2e/page", {}, 422, "invalid_session_id"),
    # F9: a repeated credential header.
    (
        "get",
        "/v1/sessions/s/page",
        {"headers": [("X-Principal", "alice"), ("X-Principal", "bob")]},
        400,
        "duplicate_header",
    ),
    (
        "get",
        "/v1/sessions/s/page",
        {"headers": [("Authorization", "Bearer service-token"), ("Authorization", "Bearer other")]},
        400,
        "duplicate_header",
    ),
    (
        "post",
        "/v1/sessions/s/events",
        {"headers": [("X-Principal", "alice"), ("X-Principal", "alice")], "json": {"events": [{**EVENT, "seq": 1}]}},
        400,
        "duplicate_header",
    ),
    # R8: a principal holding a C0, DEL or C1 control could forge a log line (headers are read as Latin-1).
    *[
        (method, path, {"headers": {"X-Principal": b"mallory" + control + FORGED}, **body}, 400, "invalid_parameter")
        for control in (b"\x85", b"\x00", b"\x0a", b"\x0d", b"\x1b", b"\x1f", b"\x7f", b"\x80", b"\x9f", b"\t")
        for method, path, body in (
            ("get", "/v1/sessions/s/page", {}),
            ("post", "/v1/sessions/s/events", {"json": {"events": [{**EVENT, "seq": 1}]}}),
            ("post", "/v1/sessions", {"json": {"id": "t", "createdAt": 0}}),
        )
    ],
    ("get", "/v1/sessions", {"headers": {"X-Principal": b"\x85" + FORGED}}, 400, "invalid_parameter"),
    # Not trimmed away as whitespace (str.strip() would take U+0085), nor on a follow.
    ("get", "/v1/sessions/s/page", {"headers": {"X-Principal": b"alice\x85"}}, 400, "invalid_parameter"),
    ("get", "/v1/sessions/s/follow", {"headers": {"X-Principal": b"alice\x85bob"}}, 400, "invalid_parameter"),
    # F10: nothing may follow the end of a coding's stream.
    (
        "post",
        "/v1/sessions/s/events",
        {
            "content": gzip.compress(encode({"events": [{**EVENT, "seq": 1}]})) + b"trailing",
            "headers": {"Content-Encoding": "gzip"},
        },
        400,
        "bad_encoding",
    ),
    (
        "post",
        "/v1/sessions/s/events",
        {
            "content": compress(encode({"events": [{**EVENT, "seq": 1}]}), "zstd") + b"trailing",
            "headers": {"Content-Encoding": "zstd"},
        },
        400,
        "bad_encoding",
    ),
    (
        "post",
        "/v1/sessions/s/events",
        {
            "content": compress(encode({"events": [{**EVENT, "seq": 1}]}), "br") + b"trailing",
            "headers": {"Content-Encoding": "br"},
        },
        400,
        "bad_encoding",
    ),
    # F11: only application/json bodies, so no cross-site "simple" POST reaches a handler.
    (
        "post",
        "/v1/sessions/s/events",
        {"content": encode({"events": [{**EVENT, "seq": 1}]}), "headers": {"Content-Type": "text/plain"}},
        415,
        "unsupported_media_type",
    ),
    (
        "post",
        "/v1/sessions/s/events",
        {"data": {"events": "x"}},
        415,
        "unsupported_media_type",
    ),
    (
        "post",
        "/v1/sessions",
        {
            "content": encode({"id": "t", "createdAt": 0}),
            "headers": {"Content-Type": "multipart/form-data; boundary=x"},
        },
        415,
        "unsupported_media_type",
    ),
    (
        "post",
        "/v1/sessions",
        {"content": encode({"id": "t", "createdAt": 0}), "headers": {"Content-Type": ""}},
        415,
        "unsupported_media_type",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "options", "status", "code"), BAD, ids=[f"{b[0]} {b[1][:48]} {b[4]}" for b in BAD]
)
async def test_bad_input_gets_its_4xx_and_changes_nothing(
    api: tuple[httpx.AsyncClient, MemoryStore], method: str, path: str, options: dict[str, Any], status: int, code: str
) -> None:
    client, store = api
    before = await snapshot(store)
    extra = options.pop("headers", {})
    headers: Any = [*{**TOKEN, **JSON}.items(), *extra] if isinstance(extra, list) else {**TOKEN, **JSON, **extra}
    if isinstance(extra, list):
        repeated = {name.lower() for name, _ in extra}
        headers = [(name, value) for name, value in headers if name.lower() not in repeated] + extra
    if "data" in options:
        headers = {name: value for name, value in headers.items() if name != "Content-Type"}
    response = await client.request(method.upper(), path, headers=headers, **options)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert isinstance(response.json()["error"]["message"], str)
    assert await snapshot(store) == before


async def test_conflict_reports_the_head_and_index_of_a_bad_event(api: tuple[httpx.AsyncClient, MemoryStore]) -> None:
    client, _ = api
    response = await client.post("/v1/sessions/s/events", json={"events": [{**EVENT, "seq": 9}]})
    assert response.json()["error"]["headSeq"] == 0
    response = await client.post(
        "/v1/sessions/s/events", json={"events": [{**EVENT, "seq": 1}, {**EVENT, "seq": 2, "time": "x"}]}
    )
    error = response.json()["error"]
    assert error["index"] == 1 and error["message"].startswith("events[1].time: expected `int`")


async def test_compressed_and_packed_appends_are_accepted(api: tuple[httpx.AsyncClient, MemoryStore]) -> None:
    client, store = api
    row = {
        "type": "text-chunks",
        "seq0": 1,
        "time0": 5,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]},
    }
    body = encode({"events": [row, plain(4)]})
    for coding in ("zstd", "br", "gzip"):
        if coding != "zstd":
            body = encode({"events": [plain(5 if coding == "br" else 6)]})
        response = await client.post(
            "/v1/sessions/s/events", content=compress(body, coding), headers={"Content-Encoding": coding, **JSON}
        )
        assert response.status_code == 201, response.text
    assert [e.seq for e in await store.read_events("s", 0, 10)] == list(range(7))
    again = await client.post("/v1/sessions/s/events", content=encode({"events": [plain(6)]}), headers=JSON)
    assert again.status_code == 200 and again.json()["idempotent"] is True


def test_the_seeder_is_absent_without_its_flag() -> None:
    script = """
import anyio, sys, httpx
from history_service.app import create_app
from history_service.settings import Settings
from persistence import MemoryStore
from testing.asgi import serving

async def main():
    async with serving(create_app(Settings.from_env({}), store=MemoryStore())) as client:
        response = await client.post("/v1/test-only/seed", json={"scenario": "multi-turn"})
        assert response.status_code == 404, response.status_code
    assert "history_service.seed" not in sys.modules
    print("absent")

anyio.run(main)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "absent"


def test_the_seeder_loads_with_its_flag() -> None:
    script = "import sys; from history_service.app import create_app; from history_service.settings import Settings;"
    script += (
        "create_app(Settings.from_env({'HISTORY_ENABLE_TEST_SEED': '1'})); print('history_service.seed' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


async def test_invalid_utf8_in_a_seed_body_is_malformed_json() -> None:
    """F3 on the seeder too."""
    async with serving(create_app(Settings(enable_test_seed=True), store=MemoryStore())) as client:
        body = b'{"scenario":"multi-turn","sessionId":"' + INVALID_UTF8 + b'"}'
        response = await client.post("/v1/test-only/seed", content=body, headers=JSON)
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed_json"


# Durable Streams (§13): refusals are plain text, their status the error table's; each names what it refuses.
NINES = "9" * 5000
PRODUCER = {"Producer-Id": "p", "Producer-Epoch": "0", "Producer-Seq": "0"}
FORK = {"Stream-Forked-From": "/v1/stream/t"}
TEXT = {"Content-Type": "text/plain"}
# A header is read as Latin-1: U+00B2, which str.isdigit() accepts and int() refuses.
SUPERSCRIPT = "²".encode("latin-1")


def values(count: int) -> bytes:
    return b"[" + b"{}," * (count - 1) + b"{}]"


DS_BAD: list[Any] = [
    # issue 41 F5: numerals are ASCII digits, at most 16, within the field's range, read before int().
    *[
        ("put", "/ds/v1/stream/new", {**TEXT, "Stream-TTL": ttl}, b"", 400, "Stream-TTL")
        for ttl in (NINES, "9223372036854776", "3153600001", SUPERSCRIPT, "-1", "+60", "0060")
    ],
    *[
        ("post", "/ds/v1/stream/t", {**TEXT, **PRODUCER, header: value}, b"x", 400, header)
        for header in ("Producer-Epoch", "Producer-Seq")
        for value in (NINES, "9007199254740992", SUPERSCRIPT, "-0", "1" * 17)
    ],
    *[
        ("put", "/ds/v1/stream/new", {**FORK, "Stream-Fork-Sub-Offset": sub}, b"", 400, "Stream-Fork-Sub-Offset")
        for sub in (NINES, "9007199254740992", SUPERSCRIPT, "01")
    ],
    # F9: a JSON-mode body's values are counted as every body's are (HISTORY_MAX_BODY_VALUES, here 5,000).
    # values(2_500) counts 5,000: 2,499 commas, 1 array, 2,500 objects.
    ("post", "/ds/v1/stream/j", JSON, values(2_500), 413, "JSON values"),
    ("put", "/ds/v1/stream/new", JSON, values(2_500), 413, "JSON values"),
    ("put", "/ds/v1/stream/new", {"Stream-Forked-From": "/v1/stream/j"}, values(2_500), 413, "JSON values"),
    # F10: the session id rule of §2.4 on every /ds session address.
    *[
        ("get", f"/ds/v1/session/{address}", {}, b"", 422, "not a session id")
        for address in ("%2e%2e", "%2e", "x%00y", "x" * 300, "x" * 201, "s/subagents/%2e%2e", "%2e%2e/subagents/s")
    ],
    ("head", "/ds/v1/session/x%00y", {}, b"", 422, ""),
]


@pytest.fixture
async def ds_api() -> AsyncIterator[tuple[httpx.AsyncClient, MemoryStore]]:
    store = MemoryStore()
    settings = Settings(auth="token", tokens=("service-token",), max_body_values=5_000)
    async with serving(create_app(settings, store=store)) as client:
        client.headers.update(TOKEN)
        assert (await client.post("/v1/sessions", json={"id": "s", "createdAt": 0})).status_code == 201
        assert (await client.put("/ds/v1/stream/t", headers=TEXT, content=b"a")).status_code == 201
        assert (await client.put("/ds/v1/stream/j", headers=JSON, content=b"[1]")).status_code == 201
        yield client, store


async def ds_snapshot(client: httpx.AsyncClient) -> list[Any]:
    reads = [await client.get(f"/ds/v1/stream/{name}") for name in ("t", "j", "new")]
    return [(read.status_code, read.content) for read in reads]


def ds_headers_id(headers: dict[str, Any]) -> str:
    """The headers a row sets beyond the common ones, shortly."""
    common = (TEXT, PRODUCER, FORK, JSON)
    shown = [
        f"{name}={str(value)[:16]}" for name, value in headers.items() if all(c.get(name) != value for c in common)
    ]
    return " ".join(shown)


# At each bound: the largest numeral, the most values and the longest id that are taken.
DS_TAKEN: list[Any] = [
    ("put", "/ds/v1/stream/new", {**TEXT, "Stream-TTL": "3153600000"}, b"", 201, None),
    ("post", "/ds/v1/stream/t", {**TEXT, **PRODUCER, "Producer-Epoch": "9007199254740991"}, b"x", 200, None),
    ("post", "/ds/v1/stream/t", {**TEXT, **PRODUCER, "Producer-Epoch": "0000000000000007"}, b"x", 200, None),
    ("post", "/ds/v1/stream/j", JSON, values(2_499), 204, None),
    ("get", "/ds/v1/session/" + "x" * 200, {}, b"", 404, None),
    ("get", "/v1/sessions/s/page?before=9007199254740991", {}, b"", 200, None),
]
DS_CASES: Final = DS_BAD + DS_TAKEN


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status", "names"),
    DS_CASES,
    ids=[f"{b[0]} {b[1][:40]} {ds_headers_id(b[2])} {b[4]}" for b in DS_CASES],
)
async def test_durable_streams_input_past_a_bound_gets_its_4xx_and_changes_nothing(
    ds_api: tuple[httpx.AsyncClient, MemoryStore],
    method: str,
    path: str,
    headers: dict[str, Any],
    body: bytes,
    status: int,
    names: str | None,
) -> None:
    client, store = ds_api
    before = (await snapshot(store), await ds_snapshot(client))
    response = await client.request(method.upper(), path, headers=headers, content=body)
    assert response.status_code == status, response.text
    if names is not None:
        assert names in response.text
        assert (await snapshot(store), await ds_snapshot(client)) == before

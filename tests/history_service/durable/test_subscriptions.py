"""The reserved subscription API: webhooks signed with the served key set, pull-wake leases, acks and fencing.

The app runs in process with its lifespan, so its deliveries run; webhooks go to a receiver
on 127.0.0.1. Waits are bounded, never measured.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import inspect
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from history_service.app import create_app
from history_service.durable.subscription_bodies import MAX_LINKS
from history_service.settings import Settings
from persistence import MemoryStore
from testing.asgi import serving

pytestmark = pytest.mark.anyio

DS = "http://testserver/ds/v1/stream"
SIGNATURE = re.compile(r"t=(\d+),kid=([^,]+),ed25519=([A-Za-z0-9_-]+)")


class Receiver:
    """A webhook receiver on 127.0.0.1: what it was sent, and what it answers."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.received: list[tuple[bytes, str | None]] = []
        self.hosts: list[str | None] = []
        self.url = ""


@contextlib.contextmanager
def receiver(answer: bytes = b"{}", hold: threading.Event | None = None) -> Iterator[Receiver]:
    """A receiver; with ``hold``, one that answers nothing until it is set (a slow endpoint)."""
    hooks = Receiver(answer)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            hooks.received.append((body, self.headers.get("Webhook-Signature")))
            hooks.hosts.append(self.headers.get("Host"))
            if hold is not None:
                hold.wait(60)
            with contextlib.suppress(ConnectionError):  # a held POST's client may have given up
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(hooks.answer)))
                self.end_headers()
                self.wfile.write(hooks.answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hooks.url = f"http://127.0.0.1:{server.server_address[1]}/webhook"
    try:
        yield hooks
    finally:
        if hold is not None:
            hold.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


async def until(condition: Callable[[], Any], seconds: float = 10) -> Any:
    """What ``condition`` (or the awaitable it returns) gives once it is truthy; fail after ``seconds``."""
    with anyio.fail_after(seconds):
        while True:
            found = condition()
            if inspect.isawaitable(found):
                found = await found
            if found:
                return found
            await anyio.sleep(0.02)


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verified(raw: bytes, signature: str | None, jwks: dict[str, Any]) -> bool:
    match = SIGNATURE.fullmatch(signature or "")
    if match is None:
        return False
    stamp, kid, sig = match.groups()
    keys = [key for key in jwks["keys"] if key["kid"] == kid]
    if not keys:
        return False
    key = Ed25519PublicKey.from_public_bytes(unb64url(keys[0]["x"]))
    try:
        key.verify(unb64url(sig), stamp.encode() + b"." + raw)
    except InvalidSignature:
        return False
    return True


# The receivers listen on loopback, which a webhook reaches only where the server allows it.
LOOPBACK = Settings(ds_webhook_loopback=True)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(LOOPBACK, store=MemoryStore())) as client:
        yield client


@pytest.fixture
async def guarded() -> AsyncIterator[httpx.AsyncClient]:
    """A server with the default egress: no loopback."""
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        yield client


def sub_url(sub_id: str, action: str = "") -> str:
    return f"{DS}/__ds/subscriptions/{sub_id}" + (f"/{action}" if action else "")


async def webhook(client: httpx.AsyncClient, sub_id: str, url: str, **config: Any) -> httpx.Response:
    body = {"type": "webhook", "pattern": "events/*", "webhook": {"url": url}, "lease_ttl_ms": 10_000, **config}
    return await client.put(sub_url(sub_id), json=body)


async def write(client: httpx.AsyncClient, name: str, value: Any) -> None:
    response = await client.post(f"{DS}/{name}", json=value)
    if response.status_code == 404:
        response = await client.put(f"{DS}/{name}", json=value)
    assert response.status_code in (200, 201, 204), response.text


async def test_a_webhook_wake_is_signed_with_a_key_of_the_served_key_set(client):
    with receiver() as hooks:
        created = await webhook(client, "s1", hooks.url, description="mine")
        assert created.status_code == 201
        signing = created.json()["webhook"]["signing"]
        assert signing["alg"] == "ed25519" and signing["jwks_url"] == f"{DS}/__ds/jwks.json"
        jwks_response = await client.get(signing["jwks_url"])
        assert jwks_response.headers["content-type"].startswith("application/jwk-set+json")
        jwks = jwks_response.json()
        assert [(k["kid"], k["kty"], k["crv"], k["alg"]) for k in jwks["keys"]] == [
            (signing["kid"], "OKP", "Ed25519", "EdDSA")
        ]

        await write(client, "events/a", {"n": 1})
        await write(client, "other/b", {"n": 1})
        await until(lambda: hooks.received)
        raw, signature = hooks.received[0]
        assert verified(raw, signature, jwks)
        assert not verified(raw + b" ", signature, jwks)
        wake = msgspec.json.decode(raw)
        assert wake["subscription_id"] == "s1"
        assert wake["callback_url"] == f"{DS}/__ds/subscriptions/s1/callback"
        assert [(s["path"], s["link_type"], s["acked_offset"], s["has_pending"]) for s in wake["streams"]] == [
            ("events/a", "glob", "-1", True)
        ]


async def test_a_second_put_confirms_the_same_subscription_and_refuses_another(client):
    with receiver() as hooks:
        assert (await webhook(client, "s1", hooks.url)).status_code == 201
        again = await webhook(client, "s1", hooks.url)
        assert again.status_code == 200 and again.json()["id"] == "s1"
        other = await webhook(client, "s1", hooks.url, pattern="elsewhere/*")
        assert other.status_code == 409
        assert other.json()["error"]["code"] == "SUBSCRIPTION_ALREADY_EXISTS"
        assert (await client.delete(sub_url("s1"))).status_code == 204
        missing = await client.get(sub_url("s1"))
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "SUBSCRIPTION_NOT_FOUND"


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/hook",
        "http://example.com/hook",
        "https://192.168.1.5/hook",
        "https://169.254.169.254/latest",
        "https://172.16.0.1/hook",
        "https://100.64.0.1/hook",
        "https://224.0.0.1/hook",
        "https://0.0.0.0/hook",
        "https://[::]/hook",
        "https://[fe80::1]/hook",
        "https://[fc00::1]/hook",
        "https://[::ffff:10.0.0.1]/hook",
        "https://[2002:a00:1::]/hook",
        "https://[64:ff9b::a00:1]/hook",
        "https://0177.0.0.1/hook",
        "ftp://example.com/hook",
        "not a url",
    ],
)
async def test_an_unsafe_webhook_url_is_rejected(client, url):
    response = await webhook(client, "s1", url)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "WEBHOOK_URL_REJECTED"
    assert (await client.get(sub_url("s1"))).status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://127.1:9/hook",
        "https://2130706433/hook",
        "https://0x7f.1/hook",
        "https://127.255.0.9/hook",
        "https://[::1]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://[::ffff:7f00:1]/hook",
        "http://LOCALHOST:9/hook",
        "https://localhost./hook",
        "https://api.localhost/hook",
    ],
)
async def test_a_webhook_to_this_host_in_any_spelling_is_rejected_unless_loopback_is_allowed(guarded, client, url):
    response = await webhook(guarded, "s1", url)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "WEBHOOK_URL_REJECTED"
    assert (await guarded.get(sub_url("s1"))).status_code == 404
    assert (await webhook(client, "s1", url)).status_code == 201


@pytest.mark.parametrize("url", ["https://user@127.0.0.1/hook", "https://a:b@example.com/hook"])
async def test_a_webhook_url_with_userinfo_is_rejected(client, url):
    response = await webhook(client, "s1", url)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "WEBHOOK_URL_REJECTED"


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook", "http://localhost:9/hook", "https://example.com/hook"])
async def test_a_local_http_or_public_https_webhook_url_is_accepted(client, url):
    assert (await webhook(client, "s1", url)).status_code == 201


async def test_webhooks_turned_off_refuse_a_webhook_and_keep_pull_wake():
    async with serving(create_app(Settings(ds_webhooks=False), store=MemoryStore())) as client:
        response = await webhook(client, "s1", "https://example.com/hook")
        assert response.status_code == 400
        assert "HISTORY_DS_WEBHOOKS" in response.json()["error"]["message"]
        pull = {"type": "pull-wake", "pattern": "events/*", "wake_stream": "wakes"}
        assert (await client.put(sub_url("s2"), json=pull)).status_code == 201


async def test_a_webhook_host_allow_list_refuses_every_other_host():
    settings = Settings(ds_webhook_hosts=("hooks.example.com",))
    async with serving(create_app(settings, store=MemoryStore())) as client:
        assert (await webhook(client, "s1", "https://HOOKS.example.com./in")).status_code == 201
        refused = await webhook(client, "s2", "https://other.example.com/in")
        assert refused.status_code == 400
        assert "HISTORY_DS_WEBHOOK_HOSTS" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"type": "webhook", "pattern": "events/*"},
        {"type": "pull-wake", "pattern": "events/*"},
        {"type": "pull-wake", "wake_stream": "w"},
        {"type": "other", "pattern": "events/*", "wake_stream": "w"},
        {"type": "pull-wake", "pattern": "events/*", "wake_stream": "w", "lease_ttl_ms": 10},
        {"type": "pull-wake", "streams": [f"s/{n}" for n in range(MAX_LINKS + 1)], "wake_stream": "w"},
        {"type": "pull-wake", "streams": ["__ds/jwks.json"], "wake_stream": "w"},
    ],
    ids=["no-webhook", "no-wake-stream", "nothing-linked", "unknown-type", "short-lease", "too-many", "reserved"],
)
async def test_an_invalid_subscription_is_refused(client, body):
    response = await client.put(sub_url("s1"), json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "INVALID_REQUEST"


async def test_a_webhook_answering_done_acks_the_wake_snapshot(client):
    with receiver(b'{"done": true}') as hooks:
        await webhook(client, "s1", hooks.url)
        await write(client, "events/a", {"n": 1})
        raw, _ = await until(lambda: hooks.received and hooks.received[0])
        tail = msgspec.json.decode(raw)["streams"][0]["tail_offset"]

        async def acked() -> bool:
            streams: list[dict[str, str]] = (await client.get(sub_url("s1"))).json()["streams"]
            return streams == [{"path": "events/a", "link_type": "glob", "acked_offset": tail}]

        await until(acked)


async def test_a_callback_acks_then_fences_its_closed_wake(client):
    with receiver() as hooks:
        await webhook(client, "s1", hooks.url)
        await write(client, "events/a", {"n": 1})
        raw, _ = await until(lambda: hooks.received and hooks.received[0])
        wake = msgspec.json.decode(raw)
        tail = wake["streams"][0]["tail_offset"]
        auth = {"Authorization": f"Bearer {wake['callback_token']}"}
        ack = {"wake_id": wake["wake_id"], "generation": wake["generation"], "acks": []}

        forged = await client.post(
            wake["callback_url"], json={**ack, "done": True}, headers={"Authorization": "Bearer x.y"}
        )
        assert forged.status_code == 401 and forged.json()["error"]["code"] == "TOKEN_INVALID"
        bare = await client.post(wake["callback_url"], json=ack)
        assert bare.status_code == 401
        beyond = {**ack, "acks": [{"stream": "events/a", "offset": "0000000000000000_0000000000009999"}]}
        refused = await client.post(wake["callback_url"], json=beyond, headers=auth)
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "INVALID_OFFSET"
        unknown = {**ack, "acks": [{"stream": "events/zz", "offset": tail}]}
        assert (await client.post(wake["callback_url"], json=unknown, headers=auth)).status_code == 409
        old_wake = {**ack, "acks": [], "wake_id": "w_other"}
        stale = await client.post(wake["callback_url"], json=old_wake, headers=auth)
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "FENCED"

        done = {**ack, "acks": [{"stream": "events/a", "offset": tail}], "done": True}
        answered = await client.post(wake["callback_url"], json=done, headers=auth)
        assert answered.status_code == 200 and answered.json() == {"ok": True, "next_wake": False}
        again = await client.post(wake["callback_url"], json=done, headers=auth)
        assert again.status_code == 409 and again.json()["error"]["code"] == "FENCED"
        streams = (await client.get(sub_url("s1"))).json()["streams"]
        assert streams[0]["acked_offset"] == tail

        await write(client, "events/a", {"n": 2})
        raw, _ = await until(lambda: len(hooks.received) > 1 and hooks.received[1])
        assert msgspec.json.decode(raw)["generation"] == wake["generation"] + 1


async def test_explicit_streams_are_added_and_removed(client):
    with receiver() as hooks:
        created = await client.put(
            sub_url("s1"), json={"type": "webhook", "streams": ["manual/a"], "webhook": {"url": hooks.url}}
        )
        assert created.status_code == 201
        assert (
            await client.post(sub_url("s1", "streams"), json={"streams": ["manual/b", "manual/c"]})
        ).status_code == 204
        assert (await client.delete(sub_url("s1", "streams/manual/b"))).status_code == 204
        streams = (await client.get(sub_url("s1"))).json()["streams"]
        assert sorted(s["path"] for s in streams) == ["manual/a", "manual/c"]
        assert {s["link_type"] for s in streams} == {"explicit"}
        assert (await client.post(sub_url("nope", "streams"), json={"streams": ["x"]})).status_code == 404

        # An explicit stream that exists is linked at its tail: its past is not pending.
        await write(client, "manual/d", {"n": 1})
        await client.post(sub_url("s1", "streams"), json={"streams": ["manual/d"]})
        streams = (await client.get(sub_url("s1"))).json()["streams"]
        tail = (await client.head(f"{DS}/manual/d")).headers["Stream-Next-Offset"]
        assert [s["acked_offset"] for s in streams if s["path"] == "manual/d"] == [tail]

        await write(client, "manual/d", {"n": 2})
        raw, _ = await until(lambda: hooks.received and hooks.received[0])
        assert [s["path"] for s in msgspec.json.decode(raw)["streams"] if s["has_pending"]] == ["manual/d"]

        await client.delete(f"{DS}/manual/d")
        streams = (await client.get(sub_url("s1"))).json()["streams"]
        assert "manual/d" not in [s["path"] for s in streams]


@pytest.mark.parametrize(
    ("pattern", "linked"),
    [
        ("events/*", ["events/*", "events/a"]),
        ("events/**", ["events", "events/*", "events/a", "events/a/b"]),
        ("**/b", ["events/a/b"]),
        ("*/a", ["events/a", "other/a"]),
        ("events/%2A", ["events/*"]),
    ],
)
async def test_a_pattern_links_the_streams_it_matches_as_they_are_written(client, pattern, linked):
    await client.put(f"{DS}/wake/pool", json=[])
    body = {"type": "pull-wake", "pattern": pattern, "wake_stream": "wake/pool"}
    assert (await client.put(sub_url("s1"), json=body)).status_code == 201
    for name in ["events", "events/a", "events/a/b", "other/a", "events/*"]:
        await write(client, name, {"n": 1})
    streams = (await client.get(sub_url("s1"))).json()["streams"]
    assert sorted(s["path"] for s in streams) == linked
    assert {(s["link_type"], s["acked_offset"]) for s in streams} == {("glob", "-1")}


async def test_a_subscription_links_a_bounded_number_of_streams(client):
    await client.put(f"{DS}/wake/pool", json=[])
    names = [f"manual/{n}" for n in range(MAX_LINKS)]
    body = {"type": "pull-wake", "streams": names, "wake_stream": "wake/pool", "pattern": "events/*"}
    assert (await client.put(sub_url("s1"), json=body)).status_code == 201
    over = await client.post(sub_url("s1", "streams"), json={"streams": ["manual/one-more"]})
    assert over.status_code == 409 and over.json()["error"]["code"] == "LIMIT_EXCEEDED"
    await write(client, "events/a", {"n": 1})
    streams = (await client.get(sub_url("s1"))).json()["streams"]
    assert len(streams) == MAX_LINKS and "events/a" not in [s["path"] for s in streams]


async def pull_wake(client: httpx.AsyncClient, lease_ms: int = 10_000) -> None:
    assert (await client.put(f"{DS}/wake/pool", json=[])).status_code == 201
    body = {"type": "pull-wake", "pattern": "events/*", "wake_stream": "wake/pool", "lease_ttl_ms": lease_ms}
    assert (await client.put(sub_url("p1"), json=body)).status_code == 201


async def wake_events(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = (await client.get(f"{DS}/wake/pool", params={"offset": "-1"})).json()
    return events


async def test_pull_wake_claim_ack_and_release_hold_one_worker_at_a_time(client):
    await pull_wake(client)
    assert (await client.post(sub_url("p1", "claim"), json={"worker": "w1"})).json()["error"]["code"] == (
        "NO_PENDING_WORK"
    )
    await write(client, "events/a", {"n": 1})
    events = await until(lambda: wake_events(client))
    assert [(e["type"], e["subscription_id"], e["stream"], e["generation"]) for e in events] == [
        ("wake", "p1", "events/a", 1)
    ]

    claim = await client.post(sub_url("p1", "claim"), json={"worker": "w1"})
    assert claim.status_code == 200
    claimed = claim.json()
    assert claimed["wake_id"].startswith("w_") and (claimed["generation"], claimed["lease_ttl_ms"]) == (1, 10_000)
    busy = await client.post(sub_url("p1", "claim"), json={"worker": "w2"})
    error = busy.json()["error"]
    assert busy.status_code == 409
    assert (error["code"], error["current_holder"], error["generation"]) == ("ALREADY_CLAIMED", "w1", 1)

    auth = {"Authorization": f"Bearer {claimed['token']}"}
    tail = claimed["streams"][0]["tail_offset"]
    done = {
        "wake_id": claimed["wake_id"],
        "generation": claimed["generation"],
        "acks": [{"stream": "events/a", "offset": tail}],
        "done": True,
    }
    acked = await client.post(sub_url("p1", "ack"), json=done, headers=auth)
    assert acked.status_code == 200 and acked.json() == {"ok": True, "next_wake": False}
    assert (await client.post(sub_url("p1", "ack"), json=done, headers=auth)).json()["error"]["code"] == "FENCED"

    await write(client, "events/a", {"n": 2})
    second = (await client.post(sub_url("p1", "claim"), json={"worker": "w2"})).json()
    assert second["generation"] == claimed["generation"] + 1
    release = {"wake_id": second["wake_id"], "generation": second["generation"]}
    second_auth = {"Authorization": f"Bearer {second['token']}"}
    assert (await client.post(sub_url("p1", "release"), json=release, headers=second_auth)).status_code == 204
    # Released with work still pending: the next wake opens at once, and the old token is fenced.
    again = await client.post(sub_url("p1", "release"), json=release, headers=second_auth)
    assert again.status_code == 409 and again.json()["error"]["code"] == "FENCED"
    third = (await client.post(sub_url("p1", "claim"), json={"worker": "w3"})).json()
    assert third["generation"] == second["generation"] + 1


async def test_a_lease_that_runs_out_lets_another_worker_claim_and_fences_the_first(client):
    await pull_wake(client, lease_ms=1_000)
    await write(client, "events/a", {"n": 1})
    await until(lambda: wake_events(client))
    first = (await client.post(sub_url("p1", "claim"), json={"worker": "w1"})).json()

    async def claimed_by_w2() -> dict[str, Any] | None:
        response = await client.post(sub_url("p1", "claim"), json={"worker": "w2"})
        return response.json() if response.status_code == 200 else None

    second = await until(claimed_by_w2)
    assert second["generation"] > first["generation"]
    late = {"wake_id": first["wake_id"], "generation": first["generation"], "done": True}
    refused = await client.post(sub_url("p1", "ack"), json=late, headers={"Authorization": f"Bearer {first['token']}"})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "FENCED"


async def test_a_token_of_one_subscription_is_invalid_for_another(client):
    await pull_wake(client)
    body = {"type": "pull-wake", "pattern": "events/*", "wake_stream": "wake/pool"}
    assert (await client.put(sub_url("p2"), json=body)).status_code == 201
    await write(client, "events/a", {"n": 1})
    await until(lambda: wake_events(client))
    claimed = (await client.post(sub_url("p1", "claim"), json={"worker": "w1"})).json()
    crossed = await client.post(
        sub_url("p2", "ack"),
        json={"wake_id": claimed["wake_id"], "generation": claimed["generation"]},
        headers={"Authorization": f"Bearer {claimed['token']}"},
    )
    assert crossed.status_code == 401 and crossed.json()["error"]["code"] == "TOKEN_INVALID"


async def test_subscriptions_belong_to_their_principal():
    settings = Settings(auth="token", tokens=("t",), ds_webhook_loopback=True)

    def who(principal: str) -> dict[str, str]:
        return {"Authorization": "Bearer t", "X-Principal": principal}

    async with serving(create_app(settings, store=MemoryStore())) as client:
        body = {"type": "webhook", "pattern": "events/*", "webhook": {"url": "http://127.0.0.1:9/hook"}}
        assert (await client.put(sub_url("s1"), json=body, headers=who("alice"))).status_code == 201
        assert (await client.get(sub_url("s1"), headers=who("bob"))).status_code == 404
        assert (await client.put(sub_url("s1"), json={**body, "pattern": "x/*"}, headers=who("bob"))).status_code == 201
        assert (await client.get(sub_url("s1"), headers=who("alice"))).json()["pattern"] == "events/*"


async def test_an_unknown_control_route_or_method_is_refused(client):
    missing = await client.get(f"{DS}/__ds/elsewhere")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "SUBSCRIPTION_NOT_FOUND"
    assert (await client.post(f"{DS}/__ds/jwks.json")).status_code == 405
    assert (await client.get(sub_url("s1", "claim"))).status_code == 405
    bad_json = await client.put(sub_url("s1"), content=b"{", headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "INVALID_REQUEST"


async def test_in_token_mode_a_wake_is_acked_by_its_token_alone():
    # The protocol puts the wake's token where the API's credentials go: the worker holding it
    # needs no service token to ack or release, and a token of no wake of ours gets nothing.
    settings = Settings(auth="token", tokens=("t",), ds_webhook_loopback=True)
    alice = {"Authorization": "Bearer t", "X-Principal": "alice"}
    async with serving(create_app(settings, store=MemoryStore())) as client:
        assert (await client.put(f"{DS}/wake/pool", json=[], headers=alice)).status_code == 201
        body = {"type": "pull-wake", "pattern": "events/*", "wake_stream": "wake/pool"}
        assert (await client.put(sub_url("p1"), json=body, headers=alice)).status_code == 201
        assert (await client.put(f"{DS}/events/a", json={"n": 1}, headers=alice)).status_code == 201

        async def claimed() -> dict[str, Any] | None:
            response = await client.post(sub_url("p1", "claim"), json={"worker": "w1"}, headers=alice)
            return response.json() if response.status_code == 200 else None

        wake = await until(claimed)
        done = {"wake_id": wake["wake_id"], "generation": wake["generation"], "done": True}
        forged = await client.post(sub_url("p1", "ack"), json=done, headers={"Authorization": "Bearer t"})
        assert forged.status_code == 401
        acked = await client.post(sub_url("p1", "ack"), json=done, headers={"Authorization": f"Bearer {wake['token']}"})
        assert acked.status_code == 200 and acked.json()["ok"] is True
        # Everything else still needs the API's credentials.
        assert (await client.post(sub_url("p1", "claim"), json={"worker": "w1"})).status_code == 401


def principal(name: str) -> dict[str, str]:
    return {"Authorization": "Bearer t", "X-Principal": name}


async def test_one_owners_slow_endpoints_do_not_hold_back_anothers_webhook():
    """Every delivery slot hangs on alice's endpoint, for her long lease; bob's wake still goes out meanwhile."""
    settings = Settings(auth="token", tokens=("t",), ds_webhook_loopback=True)
    hold = threading.Event()
    with receiver(hold=hold) as slow, receiver() as fast:
        async with serving(create_app(settings, store=MemoryStore())) as client:
            alice, bob = principal("alice"), principal("bob")
            for n in range(16):
                body = {"type": "webhook", "pattern": "events/*", "webhook": {"url": slow.url}, "lease_ttl_ms": 600_000}
                assert (await client.put(sub_url(f"a{n}"), json=body, headers=alice)).status_code == 201
            assert (await client.put(f"{DS}/events/a", json={"n": 1}, headers=alice)).status_code == 201
            await until(lambda: len(slow.received) >= 2)
            body = {"type": "webhook", "pattern": "events/*", "webhook": {"url": fast.url}, "lease_ttl_ms": 600_000}
            assert (await client.put(sub_url("b"), json=body, headers=bob)).status_code == 201
            assert (await client.put(f"{DS}/events/b", json={"n": 1}, headers=bob)).status_code == 201
            # Alice's endpoint answers nothing (each attempt waits out the client's 10 s, three times);
            # bob's POST arrives while hers still hang.
            await until(lambda: fast.received, 15)
            assert not hold.is_set()


async def test_a_delivery_that_cannot_be_queued_is_warned_of_once_a_window(caplog):
    settings = Settings(auth="token", tokens=("t",), ds_webhook_loopback=True)
    hold = threading.Event()
    with receiver(hold=hold) as slow:
        async with serving(create_app(settings, store=MemoryStore())) as client:
            alice = principal("alice")
            for n in range(64):
                body = {"type": "webhook", "pattern": "events/*", "webhook": {"url": slow.url}, "lease_ttl_ms": 1_000}
                assert (await client.put(sub_url(f"a{n}"), json=body, headers=alice)).status_code == 201
            with caplog.at_level(logging.WARNING, logger="history_service.durable"):
                assert (await client.put(f"{DS}/events/a", json={"n": 1}, headers=alice)).status_code == 201

                def unqueued() -> list[logging.LogRecord]:
                    return [r for r in caplog.records if "could not be queued" in r.getMessage()]

                await until(unqueued, 15)
                # Each lease (1 s) reopens 64 wakes that find no room: three more rounds of them.
                await anyio.sleep(3)
                assert len(unqueued()) == 1


async def test_a_subscription_survives_a_restart_with_its_acks_keys_and_generation(tmp_path):
    settings = Settings(store_url=f"sqlite:///{tmp_path / 'ds.db'}", ds_webhook_loopback=True)
    with receiver(b'{"done": true}') as hooks:
        async with serving(create_app(settings)) as client:
            assert (await webhook(client, "s1", hooks.url)).status_code == 201
            await write(client, "events/a", {"n": 1})
            first = msgspec.json.decode((await until(lambda: hooks.received and hooks.received[0]))[0])
            tail = first["streams"][0]["tail_offset"]

            async def acked() -> bool:
                streams = (await client.get(sub_url("s1"))).json()["streams"]
                return [s["acked_offset"] for s in streams] == [tail]

            await until(acked)
            jwks = (await client.get(f"{DS}/__ds/jwks.json")).json()

        async with serving(create_app(settings)) as client:
            again = await client.get(sub_url("s1"))
            assert again.status_code == 200, again.text
            assert [(s["path"], s["acked_offset"]) for s in again.json()["streams"]] == [("events/a", tail)]
            assert (await client.get(f"{DS}/__ds/jwks.json")).json() == jwks
            await write(client, "events/a", {"n": 2})
            raw, signature = await until(lambda: len(hooks.received) > 1 and hooks.received[1])
            second = msgspec.json.decode(raw)
            assert second["generation"] == first["generation"] + 1
            assert verified(raw, signature, jwks)


async def test_a_pull_wake_claimed_before_a_restart_is_acked_after_it(tmp_path):
    settings = Settings(store_url=f"sqlite:///{tmp_path / 'ds.db'}")
    async with serving(create_app(settings)) as client:
        await pull_wake(client)
        await write(client, "events/a", {"n": 1})
        await until(lambda: wake_events(client))
        claimed = (await client.post(sub_url("p1", "claim"), json={"worker": "w1"})).json()
    async with serving(create_app(settings)) as client:
        held = await client.post(sub_url("p1", "claim"), json={"worker": "w2"})
        assert held.status_code == 409 and held.json()["error"]["code"] == "ALREADY_CLAIMED"
        acks = [{"stream": s["path"], "offset": s["tail_offset"]} for s in claimed["streams"]]
        done = {"wake_id": claimed["wake_id"], "generation": claimed["generation"], "acks": acks, "done": True}
        auth = {"Authorization": f"Bearer {claimed['token']}"}
        acked = await client.post(sub_url("p1", "ack"), json=done, headers=auth)
        assert acked.status_code == 200 and acked.json() == {"ok": True, "next_wake": False}


async def test_two_apps_on_one_store_serve_one_subscription_and_one_wake():
    """Two processes of a store, without notices: each reads the subscription, its wake and its keys from the store."""
    store = MemoryStore()
    async with serving(create_app(Settings(), store=store)) as a, serving(create_app(Settings(), store=store)) as b:
        await pull_wake(a)
        assert (await b.get(sub_url("p1"))).status_code == 200
        await write(b, "events/a", {"n": 1})
        claimed = await b.post(sub_url("p1", "claim"), json={"worker": "w1"})
        assert claimed.status_code == 200, claimed.text
        wake = claimed.json()
        held = await a.post(sub_url("p1", "claim"), json={"worker": "w2"})
        assert held.status_code == 409 and held.json()["error"]["code"] == "ALREADY_CLAIMED"
        acks = [{"stream": s["path"], "offset": s["tail_offset"]} for s in wake["streams"]]
        done = {"wake_id": wake["wake_id"], "generation": wake["generation"], "acks": acks, "done": True}
        acked = await a.post(sub_url("p1", "ack"), json=done, headers={"Authorization": f"Bearer {wake['token']}"})
        assert acked.status_code == 200 and acked.json() == {"ok": True, "next_wake": False}
        assert (await a.get(f"{DS}/__ds/jwks.json")).json() == (await b.get(f"{DS}/__ds/jwks.json")).json()


async def test_a_lease_taken_through_a_process_that_stopped_runs_out_in_another():
    store = MemoryStore()
    async with serving(create_app(Settings(), store=store)) as b:
        async with serving(create_app(Settings(), store=store)) as a:
            await pull_wake(a, lease_ms=1_000)
            await write(a, "events/a", {"n": 1})
            first = (await a.post(sub_url("p1", "claim"), json={"worker": "w1"})).json()

        async def claimed_by_w2() -> dict[str, Any] | None:
            response = await b.post(sub_url("p1", "claim"), json={"worker": "w2"})
            return response.json() if response.status_code == 200 else None

        second = await until(claimed_by_w2)
        assert second["generation"] > first["generation"]

"""Where a webhook may connect: every resolved address checked, the connection pinned to it, the Host kept.

A fake resolver stands in for DNS, so a public-looking name can resolve to loopback; the
receiver listens on 127.0.0.1. Waits are bounded, never measured.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given, strategies as st

from history_service.app import create_app
from history_service.durable.egress import Egress
from history_service.settings import Settings
from persistence import MemoryStore
from testing.asgi import serving
from tests.history_service.durable.test_subscriptions import receiver, sub_url, until, webhook, write

pytestmark = pytest.mark.anyio

TIMEOUT = httpx.Timeout(10.0)


def resolving(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> list[str]:
    """Make every name resolve to ``addresses``; the names asked for are returned as they are asked."""
    asked: list[str] = []

    async def getaddrinfo(host: str, port: int, **_: Any) -> list[Any]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in addresses]

    # The egress module calls `anyio.getaddrinfo`; anyio's own connect_tcp does not.
    monkeypatch.setattr(anyio, "getaddrinfo", getaddrinfo)
    return asked


def port_of(url: str) -> int:
    return httpx.URL(url).port or 0


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.1"])
async def test_a_connection_to_loopback_is_refused_after_resolution(host):
    with receiver() as hooks:
        async with Egress().client(timeout=TIMEOUT, max_connections=1) as http:
            with pytest.raises(httpx.ConnectError, match="loopback"):
                await http.post(f"http://{host}:{port_of(hooks.url)}/webhook", content=b"{}")
        assert hooks.received == []


async def test_a_name_is_refused_when_any_of_its_addresses_is_not_public(monkeypatch):
    resolving(monkeypatch, "93.184.216.34", "127.0.0.1")
    async with Egress(loopback=True).client(timeout=TIMEOUT, max_connections=1) as http:
        with pytest.raises(httpx.ConnectError):
            await http.post("https://hook.example/webhook", content=b"{}")
    resolving(monkeypatch, "10.1.2.3")
    async with Egress().client(timeout=TIMEOUT, max_connections=1) as http:
        with pytest.raises(httpx.ConnectError, match="private"):
            await http.post("https://hook.example/webhook", content=b"{}")


async def test_a_connection_goes_to_the_checked_address_with_the_urls_host(monkeypatch):
    with receiver() as hooks:
        asked = resolving(monkeypatch, "127.0.0.1")
        port = port_of(hooks.url)
        async with Egress(loopback=True).client(timeout=TIMEOUT, max_connections=1) as http:
            response = await http.post(f"http://hook.test:{port}/webhook", content=b"{}")
        # "hook.test" resolves nowhere but in the fake: the POST arrived, so it went to the address checked.
        assert response.status_code == 200
        assert asked == ["hook.test"]
        assert len(hooks.received) == 1
        assert hooks.hosts == [f"hook.test:{port}"]


async def test_a_webhook_whose_name_resolves_to_loopback_is_never_posted_and_reads_as_any_failure(monkeypatch):
    """The status oracle: a listening loopback port and a closed one read alike, and neither is reached."""
    resolving(monkeypatch, "127.0.0.1")
    with receiver() as hooks:
        async with serving(create_app(Settings(), store=MemoryStore())) as client:
            listening = await webhook(client, "s1", f"https://hook.test:{port_of(hooks.url)}/webhook")
            closed = await webhook(client, "s2", "https://hook.test:9/webhook")
            assert (listening.status_code, closed.status_code) == (201, 201)
            await write(client, "events/a", {"n": 1})

            async def statuses() -> tuple[str, str] | None:
                found = [(await client.get(sub_url(sub))).json()["status"] for sub in ("s1", "s2")]
                return None if "active" in found else (found[0], found[1])

            assert await until(statuses, 30) == ("failed", "failed")
        assert hooks.received == []


@given(st.integers(0, 2**32 - 1), st.booleans())
def test_an_ipv4_address_is_refused_alike_in_each_ipv6_spelling(number: int, loopback: bool) -> None:
    policy = Egress(loopback=loopback)
    v4 = ipaddress.IPv4Address(number)
    allowed = policy.refused(v4) is None
    for spelled in (
        ipaddress.IPv6Address(f"::ffff:{v4}"),
        ipaddress.IPv6Address((0x2002 << 112) | (number << 80)),
        ipaddress.IPv6Address(f"64:ff9b::{v4}"),
    ):
        assert (policy.refused(spelled) is None) == allowed, spelled

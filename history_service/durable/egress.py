"""Where a webhook may go: the URL rule when a subscription is made, and the address check when a POST connects.

A webhook reaches only public addresses. Its URL is checked when the subscription is made
(https, no userinfo, the allow-list ``HISTORY_DS_WEBHOOK_HOSTS`` when one is set, and no host
spelled as a refused address in any of the resolver's spellings: ``127.1``, ``2130706433``,
``0x7f.1``, ``[::ffff:127.0.0.1]``, ``LOCALHOST``). That check is only early advice: the one
that counts runs when a delivery connects. `Egress.client`'s connections resolve the host
themselves, refuse it when any of its addresses is loopback, private, link-local, CGNAT,
multicast, unspecified or reserved (an IPv4 address inside IPv6 is checked as itself), and
connect to the checked address. The connection is pinned to it, so a name that resolves
again to another address (DNS rebinding) cannot move it; the Host header and the TLS server
name stay the URL's host. Loopback, over plain http too, is only for a server that allows it
(``HISTORY_DS_WEBHOOK_LOOPBACK=1``, for tests and development).
"""

from __future__ import annotations

import ipaddress
import socket
import typing
from typing import Final

import anyio
import httpcore
import httpx
from msgspec import Struct

from history_service.settings import Settings

__all__ = ["Egress", "RefusedAddress"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_MAX_URL: Final = 2048
# Not covered by ``is_private`` on every Python: shared address space (RFC 6598) and NAT64 (RFC 6052).
_CGNAT: Final = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_LOCAL_NAMES: Final = ("localhost", "localhost.localdomain")


class RefusedAddress(httpcore.ConnectError):
    """A webhook's host resolved to an address it may not reach."""


def _address(host: str) -> Address | None:
    """``host`` as the resolver reads an address literal, or None when it names a host."""
    try:
        return ipaddress.ip_address(host.strip("[]").partition("%")[0])
    except ValueError:
        try:
            # The resolver reads "2130706433", "0x7f.1" and "127.1" as addresses too.
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None


def _embedded(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64), else ``address`` itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def _loopback(host: str) -> bool:
    name = host.lower().rstrip(".")
    if name in _LOCAL_NAMES or name.endswith(".localhost"):
        return True
    address = _address(name)
    return address is not None and _embedded(address).is_loopback


class Egress(Struct, frozen=True, kw_only=True):
    """The webhook policy of `Settings`: whether webhooks are on, the hosts they may reach, and loopback."""

    enabled: bool = True
    hosts: frozenset[str] = frozenset()
    loopback: bool = False

    @classmethod
    def of(cls, settings: Settings) -> Egress:
        hosts = frozenset(host.lower().rstrip(".") for host in settings.ds_webhook_hosts)
        return cls(enabled=settings.ds_webhooks, hosts=hosts, loopback=settings.ds_webhook_loopback)

    def refused(self, address: Address) -> str | None:
        """Why a webhook may not connect to ``address``, or None when it may."""
        inner = _embedded(address)
        if inner.is_loopback:
            return None if self.loopback else "a loopback address"
        for why, refused in (
            ("an unspecified address", inner.is_unspecified),
            ("a multicast address", inner.is_multicast),
            ("a link-local address", inner.is_link_local),
            ("a shared (CGNAT) address", isinstance(inner, ipaddress.IPv4Address) and inner in _CGNAT),
            ("a private address", inner.is_private),
            ("a reserved address", inner.is_reserved),
            ("a non-public address", not inner.is_global),
        ):
            if refused:
                return why
        return None

    def rejected(self, url: str) -> str | None:
        """Why ``url`` may not be a webhook's, or None when it may, so far as its spelling tells."""
        if not self.enabled:
            return "webhooks are turned off on this server (HISTORY_DS_WEBHOOKS=0)"
        if len(url) > _MAX_URL:
            return f"webhook.url is longer than {_MAX_URL} characters"
        try:
            # httpx's own reading of the URL: the one the POST will go to.
            parsed = httpx.URL(url)
            scheme, host, port = parsed.scheme, parsed.host.lower().rstrip("."), parsed.port
        except (httpx.InvalidURL, ValueError):
            return "webhook.url must be a valid URL"
        if not host or (port is not None and not 0 < port < 65536):
            return "webhook.url must be a valid URL"
        if parsed.userinfo:
            return "webhook.url must not carry a user name or password"
        if self.hosts and host not in self.hosts:
            return "webhook.url's host is not one this server may notify (HISTORY_DS_WEBHOOK_HOSTS)"
        if _loopback(host):
            if not self.loopback:
                return "webhook.url must not target this host (loopback)"
            return None if scheme in ("http", "https") else "webhook.url must use https"
        if scheme != "https":
            return "webhook.url must use https"
        address = _address(host)
        if address is not None and (why := self.refused(address)) is not None:
            return f"webhook.url must not target {why}"
        return None

    def client(self, *, timeout: httpx.Timeout, max_connections: int) -> httpx.AsyncClient:
        """A client whose every connection goes to an address this policy allows, pinned as it was checked."""
        transport = httpx.AsyncHTTPTransport(trust_env=False, limits=httpx.Limits(max_connections=max_connections))
        # httpx's transport takes no network backend: its pool, made again with ours, is what it sends through.
        transport._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=max_connections,
            network_backend=_Checked(self),
        )
        # No redirects (one could lead past the URL rule), no proxies from the environment.
        return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False)


class _Checked(httpcore.AsyncNetworkBackend):
    """Connections that resolve their host once, refuse it unless every address is allowed, and dial the first."""

    def __init__(self, egress: Egress) -> None:
        self._egress = egress
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        addresses = [ipaddress.ip_address(str(sockaddr[0]).partition("%")[0]) for *_, sockaddr in found]
        if not addresses:
            raise httpcore.ConnectError(f"{host!r} has no address")
        for address in addresses:
            if (why := self._egress.refused(address)) is not None:
                raise RefusedAddress(f"{host!r} resolves to {why}")
        return await self._backend.connect_tcp(str(addresses[0]), port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise RefusedAddress("a webhook never connects to a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)

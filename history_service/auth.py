"""Who is calling (docs/protocol.md §8): ``none`` is the one principal ``local``; ``token`` trusts the gateway.

With ``token``, the gateway sends ``Authorization: Bearer <service token>``, compared in
constant time against every configured token, and ``X-Principal: <user id>``.
"""

from __future__ import annotations

import hmac
from typing import Final

from starlette.requests import Request

from history_service.control import has_control
from history_service.errors import DuplicateHeader, InvalidParameter, Unauthenticated
from history_service.settings import Settings
from persistence import DEFAULT_OWNER

__all__ = ["check_service_token", "principal"]

_MAX_PRINCIPAL: Final = 256
# C0, DEL and C1 (a header's bytes are read as Latin-1): a principal holding one could forge a log line.


def _single(request: Request, name: str) -> str:
    values = request.headers.getlist(name)
    if len(values) > 1:
        # Proxies disagree on which of two values wins; refusing is the only reading all agree on.
        raise DuplicateHeader(f"the request carries {len(values)} {name} headers; send one")
    return values[0] if values else ""


def check_service_token(request: Request, settings: Settings) -> None:
    """In token mode, refuse a request without a valid service token: `Unauthenticated` (`DuplicateHeader` for two)."""
    if settings.auth == "none":
        return
    scheme, _, token = _single(request, "Authorization").partition(" ")
    presented = token.strip().encode()
    # Compare against every token so the time does not depend on which one matched.
    matched = False
    for candidate in settings.tokens:
        matched |= hmac.compare_digest(presented, candidate.encode())
    if scheme.lower() != "bearer" or not matched:
        raise Unauthenticated("missing or invalid service token")


def principal(request: Request, settings: Settings) -> str:
    """The caller's principal, or `Unauthenticated` (`DuplicateHeader` for a repeated credential header).

    A principal holding a control character is refused as `InvalidParameter`; the spaces
    and tabs around it are not part of it.

    The principal is left in ``request.state`` too, for the request's access log line.
    """
    if settings.auth == "none":
        request.state.principal = DEFAULT_OWNER
        return DEFAULT_OWNER
    check_service_token(request, settings)
    given = _single(request, "X-Principal")
    if has_control(given.strip(" \t")):
        raise InvalidParameter("X-Principal holds a control character")
    who = given.strip()
    if not who or len(who) > _MAX_PRINCIPAL:
        raise Unauthenticated("missing or invalid X-Principal")
    request.state.principal = who
    return who

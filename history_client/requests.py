"""The requests both clients send and how they read the answers: addresses, parameters, headers, errors.

Nothing here does I/O, so the sync and the async client build every request, and map every
answer, the same way.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx

from codec import CodecError, check_session_id, decode_json, event_id, parse_event_id
from history_client.errors import ClientError, ProtocolError, ServiceError, TransportError, describe
from history_client.incarnations import deleted_error

__all__ = [
    "Requests",
    "answer_error",
    "auth_headers",
    "check_event_stream",
    "named_incarnation",
    "service_error",
    "wrap_transport",
]


class Requests:
    """Everything about a request that does not depend on sync or async I/O."""

    def __init__(self, *, max_messages: int | None, max_bytes: int | None) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes

    @staticmethod
    def address(session: str, child: str | None = None) -> str:
        """The address of a session (or a child of it); an id the service could never accept is a `SessionIdError`."""
        check_session_id(session)
        if child is not None:
            check_session_id(child, where="child id")
        base = f"/v1/sessions/{quote(session, safe='')}"
        if child is not None:
            base += f"/subagents/{quote(child, safe='')}"
        return base

    @staticmethod
    def path(session: str, child: str | None, leaf: str) -> str:
        return f"{Requests.address(session, child)}/{leaf}"

    def page_params(
        self,
        *,
        through: int | None,
        before: int | None,
        max_messages: int | None,
        max_bytes: int | None,
        incarnation: str | None = None,
    ) -> dict[str, int | str]:
        params = {
            "through": through,
            "before": before,
            "maxMessages": max_messages if max_messages is not None else self.max_messages,
            "maxBytes": max_bytes if max_bytes is not None else self.max_bytes,
            "incarnation": incarnation,
        }
        return {name: value for name, value in params.items() if value is not None}

    @staticmethod
    def follow_params(
        after: int | None, incarnation: str | None, max_messages: int | None, *, packed: bool = False
    ) -> dict[str, int | str]:
        params: dict[str, int | str] = {"maxMessages": max_messages} if max_messages is not None else {}
        if packed:
            params["packed"] = 1
        if after is None and incarnation is not None:
            # A fresh open of a known incarnation; a resume names it in Last-Event-ID instead (§5.2).
            params["incarnation"] = incarnation
        return params

    @staticmethod
    def follow_headers(after: int | None, incarnation: str | None) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if after is not None:
            # The SSE id of the last delivered event (§5.1); bare while the incarnation is unknown.
            headers["Last-Event-ID"] = str(after) if incarnation is None else event_id(incarnation, after).decode()
        return headers


def auth_headers(token: str | None, principal: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if principal is not None:
        headers["X-Principal"] = principal
    return headers


def service_error(response: httpx.Response) -> ServiceError:
    """The `ServiceError` for a non-2xx response whose body has been read."""
    status = response.status_code
    code, message = f"http_{status}", response.reason_phrase or "error"
    try:
        body = decode_json(response.content)
    except CodecError:
        body = None
    error = body.get("error") if type(body) is dict else None
    if type(error) is dict and type(error.get("code")) is str:
        code = error["code"]
        message = str(error.get("message", message))
    return ServiceError(message, status_code=status, code=code, response=response)


def answer_error(response: httpx.Response) -> ClientError:
    """The error for a non-2xx answer to a read whose body has been read.

    A 404 ``session_not_found`` to a request that named an incarnation (as ``incarnation`` or
    in ``Last-Event-ID``) means that session is gone (§2.5): `SessionDeletedError`.
    """
    error = service_error(response)
    return deleted_error(error, named_incarnation(response.request)) or error


def named_incarnation(request: httpx.Request) -> str | None:
    """The incarnation a read names: its ``incarnation`` parameter, or its ``Last-Event-ID``'s."""
    named: str | None = request.url.params.get("incarnation")
    if named:
        return named
    last = request.headers.get("Last-Event-ID")
    parsed = parse_event_id(last) if last else None
    return None if parsed is None else parsed[0]


def check_event_stream(response: httpx.Response) -> None:
    kind = response.headers.get("content-type", "").partition(";")[0].strip()
    if kind != "text/event-stream":
        raise ProtocolError(f"follow answered with {kind or 'no content type'}, not text/event-stream")


def wrap_transport(exc: httpx.TransportError) -> TransportError:
    return TransportError(describe(exc))

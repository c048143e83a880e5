"""`AsyncHistoryClient` and `HistoryClient`: thin I/O shells around the shared plans.

Both clients build the same requests, map the same error bodies, and drive the same
sans-I/O plans (`history_client.history`, `history_client.follow`), so every
continuity rule is written once. A client closes only an ``httpx`` client it created.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Final, Self
from urllib.parse import quote

import httpx

from codec import CodecError, Event, SessionHeader, check_session_id, decode_json, encode
from history_client.errors import ClientError, ProtocolError, ServiceError, TransportError, describe
from history_client.follow import (
    Backoff,
    Connect,
    ConnectionHook,
    Disconnected,
    FollowPlan,
    NextFrame,
    Sleep,
    follow_plan,
)
from history_client.history import Emit, Fetch, Plan, history_plan, pages_plan
from history_client.pages import HistoryPage, read_page
from history_client.sse import ServerSentEvent, SSEDecoder

__all__ = ["AsyncHistoryClient", "HistoryClient"]

DEFAULT_TIMEOUT: Final = 10.0
# A healthy stream carries a ping every 15 s; three missed pings mean the connection is dead.
FOLLOW_READ_TIMEOUT: Final = 45.0


class _Requests:
    """Everything about a request that does not depend on sync or async I/O."""

    def __init__(self, *, max_messages: int | None, max_bytes: int | None) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes

    @staticmethod
    def path(session: str, child: str | None, leaf: str) -> str:
        """The address of a session (or a child of it); an id the service could never accept is a `SessionIdError`."""
        check_session_id(session)
        if child is not None:
            check_session_id(child, where="child id")
        base = f"/v1/sessions/{quote(session, safe='')}"
        if child is not None:
            base += f"/subagents/{quote(child, safe='')}"
        return f"{base}/{leaf}"

    def page_params(
        self, *, through: int | None, before: int | None, max_messages: int | None, max_bytes: int | None
    ) -> dict[str, int]:
        params = {
            "through": through,
            "before": before,
            "maxMessages": max_messages if max_messages is not None else self.max_messages,
            "maxBytes": max_bytes if max_bytes is not None else self.max_bytes,
        }
        return {name: value for name, value in params.items() if value is not None}

    @staticmethod
    def follow_headers(after: int | None) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if after is not None:
            headers["Last-Event-ID"] = str(after)
        return headers


def _headers(token: str | None, principal: str | None) -> dict[str, str]:
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


def _json_body(response: httpx.Response) -> Any:
    if not response.is_success:
        raise service_error(response)
    try:
        return decode_json(response.content)
    except CodecError as exc:
        raise ProtocolError(f"{response.request.url.path}: {exc}") from exc


def _event_stream(response: httpx.Response) -> None:
    kind = response.headers.get("content-type", "").partition(";")[0].strip()
    if kind != "text/event-stream":
        raise ProtocolError(f"follow answered with {kind or 'no content type'}, not text/event-stream")


def _step(plan: Plan | FollowPlan, reply: Any = None, error: BaseException | None = None) -> Any:
    """Advance a plan; ``None`` when it has finished."""
    try:
        return plan.throw(error) if error is not None else plan.send(reply)
    except StopIteration:
        return None


def _wrap_transport(exc: httpx.TransportError) -> TransportError:
    return TransportError(describe(exc))


class _Shared:
    """State and request building that both clients share."""

    def __init__(
        self,
        *,
        token: str | None,
        principal: str | None,
        owns_client: bool,
        timeout: float,
        follow_read_timeout: float,
        max_messages: int | None,
        max_bytes: int | None,
        backoff: Backoff | None,
    ) -> None:
        self._owns_client = owns_client
        self._headers = _headers(token, principal)
        self._requests = _Requests(max_messages=max_messages, max_bytes=max_bytes)
        self._follow_timeout = httpx.Timeout(timeout, read=follow_read_timeout)
        self.backoff = backoff or Backoff()

    def _follow_request(
        self,
        http: httpx.Client | httpx.AsyncClient,
        session: str,
        child: str | None,
        after: int | None,
        max_messages: int | None,
    ) -> httpx.Request:
        params = {"maxMessages": max_messages} if max_messages is not None else {}
        return http.build_request(
            "GET",
            _Requests.path(session, child, "follow"),
            params=params,
            headers={**self._headers, **_Requests.follow_headers(after)},
            timeout=self._follow_timeout,
        )

    def _fetch_params(self, action: Fetch) -> dict[str, int]:
        return self._requests.page_params(
            through=action.through, before=action.before, max_messages=None, max_bytes=None
        )


class AsyncHistoryClient(_Shared):
    """The asynchronous client.

    Parameters:
        base_url: the service, e.g. ``http://127.0.0.1:8000``.
        token, principal: sent as ``Authorization: Bearer`` and ``X-Principal`` when set.
        transport: any ``httpx.AsyncBaseTransport``, e.g. ``httpx.MockTransport`` in tests.
        http_client: an existing ``httpx.AsyncClient`` to use instead; it is not closed here.
        timeout: seconds for connect, write and page reads.
        follow_read_timeout: seconds a follow stream may stay silent before it reconnects.
        max_messages, max_bytes: defaults for every page request.
        backoff: the reconnect policy of `follow`.
    """

    def __init__(
        self,
        base_url: str = "",
        *,
        token: str | None = None,
        principal: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        follow_read_timeout: float = FOLLOW_READ_TIMEOUT,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        super().__init__(
            token=token,
            principal=principal,
            owns_client=http_client is None,
            timeout=timeout,
            follow_read_timeout=follow_read_timeout,
            max_messages=max_messages,
            max_bytes=max_bytes,
            backoff=backoff,
        )
        self._http = http_client or httpx.AsyncClient(base_url=base_url, transport=transport, timeout=timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._http.aclose()

    async def _get(self, path: str, params: Mapping[str, int]) -> httpx.Response:
        try:
            response = await self._http.get(path, params=params, headers=self._headers)
        except httpx.TransportError as exc:
            raise _wrap_transport(exc) from exc
        if not response.is_success:
            raise service_error(response)
        return response

    async def _post(self, path: str, body: bytes) -> Any:
        headers = {**self._headers, "Content-Type": "application/json"}
        try:
            response = await self._http.post(path, content=body, headers=headers)
        except httpx.TransportError as exc:
            raise _wrap_transport(exc) from exc
        return _json_body(response)

    async def create_session(self, header: SessionHeader) -> Any:
        """Create a session from its header (docs/protocol.md §6.1); returns ``{"id": ..., "headSeq": -1}``.

        A subagent child is created the same way, with ``parentSession`` naming a session the
        caller owns and ``origin="subagent"``. Raises `ServiceError` with ``code``
        ``session_exists`` (even for the same header), ``invalid_header``,
        ``invalid_session_id`` or ``invalid_parent``; `TransportError` when the service
        cannot be reached.
        """
        return await self._post("/v1/sessions", encode(header))

    async def append(self, session: str, events: Sequence[Event]) -> Any:
        """Append one atomic batch to a session, or a subagent child, by its own id (§6.2).

        The batch must continue the head: its first ``seq`` is ``headSeq + 1`` and the seqs
        run without gaps. Delta ``assistant/chunk`` events (``data`` a `DeltaData`) are packed
        into chunk rows by the service. Returns ``{"firstSeq", "headSeq"}``; the exact batch
        sent again is a no-op that adds ``"idempotent": True``, so a batch whose answer was
        lost can be re-sent. Raises `ServiceError` with ``code`` ``seq_conflict`` (its
        ``response`` body holds the ``headSeq`` to continue from), ``invalid_batch``,
        ``invalid_event``, ``batch_too_large`` or ``session_not_found``.
        """
        return await self._post(_Requests.path(session, None, "events"), encode({"events": events}))

    async def close_session(self, session: str) -> Any:
        """Close a session, or a subagent child, by its own id (§6.3); returns ``{"headSeq", "closedAt"}``.

        Idempotent: a closed session answers the same. Its follow streams end after its last
        event, and a later append raises `ServiceError` with ``code`` ``session_closed``.
        """
        return await self._post(_Requests.path(session, None, "close"), b"")

    async def page_body(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        before: int | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        """The raw JSON body of a page, decompressed but not decoded (see `iter_body_events`)."""
        params = self._requests.page_params(
            through=through, before=before, max_messages=max_messages, max_bytes=max_bytes
        )
        return (await self._get(_Requests.path(session, child, "page"), params)).content

    async def page(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        before: int | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
    ) -> HistoryPage:
        """One validated page. Its records cover exactly ``[from_seq, to_seq)`` and it ends at the cursor asked for."""
        body = await self.page_body(
            session, child=child, through=through, before=before, max_messages=max_messages, max_bytes=max_bytes
        )
        return read_page(body, through=through, before=before)

    def iter_pages(
        self, session: str, *, child: str | None = None, through: int | None = None, after: int = -1
    ) -> AsyncIterator[HistoryPage]:
        """Validated pages, newest first, back to the one holding ``after + 1``; each joins the last."""
        return self._drive(pages_plan(through=through, after=after), session, child)

    def iter_history(
        self, session: str, *, child: str | None = None, after: int = -1, through: int | None = None
    ) -> AsyncIterator[Event]:
        """The exact events with ``after < seq <= through`` (default: to the head), in seq order.

        Pages back from ``through``, keeping each page's body on disk, never decoded as a
        whole, and replays them oldest first one row at a time (see `history_plan`).
        """
        return self._drive(history_plan(through=through, after=after), session, child)

    def follow(
        self,
        session: str,
        *,
        child: str | None = None,
        after: int | None = None,
        max_messages: int | None = None,
        on_connection: ConnectionHook | None = None,
    ) -> AsyncIterator[Event]:
        """Every event after ``after`` (or from a fresh snapshot's tail page), exactly once, in order, live.

        Reconnects with ``Last-Event-ID`` on any break, as ``backoff`` says; repairs gaps from
        pages. It ends when the session is closed (after its last event), when the caller
        stops iterating, or when an error that retrying cannot fix is raised.
        ``on_connection`` hears each failure that will be retried (`Retrying`) and each
        stream that opens again after failures (`Reconnected`).
        """
        plan = follow_plan(after=after, backoff=self.backoff, on_connection=on_connection)
        return self._drive(plan, session, child, max_messages=max_messages)

    async def _drive(
        self, plan: Plan | FollowPlan, session: str, child: str | None, *, max_messages: int | None = None
    ) -> AsyncIterator[Any]:
        stream: _AsyncFrames | None = None
        page_path = _Requests.path(session, child, "page")
        try:
            action = _step(plan)
            while action is not None:
                reply: Any = None
                try:
                    if type(action) is Emit:
                        for value in action.values:
                            yield value
                    elif type(action) is Fetch:
                        reply = (await self._get(page_path, self._fetch_params(action))).content
                    elif type(action) is NextFrame:
                        assert stream is not None
                        reply = await stream.next()
                    elif type(action) is Connect:
                        if stream is not None:
                            await stream.aclose()
                            stream = None
                        stream = await self._open_stream(session, child, action.after, max_messages)
                    elif type(action) is Sleep:
                        await asyncio.sleep(action.seconds)
                except (httpx.TransportError, ClientError, Disconnected) as exc:
                    action = _step(plan, error=exc)
                    continue
                action = _step(plan, reply)
        finally:
            plan.close()
            if stream is not None:
                await stream.aclose()

    async def _open_stream(
        self, session: str, child: str | None, after: int | None, max_messages: int | None
    ) -> _AsyncFrames:
        request = self._follow_request(self._http, session, child, after, max_messages)
        response = await self._http.send(request, stream=True)
        if not response.is_success:
            await response.aread()
            await response.aclose()
            raise service_error(response)
        _event_stream(response)
        return _AsyncFrames(response)


class HistoryClient(_Shared):
    """The synchronous client: the same methods, parameters and errors as `AsyncHistoryClient`."""

    def __init__(
        self,
        base_url: str = "",
        *,
        token: str | None = None,
        principal: str | None = None,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        follow_read_timeout: float = FOLLOW_READ_TIMEOUT,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        super().__init__(
            token=token,
            principal=principal,
            owns_client=http_client is None,
            timeout=timeout,
            follow_read_timeout=follow_read_timeout,
            max_messages=max_messages,
            max_bytes=max_bytes,
            backoff=backoff,
        )
        self._http = http_client or httpx.Client(base_url=base_url, transport=transport, timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_client:
            self._http.close()

    def _get(self, path: str, params: Mapping[str, int]) -> httpx.Response:
        try:
            response = self._http.get(path, params=params, headers=self._headers)
        except httpx.TransportError as exc:
            raise _wrap_transport(exc) from exc
        if not response.is_success:
            raise service_error(response)
        return response

    def _post(self, path: str, body: bytes) -> Any:
        headers = {**self._headers, "Content-Type": "application/json"}
        try:
            response = self._http.post(path, content=body, headers=headers)
        except httpx.TransportError as exc:
            raise _wrap_transport(exc) from exc
        return _json_body(response)

    def create_session(self, header: SessionHeader) -> Any:
        """Create a session from its header; as `AsyncHistoryClient.create_session`."""
        return self._post("/v1/sessions", encode(header))

    def append(self, session: str, events: Sequence[Event]) -> Any:
        """Append one atomic batch that continues the head; as `AsyncHistoryClient.append`."""
        return self._post(_Requests.path(session, None, "events"), encode({"events": events}))

    def close_session(self, session: str) -> Any:
        """Close a session by its own id; as `AsyncHistoryClient.close_session`."""
        return self._post(_Requests.path(session, None, "close"), b"")

    def page_body(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        before: int | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        params = self._requests.page_params(
            through=through, before=before, max_messages=max_messages, max_bytes=max_bytes
        )
        return self._get(_Requests.path(session, child, "page"), params).content

    def page(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        before: int | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
    ) -> HistoryPage:
        body = self.page_body(
            session, child=child, through=through, before=before, max_messages=max_messages, max_bytes=max_bytes
        )
        return read_page(body, through=through, before=before)

    def iter_pages(
        self, session: str, *, child: str | None = None, through: int | None = None, after: int = -1
    ) -> Iterator[HistoryPage]:
        return self._drive(pages_plan(through=through, after=after), session, child)

    def iter_history(
        self, session: str, *, child: str | None = None, after: int = -1, through: int | None = None
    ) -> Iterator[Event]:
        return self._drive(history_plan(through=through, after=after), session, child)

    def follow(
        self,
        session: str,
        *,
        child: str | None = None,
        after: int | None = None,
        max_messages: int | None = None,
        on_connection: ConnectionHook | None = None,
    ) -> Iterator[Event]:
        plan = follow_plan(after=after, backoff=self.backoff, on_connection=on_connection)
        return self._drive(plan, session, child, max_messages=max_messages)

    def _drive(
        self, plan: Plan | FollowPlan, session: str, child: str | None, *, max_messages: int | None = None
    ) -> Iterator[Any]:
        stream: _SyncFrames | None = None
        page_path = _Requests.path(session, child, "page")
        try:
            action = _step(plan)
            while action is not None:
                reply: Any = None
                try:
                    if type(action) is Emit:
                        yield from action.values
                    elif type(action) is Fetch:
                        reply = self._get(page_path, self._fetch_params(action)).content
                    elif type(action) is NextFrame:
                        assert stream is not None
                        reply = stream.next()
                    elif type(action) is Connect:
                        if stream is not None:
                            stream.close()
                            stream = None
                        stream = self._open_stream(session, child, action.after, max_messages)
                    elif type(action) is Sleep:
                        time.sleep(action.seconds)
                except (httpx.TransportError, ClientError, Disconnected) as exc:
                    action = _step(plan, error=exc)
                    continue
                action = _step(plan, reply)
        finally:
            plan.close()
            if stream is not None:
                stream.close()

    def _open_stream(self, session: str, child: str | None, after: int | None, max_messages: int | None) -> _SyncFrames:
        request = self._follow_request(self._http, session, child, after, max_messages)
        response = self._http.send(request, stream=True)
        if not response.is_success:
            response.read()
            response.close()
            raise service_error(response)
        _event_stream(response)
        return _SyncFrames(response)


class _AsyncFrames:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks = response.aiter_bytes()
        self._decoder = SSEDecoder()
        self._ready: deque[ServerSentEvent] = deque()

    async def next(self) -> ServerSentEvent | None:
        while not self._ready:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                return None
            self._ready.extend(self._decoder.feed(chunk))
        return self._ready.popleft()

    async def aclose(self) -> None:
        await self._response.aclose()


class _SyncFrames:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks = response.iter_bytes()
        self._decoder = SSEDecoder()
        self._ready: deque[ServerSentEvent] = deque()

    def next(self) -> ServerSentEvent | None:
        while not self._ready:
            chunk = next(self._chunks, None)
            if chunk is None:
                return None
            self._ready.extend(self._decoder.feed(chunk))
        return self._ready.popleft()

    def close(self) -> None:
        self._response.close()

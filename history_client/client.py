"""`AsyncHistoryClient` and `HistoryClient`: thin I/O shells around the shared plans.

Both clients build the same requests and map the same error bodies (`history_client.requests`),
and drive the same sans-I/O plans (`history_client.history`, `history_client.follow`), so
every continuity rule is written once. A client closes only an ``httpx`` client it created.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Final, Self

import httpx

from codec import Event, SessionHeader, encode
from history_client.errors import ClientError
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
from history_client.frames import AsyncFrames, SyncFrames
from history_client.history import Emit, Fetch, PageAnswer, Plan, history_plan, pages_plan
from history_client.incarnations import INCARNATION_HEADER, Pin
from history_client.pages import HistoryPage, read_page
from history_client.requests import (
    Requests,
    answer_error,
    auth_headers,
    check_event_stream,
    json_body,
    service_error,
    wrap_transport,
)

__all__ = ["AsyncHistoryClient", "HistoryClient"]

DEFAULT_TIMEOUT: Final = 10.0
# A healthy stream carries a ping every 15 s; three missed pings mean the connection is dead.
FOLLOW_READ_TIMEOUT: Final = 45.0


def _step(plan: Plan | FollowPlan, reply: Any = None, error: BaseException | None = None) -> Any:
    """Advance a plan; ``None`` when it has finished."""
    try:
        return plan.throw(error) if error is not None else plan.send(reply)
    except StopIteration:
        return None


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
        self._headers = auth_headers(token, principal)
        self._requests = Requests(max_messages=max_messages, max_bytes=max_bytes)
        self._follow_timeout = httpx.Timeout(timeout, read=follow_read_timeout)
        self.backoff = backoff or Backoff()

    def _follow_request(
        self,
        http: httpx.Client | httpx.AsyncClient,
        session: str,
        child: str | None,
        action: Connect,
        max_messages: int | None,
    ) -> httpx.Request:
        return http.build_request(
            "GET",
            Requests.path(session, child, "follow"),
            params=Requests.follow_params(action.after, action.incarnation, max_messages),
            headers={**self._headers, **Requests.follow_headers(action.after, action.incarnation)},
            timeout=self._follow_timeout,
        )

    def _fetch_params(self, action: Fetch) -> dict[str, int | str]:
        return self._requests.page_params(
            through=action.through,
            before=action.before,
            max_messages=None,
            max_bytes=None,
            incarnation=action.incarnation,
        )

    @staticmethod
    def _answer(response: httpx.Response) -> PageAnswer:
        return PageAnswer(response.content, response.headers.get(INCARNATION_HEADER))

    @staticmethod
    def _read_page(
        response: httpx.Response, *, through: int | None, before: int | None, incarnation: str | None
    ) -> HistoryPage:
        pin = Pin(incarnation)
        pin.learn(response.headers.get(INCARNATION_HEADER), "the page")
        return read_page(response.content, through=through, before=before, incarnation=pin.incarnation)


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

    async def _get(self, path: str, params: Mapping[str, int | str]) -> httpx.Response:
        try:
            response = await self._http.get(path, params=params, headers=self._headers)
        except httpx.TransportError as exc:
            raise wrap_transport(exc) from exc
        if not response.is_success:
            raise answer_error(response)
        return response

    async def _post(self, path: str, body: bytes) -> Any:
        headers = {**self._headers, "Content-Type": "application/json"}
        try:
            response = await self._http.post(path, content=body, headers=headers)
        except httpx.TransportError as exc:
            raise wrap_transport(exc) from exc
        return json_body(response)

    async def _delete(self, path: str) -> None:
        try:
            response = await self._http.delete(path, headers=self._headers)
        except httpx.TransportError as exc:
            raise wrap_transport(exc) from exc
        if not response.is_success:
            raise service_error(response)

    async def create_session(self, header: SessionHeader) -> Any:
        """Create a session from its header (docs/protocol.md §6.1).

        Returns ``{"id", "headSeq": -1, "incarnation"}``: the new session's incarnation (§2.5).

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
        return await self._post(Requests.path(session, None, "events"), encode({"events": events}))

    async def close_session(self, session: str) -> Any:
        """Close a session, or a subagent child, by its own id (§6.3); returns ``{"headSeq", "closedAt"}``.

        Idempotent: a closed session answers the same. Its follow streams end after its last
        event, and a later append raises `ServiceError` with ``code`` ``session_closed``.
        """
        return await self._post(Requests.path(session, None, "close"), b"")

    async def delete_session(self, session: str) -> None:
        """Delete a session and its whole subagent tree, by the session's own id (§6.4).

        Durable when it returns. Its followers end with `SessionDeletedError`, and the id may
        be created again, as a new incarnation (§2.5). Raises `ServiceError` with ``code``
        ``session_not_found`` for an unknown id (a deleted one too) or another principal's.
        """
        await self._delete(Requests.address(session))

    async def page_body(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        before: int | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        incarnation: str | None = None,
    ) -> bytes:
        """The raw JSON body of a page, decompressed but not decoded (see `iter_body_events`)."""
        params = self._requests.page_params(
            through=through, before=before, max_messages=max_messages, max_bytes=max_bytes, incarnation=incarnation
        )
        return (await self._get(Requests.path(session, child, "page"), params)).content

    async def page(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        before: int | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        incarnation: str | None = None,
    ) -> HistoryPage:
        """One validated page. Its records cover exactly ``[from_seq, to_seq)`` and it ends at the cursor asked for.

        Its ``incarnation`` is the one the service named (§2.5). Given ``incarnation``, the page
        must be of it: once that session is deleted, `SessionDeletedError` is raised.
        """
        params = self._requests.page_params(
            through=through, before=before, max_messages=max_messages, max_bytes=max_bytes, incarnation=incarnation
        )
        response = await self._get(Requests.path(session, child, "page"), params)
        return self._read_page(response, through=through, before=before, incarnation=incarnation)

    def iter_pages(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        after: int = -1,
        incarnation: str | None = None,
    ) -> AsyncIterator[HistoryPage]:
        """Validated pages, newest first, back to the one holding ``after + 1``; each joins the last.

        Every page is of one incarnation: ``incarnation``, or the first page's. If the session is
        deleted meanwhile (and perhaps created again), `SessionDeletedError` is raised.
        """
        return self._drive(pages_plan(through=through, after=after, incarnation=incarnation), session, child)

    def iter_history(
        self,
        session: str,
        *,
        child: str | None = None,
        after: int = -1,
        through: int | None = None,
        incarnation: str | None = None,
    ) -> AsyncIterator[Event]:
        """The exact events with ``after < seq <= through`` (default: to the head), in seq order.

        Pages back from ``through``, keeping each page's body on disk, never decoded as a
        whole, and replays them oldest first one row at a time (see `history_plan`). The pages
        are of one incarnation, as in `iter_pages`.
        """
        return self._drive(history_plan(through=through, after=after, incarnation=incarnation), session, child)

    def follow(
        self,
        session: str,
        *,
        child: str | None = None,
        after: int | None = None,
        max_messages: int | None = None,
        on_connection: ConnectionHook | None = None,
        incarnation: str | None = None,
    ) -> AsyncIterator[Event]:
        """Every event after ``after`` (or from a fresh snapshot's tail page), exactly once, in order, live.

        Reconnects with ``Last-Event-ID: <incarnation>:<seq>`` on any break, as ``backoff``
        says; repairs gaps from pages. It ends when the session is closed (after its last
        event), when the caller stops iterating, or when an error that retrying cannot fix is
        raised: `SessionDeletedError` once the session is deleted, without reconnecting.
        ``on_connection`` hears each failure that will be retried (`Retrying`) and each
        stream that opens again after failures (`Reconnected`).

        The follow is of one incarnation (§2.5): ``incarnation`` (say a page's, to follow on
        from it), or the one its first frame names. Without it, a resume with ``after`` that
        is cut before any event arrives reconnects to whichever session then holds the id.
        """
        plan = follow_plan(after=after, backoff=self.backoff, on_connection=on_connection, incarnation=incarnation)
        return self._drive(plan, session, child, max_messages=max_messages)

    async def _drive(
        self, plan: Plan | FollowPlan, session: str, child: str | None, *, max_messages: int | None = None
    ) -> AsyncIterator[Any]:
        stream: AsyncFrames | None = None
        page_path = Requests.path(session, child, "page")
        try:
            action = _step(plan)
            while action is not None:
                reply: Any = None
                try:
                    if type(action) is Emit:
                        for value in action.values:
                            yield value
                    elif type(action) is Fetch:
                        reply = self._answer(await self._get(page_path, self._fetch_params(action)))
                    elif type(action) is NextFrame:
                        assert stream is not None
                        reply = await stream.next()
                    elif type(action) is Connect:
                        if stream is not None:
                            await stream.aclose()
                            stream = None
                        stream = await self._open_stream(session, child, action, max_messages)
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
        self, session: str, child: str | None, action: Connect, max_messages: int | None
    ) -> AsyncFrames:
        request = self._follow_request(self._http, session, child, action, max_messages)
        response = await self._http.send(request, stream=True)
        if not response.is_success:
            await response.aread()
            await response.aclose()
            raise answer_error(response)
        check_event_stream(response)
        return AsyncFrames(response)


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

    def _get(self, path: str, params: Mapping[str, int | str]) -> httpx.Response:
        try:
            response = self._http.get(path, params=params, headers=self._headers)
        except httpx.TransportError as exc:
            raise wrap_transport(exc) from exc
        if not response.is_success:
            raise answer_error(response)
        return response

    def _post(self, path: str, body: bytes) -> Any:
        headers = {**self._headers, "Content-Type": "application/json"}
        try:
            response = self._http.post(path, content=body, headers=headers)
        except httpx.TransportError as exc:
            raise wrap_transport(exc) from exc
        return json_body(response)

    def _delete(self, path: str) -> None:
        try:
            response = self._http.delete(path, headers=self._headers)
        except httpx.TransportError as exc:
            raise wrap_transport(exc) from exc
        if not response.is_success:
            raise service_error(response)

    def create_session(self, header: SessionHeader) -> Any:
        """Create a session from its header; as `AsyncHistoryClient.create_session`."""
        return self._post("/v1/sessions", encode(header))

    def append(self, session: str, events: Sequence[Event]) -> Any:
        """Append one atomic batch that continues the head; as `AsyncHistoryClient.append`."""
        return self._post(Requests.path(session, None, "events"), encode({"events": events}))

    def close_session(self, session: str) -> Any:
        """Close a session by its own id; as `AsyncHistoryClient.close_session`."""
        return self._post(Requests.path(session, None, "close"), b"")

    def delete_session(self, session: str) -> None:
        """Delete a session and its subagent tree by its own id; as `AsyncHistoryClient.delete_session`."""
        self._delete(Requests.address(session))

    def page_body(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        before: int | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        incarnation: str | None = None,
    ) -> bytes:
        params = self._requests.page_params(
            through=through, before=before, max_messages=max_messages, max_bytes=max_bytes, incarnation=incarnation
        )
        return self._get(Requests.path(session, child, "page"), params).content

    def page(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        before: int | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        incarnation: str | None = None,
    ) -> HistoryPage:
        params = self._requests.page_params(
            through=through, before=before, max_messages=max_messages, max_bytes=max_bytes, incarnation=incarnation
        )
        response = self._get(Requests.path(session, child, "page"), params)
        return self._read_page(response, through=through, before=before, incarnation=incarnation)

    def iter_pages(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        after: int = -1,
        incarnation: str | None = None,
    ) -> Iterator[HistoryPage]:
        return self._drive(pages_plan(through=through, after=after, incarnation=incarnation), session, child)

    def iter_history(
        self,
        session: str,
        *,
        child: str | None = None,
        after: int = -1,
        through: int | None = None,
        incarnation: str | None = None,
    ) -> Iterator[Event]:
        return self._drive(history_plan(through=through, after=after, incarnation=incarnation), session, child)

    def follow(
        self,
        session: str,
        *,
        child: str | None = None,
        after: int | None = None,
        max_messages: int | None = None,
        on_connection: ConnectionHook | None = None,
        incarnation: str | None = None,
    ) -> Iterator[Event]:
        plan = follow_plan(after=after, backoff=self.backoff, on_connection=on_connection, incarnation=incarnation)
        return self._drive(plan, session, child, max_messages=max_messages)

    def _drive(
        self, plan: Plan | FollowPlan, session: str, child: str | None, *, max_messages: int | None = None
    ) -> Iterator[Any]:
        stream: SyncFrames | None = None
        page_path = Requests.path(session, child, "page")
        try:
            action = _step(plan)
            while action is not None:
                reply: Any = None
                try:
                    if type(action) is Emit:
                        yield from action.values
                    elif type(action) is Fetch:
                        reply = self._answer(self._get(page_path, self._fetch_params(action)))
                    elif type(action) is NextFrame:
                        assert stream is not None
                        reply = stream.next()
                    elif type(action) is Connect:
                        if stream is not None:
                            stream.close()
                            stream = None
                        stream = self._open_stream(session, child, action, max_messages)
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

    def _open_stream(self, session: str, child: str | None, action: Connect, max_messages: int | None) -> SyncFrames:
        request = self._follow_request(self._http, session, child, action, max_messages)
        response = self._http.send(request, stream=True)
        if not response.is_success:
            response.read()
            response.close()
            raise answer_error(response)
        check_event_stream(response)
        return SyncFrames(response)

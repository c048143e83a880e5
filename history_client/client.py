"""`AsyncHistoryClient` and `HistoryClient`: two thin transports generated from the same plans.

Every operation is written once in `history_client.calls`, as a `Call` (one request and how
to read its answer) or a `Walk` (a paging or follow plan). Each client method runs that plan
with the client's own ``httpx`` client, awaiting or blocking, so the requests, the error
mapping and every continuity rule exist once. A client closes only an ``httpx`` client it
created.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import MethodType
from typing import Any, Concatenate, Final, Generic, ParamSpec, Self, TypeVar, overload

import httpx

from history_client.calls import Call, Calls, Walk
from history_client.errors import ClientError
from history_client.follow import Backoff, Connect, Disconnected, FollowPlan, NextFrame, ReadHead, Sleep
from history_client.frames import AsyncFrames, SyncFrames
from history_client.history import Emit, Fetch, Plan
from history_client.requests import Requests, answer_error, check_event_stream, wrap_transport

__all__ = ["AsyncHistoryClient", "HistoryClient"]

DEFAULT_TIMEOUT: Final = 10.0
# A healthy stream carries a ping every 15 s; three missed pings mean the connection is dead.
FOLLOW_READ_TIMEOUT: Final = 45.0

P = ParamSpec("P")
T = TypeVar("T")
HttpT = TypeVar("HttpT", httpx.Client, httpx.AsyncClient)
TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)
# The errors a plan hears about (and may retry); any other error ends the read.
PLAN_ERRORS: Final = (httpx.TransportError, ClientError, Disconnected)


def _step(plan: Plan | FollowPlan, reply: Any = None, error: BaseException | None = None) -> Any:
    """Advance a plan; ``None`` when it has finished."""
    try:
        return plan.throw(error) if error is not None else plan.send(reply)
    except StopIteration:
        return None


class _Operation(Generic[P, T]):
    """A `Calls` method as a method of both clients: awaited on the async one, blocking on the sync one."""

    def __init__(self, op: Callable[Concatenate[Calls, P], Call[T]]) -> None:
        self._op = op
        self.__doc__ = op.__doc__
        self.__wrapped__ = op

        async def awaited(client: AsyncHistoryClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return await client._call(op, *args, **kwargs)

        # A coroutine function, so that the async client's methods read as such (inspect, frameworks).
        self._awaited = functools.update_wrapper(awaited, op)

    def __call__(self, client: Any, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        return client._call(self._op, *args, **kwargs)

    @overload
    def __get__(self, client: None, owner: type) -> Self: ...
    @overload
    def __get__(self, client: AsyncHistoryClient, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, client: HistoryClient, owner: type) -> Callable[P, T]: ...
    def __get__(self, client: Any, owner: type) -> Any:
        if client is None:
            return self
        return MethodType(self._awaited if isinstance(client, AsyncHistoryClient) else self, client)


class _Walking(Generic[P, T]):
    """A `Calls` method that walks pages or a follow: an async iterator on the async client, else an iterator."""

    def __init__(self, op: Callable[Concatenate[Calls, P], Walk[T]]) -> None:
        self._op = op
        self.__doc__ = op.__doc__
        self.__wrapped__ = op

    def __call__(self, client: Any, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        return client._drive(self._op(client._calls, *args, **kwargs))

    @overload
    def __get__(self, client: None, owner: type) -> Self: ...
    @overload
    def __get__(self, client: AsyncHistoryClient, owner: type) -> Callable[P, AsyncIterator[T]]: ...
    @overload
    def __get__(self, client: HistoryClient, owner: type) -> Callable[P, Iterator[T]]: ...
    def __get__(self, client: Any, owner: type) -> Any:
        return self if client is None else MethodType(self, client)


class _Client(Generic[HttpT, TransportT]):
    """What both clients share: construction and every operation; each subclass runs them over its transport.

    See `AsyncHistoryClient` for the parameters.
    """

    def __init__(
        self,
        base_url: str = "",
        *,
        token: str | None = None,
        principal: str | None = None,
        transport: TransportT | None = None,
        http_client: HttpT | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        follow_read_timeout: float = FOLLOW_READ_TIMEOUT,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self._calls = Calls(
            token=token,
            principal=principal,
            timeout=timeout,
            follow_read_timeout=follow_read_timeout,
            max_messages=max_messages,
            max_bytes=max_bytes,
            backoff=backoff,
        )
        self._owns_client = http_client is None
        self._http: HttpT = http_client or self._open(base_url, transport, timeout)

    def _open(self, base_url: str, transport: TransportT | None, timeout: float) -> HttpT:
        raise NotImplementedError

    create_session = _Operation(Calls.create_session)
    append = _Operation(Calls.append)
    close_session = _Operation(Calls.close_session)
    delete_session = _Operation(Calls.delete_session)
    list_sessions = _Operation(Calls.list_sessions)
    subagents = _Operation(Calls.subagents)
    search = _Operation(Calls.search)
    session = _Operation(Calls.session)
    page_body = _Operation(Calls.page_body)
    page = _Operation(Calls.page)
    iter_pages = _Walking(Calls.iter_pages)
    iter_history = _Walking(Calls.iter_history)
    follow = _Walking(Calls.follow)

    @property
    def backoff(self) -> Backoff:
        """The reconnect policy of `follow`."""
        return self._calls.backoff

    @backoff.setter
    def backoff(self, backoff: Backoff) -> None:
        self._calls.backoff = backoff


class AsyncHistoryClient(_Client[httpx.AsyncClient, httpx.AsyncBaseTransport]):
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

    def _open(self, base_url: str, transport: httpx.AsyncBaseTransport | None, timeout: float) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=base_url, transport=transport, timeout=timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._http.aclose()

    async def _call(self, op: Callable[Concatenate[Calls, P], Call[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        call = op(self._calls, *args, **kwargs)
        try:
            response = await self._http.send(call.build(self._http))
        except httpx.TransportError as exc:
            raise wrap_transport(exc) from exc
        return call.read(response)

    async def _drive(self, walk: Walk[T]) -> AsyncIterator[T]:
        plan = walk.plan
        stream: AsyncFrames | None = None
        page_path = Requests.path(walk.session, walk.child, "page")
        try:
            action = _step(plan)
            while action is not None:
                reply: Any = None
                try:
                    if type(action) is Emit:
                        for value in action.values:
                            yield value
                    elif type(action) is Fetch:
                        reply = await self._call(Calls.fetch, page_path, action)
                    elif type(action) is NextFrame:
                        assert stream is not None
                        reply = await stream.next(action.deadline)
                    elif type(action) is ReadHead:
                        reply = await self._call(Calls.session, walk.session, child=walk.child)
                    elif type(action) is Connect:
                        if stream is not None:
                            await stream.aclose()
                            stream = None
                        stream = await self._open_stream(walk, action)
                    elif type(action) is Sleep:
                        await asyncio.sleep(action.seconds)
                except PLAN_ERRORS as exc:
                    action = _step(plan, error=exc)
                    continue
                action = _step(plan, reply)
        finally:
            plan.close()
            if stream is not None:
                await stream.aclose()

    async def _open_stream(self, walk: Walk[Any], action: Connect) -> AsyncFrames:
        response = await self._http.send(self._calls.connect(self._http, walk, action), stream=True)
        if not response.is_success:
            await response.aread()
            await response.aclose()
            raise answer_error(response)
        check_event_stream(response)
        return AsyncFrames(response)


class HistoryClient(_Client[httpx.Client, httpx.BaseTransport]):
    """The synchronous client: the same methods, parameters and errors as `AsyncHistoryClient`.

    ``transport`` is an ``httpx.BaseTransport`` and ``http_client`` an ``httpx.Client``.
    """

    def _open(self, base_url: str, transport: httpx.BaseTransport | None, timeout: float) -> httpx.Client:
        return httpx.Client(base_url=base_url, transport=transport, timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_client:
            self._http.close()

    def _call(self, op: Callable[Concatenate[Calls, P], Call[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        call = op(self._calls, *args, **kwargs)
        try:
            response = self._http.send(call.build(self._http))
        except httpx.TransportError as exc:
            raise wrap_transport(exc) from exc
        return call.read(response)

    def _drive(self, walk: Walk[T]) -> Iterator[T]:
        plan = walk.plan
        stream: SyncFrames | None = None
        page_path = Requests.path(walk.session, walk.child, "page")
        try:
            action = _step(plan)
            while action is not None:
                reply: Any = None
                try:
                    if type(action) is Emit:
                        yield from action.values
                    elif type(action) is Fetch:
                        reply = self._call(Calls.fetch, page_path, action)
                    elif type(action) is NextFrame:
                        assert stream is not None
                        reply = stream.next(action.deadline)
                    elif type(action) is ReadHead:
                        reply = self._call(Calls.session, walk.session, child=walk.child)
                    elif type(action) is Connect:
                        if stream is not None:
                            stream.close()
                            stream = None
                        stream = self._open_stream(walk, action)
                    elif type(action) is Sleep:
                        time.sleep(action.seconds)
                except PLAN_ERRORS as exc:
                    action = _step(plan, error=exc)
                    continue
                action = _step(plan, reply)
        finally:
            plan.close()
            if stream is not None:
                stream.close()

    def _open_stream(self, walk: Walk[Any], action: Connect) -> SyncFrames:
        response = self._http.send(self._calls.connect(self._http, walk, action), stream=True)
        if not response.is_success:
            response.read()
            response.close()
            raise answer_error(response)
        check_event_stream(response)
        return SyncFrames(response)

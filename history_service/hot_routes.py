"""The hot routes, served past Starlette's middleware, router and per-route wrapper: same endpoints, same answers.

A 1-event append, a small page and ``/healthz`` are most of a busy service's requests, and
on them Starlette's layers cost as much as the framework's floor: two error middlewares
and a per-route exception wrapper, each wrapping ``send``, a router that tries patterns, and
a request wrapper. `HotRoutes` sits inside `history_service.edge.Edge` and answers a
request for one of `HOT` itself:

* the route is found by the path's segments, and the scope gets the ``route`` and
  ``path_params`` Starlette's router would give it, so the access line, the metrics and
  the endpoint see what they see on the other path;
* the endpoint is the one the route table names, called with a Starlette `Request`;
* an error is answered by the app's one table (`history_service.answers.EXCEPTION_HANDLERS`),
  the nearest class in its MRO deciding, as Starlette looks it up; an unexpected one is
  answered 500 and raised again for the server to log, as Starlette's outer error
  middleware does.

Anything else, and every request when the app answers CORS (whose middleware must see
every response), goes to the Starlette app as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, ExceptionHandler, Message, Receive, Scope, Send

from history_service.router import ANYWHERE, template_literals

__all__ = ["HOT", "HotRoutes"]

# The app's handlers all answer a request (never a websocket) with a response, asynchronously.
Handler = Callable[[Request, Exception], Awaitable[Response]]

# (method, template): what a busy service serves most.
HOT: Final = frozenset(
    {
        ("GET", "/healthz"),
        ("POST", "/v1/sessions/{session_id}/events"),
        ("GET", "/v1/sessions/{session_id}/page"),
        ("GET", "/v1/sessions/{session_id}/subagents/{child_id}/page"),
    }
)


class _Hot:
    """One hot route: its literal segments, where its parameters are, and what answers it."""

    __slots__ = ("endpoint", "literals", "params", "route")

    def __init__(self, route: Route) -> None:
        self.route = route
        self.endpoint = route.endpoint
        _, self.literals = template_literals(route)
        literal = {i for i, _ in self.literals}
        segments = route.path.split("/")
        self.params = tuple((i, s[1:-1]) for i, s in enumerate(segments) if i not in literal)

    def match(self, parts: list[str]) -> dict[str, str] | None:
        for i, literal in self.literals:
            if parts[i] != literal:
                return None
        params = {}
        for i, name in self.params:
            if not parts[i]:
                return None
            params[name] = parts[i]
        return params


class HotRoutes:
    """Pure ASGI: serves the requests for `HOT` routes among ``routes`` itself, and passes the rest to ``app``.

    A hot route is served here only when Starlette's router would surely choose it and run
    its endpoint as it is: a plain `Route` (no middleware of its own, no body limit), with
    no earlier route in ``routes`` that could match its paths. ``handlers`` are the app's
    exception handlers, ``Exception``'s among them.
    """

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute], handlers: Mapping[Any, ExceptionHandler]) -> None:
        self.app = app
        self._handlers = {kind: cast(Handler, handler) for kind, handler in handlers.items()}
        self._unexpected = self._handlers[Exception]
        self._routes: dict[tuple[str, int], list[_Hot]] = {}
        for i, route in enumerate(routes):
            if not isinstance(route, Route) or route.methods is None or not _plain(route):
                continue
            for method in route.methods:
                if (method, route.path) in HOT and not any(_may_match(before, route) for before in routes[:i]):
                    key = (method, route.path.count("/") + 1)
                    self._routes.setdefault(key, []).append(_Hot(route))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            parts = scope["path"].split("/")
            for hot in self._routes.get((scope["method"], len(parts)), ()):
                params = hot.match(parts)
                if params is not None:
                    scope["route"] = hot.route
                    scope["endpoint"] = hot.endpoint
                    scope["path_params"] = params
                    await self._serve(hot, scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(self, hot: _Hot, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            response: Response = await hot.endpoint(request)
        except Exception as exc:
            await self._answer(request, exc, scope, receive, send)
            return
        try:
            await response(scope, receive, send)
        except Exception as exc:
            # Logged as Starlette's outer error middleware would; our responses fail only once started,
            # and then the server ends the connection.
            await self._unexpected(request, exc)
            raise

    async def _answer(self, request: Request, exc: Exception, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer ``exc`` from the table; an unexpected error, or a handler's failure, is answered 500 and raised."""
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        handler = self._handler(exc)
        try:
            answer = await handler(request, exc)
            await answer(scope, receive, sending)
        except Exception as failure:
            if handler is self._unexpected:
                raise
            internal = await self._unexpected(request, failure)
            if not started:
                await internal(scope, receive, send)
            raise
        if handler is self._unexpected:
            raise exc

    def _handler(self, exc: Exception) -> Handler:
        # The nearest class in the error's MRO decides, as Starlette looks handlers up.
        for kind in type(exc).__mro__:
            handler = self._handlers.get(kind)
            if handler is not None:
                return handler
        return self._unexpected


def _plain(route: Route) -> bool:
    """Whether Starlette runs the route's endpoint as it is: its app is `request_response`'s, unwrapped."""
    return getattr(route.app, "__qualname__", "") == "request_response.<locals>.app"


def _may_match(before: BaseRoute, hot: Route) -> bool:
    """Whether ``before``, earlier in the table, could match a path of ``hot``'s template (and so be chosen first)."""
    count, theirs = template_literals(before)
    if count == ANYWHERE:
        return True
    length, mine = template_literals(hot)
    if count != length:
        return False
    # Where ``hot`` has a parameter, any literal of ``before`` may be what the path holds.
    literal = dict(mine)
    return all(literal.get(i, segment) == segment for i, segment in theirs)

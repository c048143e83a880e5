"""The ``/ds`` surface, declared once: each route's path, what serves it, and its part of the OpenAPI document.

`durable_mount` serves `ROUTES` under `PREFIX`, in the table's order (Starlette's routing:
the first route whose template matches the path serves it); `history_service.openapi`
documents them. The subscription API's routes come before the generic stream's, whose
``{name:path}`` would match them too; a path under ``__ds/`` that names none of them is the
API's 404, never a stream.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from msgspec import Struct
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route, request_response
from starlette.types import Receive, Scope, Send

from history_service.durable import subscription_api as api
from history_service.durable.app import METHODS, Handler, guarded, session_handler, stream_handler
from history_service.durable.document import child_item, session_item, stream_item
from history_service.durable.streams import RESERVED, STREAMS

__all__ = ["PREFIX", "ROUTES", "DurableRoute", "durable_mount"]

PREFIX: Final = "/ds"
# A session read as a stream takes no writes: the router answers them 405.
_READS: Final = ("GET", "HEAD", "OPTIONS")
_API: Final = STREAMS + RESERVED
_SUBSCRIPTION: Final = _API + "/subscriptions/{sub_id}"


class DurableRoute(Struct, frozen=True, kw_only=True):
    """A path under `PREFIX` (Starlette's template), what serves it, and how the OpenAPI document shows it.

    ``methods`` are the ones Starlette lets through, answering any other 405; None when the
    handler answers every method itself, as the subscription API does (its 405 is the
    protocol's). ``by_token``: in token mode the route proves itself by a wake's token, not by
    the API's credentials. ``document`` gives the path item for an auth mode; the subscription
    API has none, the Durable Streams protocol being its document (docs/protocol.md §13.6).
    """

    path: str
    handler: Handler
    methods: tuple[str, ...] | None = None
    by_token: bool = False
    document: Callable[[str], dict[str, Any]] | None = None


ROUTES: Final = (
    DurableRoute(path=_API + "/jwks.json", handler=api.endpoint({"GET": api.jwks})),
    DurableRoute(path=_SUBSCRIPTION, handler=api.endpoint({"PUT": api.create, "GET": api.view, "DELETE": api.remove})),
    DurableRoute(path=_SUBSCRIPTION + "/streams", handler=api.endpoint({"POST": api.link})),
    DurableRoute(path=_SUBSCRIPTION + "/streams/{name:path}", handler=api.endpoint({"DELETE": api.unlink})),
    DurableRoute(path=_SUBSCRIPTION + "/claim", handler=api.endpoint({"POST": api.claim})),
    # A wake's callback, ack and release carry the wake's token where the API's credentials go.
    *(
        DurableRoute(
            path=f"{_SUBSCRIPTION}/{action}", handler=api.endpoint({"POST": api.settle(action)}), by_token=True
        )
        for action in ("callback", "ack", "release")
    ),
    DurableRoute(path=_SUBSCRIPTION + "/{rest:path}", handler=api.endpoint({})),
    DurableRoute(path=_API + "/{rest:path}", handler=api.endpoint({})),
    DurableRoute(path=STREAMS + "{name:path}", handler=stream_handler, methods=METHODS, document=stream_item),
    DurableRoute(path="/v1/session/{session_id}", handler=session_handler, methods=_READS, document=session_item),
    DurableRoute(
        path="/v1/session/{session_id}/subagents/{child_id}",
        handler=session_handler,
        methods=_READS,
        document=child_item,
    ),
)


class _EveryMethod:
    """An endpoint as an ASGI app, which Starlette routes every method to (a function, it would route only GET)."""

    def __init__(self, endpoint: Callable[[Request], Awaitable[Response]]) -> None:
        self._app = request_response(endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


def _route(route: DurableRoute) -> Route:
    endpoint = guarded(route.handler, by_token=route.by_token)
    if route.methods is None:
        return Route(route.path, _EveryMethod(endpoint))
    return Route(route.path, endpoint, methods=list(route.methods))


def durable_mount() -> Mount:
    """The ``/ds`` mount of `ROUTES`; the app's lifespan puts its `Durable` in the request state."""
    return Mount(PREFIX, routes=[_route(route) for route in ROUTES])

"""The ASGI application, assembled declaratively from one `Settings`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from typing import Any

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from history_service import openapi, routes
from history_service.allocator import Trimmer, fix_mmap_threshold
from history_service.answers import EXCEPTION_HANDLERS
from history_service.assets import viewer_routes
from history_service.cors import cors_middleware
from history_service.durable.app import Durable
from history_service.durable.routes import durable_mount
from history_service.edge import Edge
from history_service.hot_routes import HotRoutes
from history_service.logs import Tracebacks, configure_logging, finish_queued_logs
from history_service.metrics import Metrics, metrics_for
from history_service.router import SegmentRouter
from history_service.service import HistoryService
from history_service.settings import Settings
from history_service.shutdown import Shutdown, on_signals
from persistence import HistoryStore, open_store

__all__ = ["app_factory", "create_app"]


class _Edged(Starlette):
    """Starlette with `Edge` outside its own outer error handler, so that handler's 500 carries an id and is counted.

    Its router is a `SegmentRouter`: each request tries only the routes its path could match.
    Without middleware of the app's own, the hot routes are served inside `Edge` by `HotRoutes`,
    past Starlette's layers.
    """

    def __init__(self, *, metrics: Metrics, routes: list[BaseRoute], lifespan: Any, **options: Any) -> None:
        super().__init__(routes=routes, lifespan=lifespan, **options)
        self.router = SegmentRouter(routes, lifespan=lifespan)
        self.edge_metrics = metrics
        # A test turns it off to hold the hot routes' answers against Starlette's path.
        self.hot = True

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        # Middleware of the app's own (CORS) must see every response: then every request takes Starlette's path.
        if self.hot and not self.user_middleware:
            stack = HotRoutes(stack, self.router.routes, self.exception_handlers)
        return Edge(stack, metrics=self.edge_metrics)


def create_app(
    settings: Settings,
    *,
    store: HistoryStore | None = None,
    shutdown: Shutdown | None = None,
    metrics: Metrics | None = None,
    tracebacks: Tracebacks | None = None,
) -> Starlette:
    """Build the app.

    Parameters:
        settings: every knob of the service.
        store: a store that belongs to the caller; without one, the lifespan opens and closes one.
        shutdown: a signal the launcher triggers when it stops, which ends every follow stream
            before the server waits for open responses. Without one, the app triggers its own
            on SIGINT and SIGTERM, then passes the signal on to the launcher's handler.
        metrics: what the app counts into, when the caller serves them elsewhere too
            (``metrics_port``); without it, the app makes its own from ``settings``.
        tracebacks: which logged failures carry their traceback; without it, the first of
            each kind and then one every 10 s.
    """
    recorded = metrics if metrics is not None else metrics_for(settings)
    limited = tracebacks if tracebacks is not None else Tracebacks()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        stopping = shutdown if shutdown is not None else Shutdown()
        opened = (
            store
            if store is not None
            else await open_store(
                settings.store_url,
                create=True,
                session_cache=settings.session_cache,
                timeout=settings.store_timeout,
            )
        )
        # The follow hub and Durable Streams each subscribe to the service's one fan-out of changes.
        service = HistoryService(settings, opened, recorded)
        durable = Durable(settings, service)
        try:
            async with anyio.create_task_group() as tasks:
                await tasks.start(service.hub.run)
                await tasks.start(service.notices.run, service.closing)
                if settings.sweep_interval > 0:
                    tasks.start_soon(service.sweeper.run, settings.sweep_interval)
                tasks.start_soon(durable.run)
                # After a burst of large pages, give the memory they used back to the system.
                fix_mmap_threshold()
                trimmer, pools = Trimmer(every=settings.inflight_bytes), (service.reading, service.sending)
                tasks.start_soon(trimmer.run, lambda: sum(p.drained for p in pools), lambda: sum(p.held for p in pools))
                with (
                    stopping.listening(service.hub.close),
                    stopping.listening(durable.close),
                    on_signals(stopping) if shutdown is None else nullcontext(),
                ):
                    try:
                        with recorded.running():
                            yield {
                                "service": service,
                                "durable": durable,
                                "metrics": recorded,
                                "tracebacks": limited,
                                "document": openapi.Served(settings),
                            }
                    finally:
                        limited.close()
                        service.hub.close()
                        durable.close()
                        tasks.cancel_scope.cancel()
        finally:
            if store is None:
                await opened.close()
            finish_queued_logs()

    # With a metrics port, that port serves them instead: the API port never shows them to a gateway's callers.
    with_metrics = recorded.enabled and settings.metrics_port is None
    served = [_served(route) for route in routes.ROUTES if route.when == "always" or with_metrics]
    served += viewer_routes()
    if settings.durable_streams:
        served.append(durable_mount())
    if settings.enable_test_seed:
        # Imported only when enabled, so a production process never loads it.
        from history_service import seed

        served.append(Route("/v1/test-only/seed", seed.seed, methods=["POST"]))
    # Request ids, metrics and the access line are outermost (see `_Edged`).
    middleware: list[Middleware] = []
    handlers = EXCEPTION_HANDLERS
    if settings.cors_origins:
        # Starlette answers an unhandled error from outside every middleware of ours, so its 500
        # would lack the CORS headers and a page could not read it. A second ServerErrorMiddleware
        # inside CORS answers it instead. The outer one, left with Starlette's plain default, then
        # only re-raises for the server to log (so the error is logged once): it answers only a
        # failure of CORS itself.
        handlers = {key: handler for key, handler in EXCEPTION_HANDLERS.items() if key is not Exception}
        middleware += [
            cors_middleware(settings.cors_origins),
            Middleware(ServerErrorMiddleware, handler=EXCEPTION_HANDLERS[Exception]),
        ]
    return _Edged(
        metrics=recorded,
        routes=served,
        middleware=middleware,
        exception_handlers=handlers,
        lifespan=lifespan,
    )


def _served(route: routes.Route) -> BaseRoute:
    """A table route as Starlette serves it: one route per path, so that a 405 there allows every method."""
    by_method: dict[str, routes.Endpoint] = {operation.method: operation.endpoint for operation in route.operations}
    methods = list(by_method)
    if len(by_method) == 1:
        return Route(route.path, by_method[methods[0]], methods=methods)

    async def endpoint(request: Request) -> Response:
        # HEAD is GET's, as Starlette answers it.
        return await by_method.get(request.method, by_method["GET"])(request)

    return Route(route.path, endpoint, methods=methods)


def app_factory(settings: Settings | None = None) -> Starlette:
    """For ``uvicorn --factory history_service.app:app_factory``: settings from the environment.

    ``serve --workers`` hands each worker the settings it resolved instead (``settings``), as
    the factory's argument. The factory is the process's edge, so it also sets up logging
    (`configure_logging`).
    """
    if settings is None:
        # Only `serve` opens the metrics port; under a launcher of one's own the API port serves them.
        settings = msgspec.structs.replace(Settings.from_env(), metrics_port=None)
    configure_logging(settings)
    return create_app(settings)

"""The ASGI application, assembled declaratively from one `Settings`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from history_service import endpoints
from history_service.assets import viewer_routes
from history_service.errors import ApiError, error_response, handle_api_error
from history_service.service import HistoryService
from history_service.settings import Settings
from history_service.shutdown import Shutdown, on_signals
from persistence import HistoryStore, open_store

__all__ = ["app_factory", "create_app"]

logger = logging.getLogger(__name__)

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"), str(exc.detail))


async def _internal_error(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal", "internal server error")


def create_app(settings: Settings, *, store: HistoryStore | None = None, shutdown: Shutdown | None = None) -> Starlette:
    """Build the app.

    Parameters:
        settings: every knob of the service.
        store: a store that belongs to the caller; without one, the lifespan opens and closes one.
        shutdown: a signal the launcher triggers when it stops, which ends every follow stream
            before the server waits for open responses. Without one, the app triggers its own
            on SIGINT and SIGTERM, then passes the signal on to the launcher's handler.
    """

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        stopping = shutdown if shutdown is not None else Shutdown()
        opened = (
            store
            if store is not None
            else await open_store(settings.store_url, create=True, session_cache=settings.session_cache)
        )
        service = HistoryService(settings, opened)
        try:
            async with anyio.create_task_group() as tasks:
                await tasks.start(service.hub.run)
                with stopping.listening(service.hub.close), on_signals(stopping) if shutdown is None else nullcontext():
                    try:
                        yield {"service": service}
                    finally:
                        service.hub.close()
                        tasks.cancel_scope.cancel()
        finally:
            if store is None:
                await opened.close()

    routes = [
        Route("/healthz", endpoints.healthz, methods=["GET"]),
        Route("/readyz", endpoints.readyz, methods=["GET"]),
        Route("/v1/sessions", endpoints.create_session, methods=["POST"]),
        Route("/v1/sessions", endpoints.list_sessions, methods=["GET"]),
        Route("/v1/sessions/{session_id}", endpoints.get_session, methods=["GET"]),
        Route("/v1/sessions/{session_id}/subagents/{child_id}", endpoints.get_session, methods=["GET"]),
        Route("/v1/sessions/{session_id}/events", endpoints.append_events, methods=["POST"]),
        Route("/v1/sessions/{session_id}/page", endpoints.page, methods=["GET"]),
        Route("/v1/sessions/{session_id}/subagents/{child_id}/page", endpoints.page, methods=["GET"]),
        Route("/v1/sessions/{session_id}/follow", endpoints.follow, methods=["GET"]),
        Route("/v1/sessions/{session_id}/subagents/{child_id}/follow", endpoints.follow, methods=["GET"]),
        *viewer_routes(),
    ]
    if settings.enable_test_seed:
        # Imported only when enabled, so a production process never loads it.
        from history_service import seed

        routes.append(Route("/v1/test-only/seed", seed.seed, methods=["POST"]))
    return Starlette(
        routes=routes,
        exception_handlers={ApiError: handle_api_error, HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )


def app_factory() -> Starlette:
    """For ``uvicorn --factory history_service.app:app_factory``: settings from the environment."""
    return create_app(Settings.from_env())

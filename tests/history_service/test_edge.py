"""The edge: request id, metrics and access line in one layer, outside Starlette's own error handler."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from prometheus_client import generate_latest
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.types import Receive, Scope, Send

from history_service.app import create_app
from history_service.edge import Edge
from history_service.hot_routes import HotRoutes
from history_service.logs import ACCESS_LOGGER, LogHandler
from history_service.metrics import PrometheusMetrics
from history_service.settings import Settings
from persistence import MemoryStore
from testing.asgi import serving

pytestmark = pytest.mark.anyio


@contextmanager
def access_log() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    handler = LogHandler(Settings(log_format="json"), buffer)
    logger = logging.getLogger(ACCESS_LOGGER)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield buffer
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def test_the_edge_is_outermost_then_the_hot_routes_then_starlettes_error_handler() -> None:
    app = create_app(Settings(), store=MemoryStore())
    edge = app.build_middleware_stack()
    assert isinstance(edge, Edge) and edge.metrics.enabled
    assert isinstance(edge.app, HotRoutes) and isinstance(edge.app.app, ServerErrorMiddleware)
    assert app.user_middleware == []


def test_with_cors_every_request_takes_starlettes_path_inside_the_edge() -> None:
    app = create_app(Settings(cors_origins=("https://app.example",)), store=MemoryStore())
    edge = app.build_middleware_stack()
    assert isinstance(edge, Edge) and isinstance(edge.app, ServerErrorMiddleware)


async def test_each_response_carries_one_request_id_and_one_access_line() -> None:
    with access_log() as buffer:
        async with serving(create_app(Settings(), store=MemoryStore())) as client:
            response = await client.get("/healthz", headers={"X-Request-ID": "edge-1"})
            metrics = await client.get("/metrics")
    assert response.headers.get_list("X-Request-ID") == ["edge-1"]
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    (health,) = [line for line in lines if line["request_id"] == "edge-1"]
    assert (health["route"], health["status"], health["bytes"]) == ("/healthz", 200, len(response.content))
    assert 'route="/healthz"' in metrics.text


async def _answers_nothing(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("failed before any answer")


async def test_an_app_that_fails_before_answering_is_counted_and_logged_as_500_and_still_raises() -> None:
    metrics = PrometheusMetrics()
    transport = httpx.ASGITransport(app=Edge(_answers_nothing, metrics=metrics), raise_app_exceptions=True)
    with access_log() as buffer:
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            with pytest.raises(RuntimeError, match="failed before any answer"):
                await client.get("/anything", headers={"X-Request-ID": "lost-1"})
    (line,) = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert (line["status"], line["route"], line["bytes"], line["request_id"]) == (500, None, 0, "lost-1")
    scraped = generate_latest(metrics.registry).decode()
    assert 'history_http_request_duration_seconds_count{method="GET",route="unmatched",status="500"} 1.0' in scraped

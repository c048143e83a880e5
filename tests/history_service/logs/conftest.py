"""What the tests of `history_service.logs` share: a capturing handler, its lines, and a served app."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from codec import Event, encode
from history_service.app import create_app
from history_service.logs import ACCESS_LOGGER, LogHandler, QueuedLogHandler
from history_service.settings import Settings
from persistence.memory import MemoryStore
from testing.asgi import serving
from testing.events import text


@contextmanager
def captured(log_format: str, level: int = logging.DEBUG) -> Iterator[io.StringIO]:
    """Every record at ``level`` or above, written by our handler in ``log_format`` to the returned buffer."""
    buffer = io.StringIO()
    handler = LogHandler(Settings(log_format=log_format), buffer)  # type: ignore[arg-type]
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def json_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def access_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["logger"] == ACCESS_LOGGER and line["level"] == "INFO"]


def events_body(events: list[Event]) -> bytes:
    return b'{"events":[' + b",".join(encode(event) for event in events) + b"]}"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        assert (await client.post("/v1/sessions", json={"id": "s", "createdAt": 0})).status_code == 201
        appended = await client.post(
            "/v1/sessions/s/events",
            content=events_body([text(0, 10, "hello"), text(1, 11, " there")]),
            headers={"Content-Type": "application/json"},
        )
        assert appended.status_code == 201
        yield client


@contextmanager
def queued(log_format: str = "json") -> Iterator[tuple[QueuedLogHandler, io.StringIO]]:
    """A `QueuedLogHandler` on the root logger at DEBUG, writing to the returned buffer; closed at the end."""
    buffer = io.StringIO()
    handler = QueuedLogHandler(Settings(log_format=log_format), buffer)  # type: ignore[arg-type]
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler, buffer
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        handler.close()

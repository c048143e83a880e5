"""The access log: one line per request with its fields, and never a token or the event content."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from codec import Event
from history_service.app import create_app
from history_service.endpoints import healthz
from history_service.logs import ACCESS_LOGGER, REQUEST_ID, QueuedLogHandler, log_access
from history_service.settings import Settings
from persistence import SessionSummary
from persistence.memory import MemoryStore
from testing.asgi import serving
from testing.events import text
from testing.servers import ServerProcess
from tests.history_service.logs.conftest import access_lines, captured, events_body, json_lines

pytestmark = pytest.mark.anyio


TOKEN = "tok-7f3a-QUARTZ-PELICAN-91c2"


EVENT_TEXT = "the heron counts nine violet lanterns"


async def test_a_json_line_for_a_page_request_holds_the_access_fields_and_the_response_request_id(
    client: httpx.AsyncClient,
) -> None:
    with captured("json") as buffer:
        response = await client.get("/v1/sessions/s/page", headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    rid = response.headers["X-Request-ID"]
    assert len(rid) == 32
    (line,) = access_lines(json_lines(buffer))
    assert line["request_id"] == rid
    assert set(line) >= {"ts", "level", "logger", "message", "request_id"}
    assert line["level"] == "INFO" and line["ts"].endswith("Z")
    assert (line["method"], line["route"], line["path"], line["status"]) == (
        "GET",
        "/v1/sessions/{session_id}/page",
        "/v1/sessions/s/page",
        200,
    )
    assert line["content_coding"] == response.headers.get("Content-Encoding", "identity")
    assert line["bytes"] == len(response.content) > 0
    assert isinstance(line["latency_ms"], float) and line["latency_ms"] >= 0
    assert line["principal"] == "local"


class FailingStore(MemoryStore):
    async def list_sessions(self, owner: str, **listing: Any) -> list[SessionSummary]:
        raise RuntimeError("a bug")


async def test_an_unhandled_error_is_logged_as_500_with_its_request_id() -> None:
    async with serving(create_app(Settings(), store=FailingStore())) as client:
        with captured("json") as buffer, contextlib.suppress(RuntimeError):
            # The in-process transport re-raises what the app raised, after its 500 went out.
            await client.get("/v1/sessions", headers={"X-Request-ID": "bug-1"})
    lines = [line for line in json_lines(buffer) if line["logger"].startswith("history_service")]
    (access,) = access_lines(lines)
    assert (access["status"], access["request_id"]) == (500, "bug-1")
    (error,) = [line for line in lines if "exception" in line]
    assert error["request_id"] == "bug-1" and "RuntimeError: a bug" in error["exception"]


async def test_an_unmatched_route_is_logged_with_no_route_and_a_refused_caller_with_no_principal() -> None:
    settings = Settings(auth="token", tokens=("t",))
    async with serving(create_app(settings, store=MemoryStore())) as client:
        with captured("json") as buffer:
            assert (await client.get("/no/such/thing")).status_code == 404
            assert (await client.get("/v1/sessions", headers={"Authorization": "Bearer wrong"})).status_code == 401
            listed = await client.get("/v1/sessions", headers={"Authorization": "Bearer t", "X-Principal": "ann"})
            assert listed.status_code == 200
    unmatched, refused, served = access_lines(json_lines(buffer))
    assert (unmatched["route"], unmatched["path"], unmatched["principal"]) == (None, "/no/such/thing", None)
    assert (refused["route"], refused["status"], refused["principal"]) == ("/v1/sessions", 401, None)
    assert (served["status"], served["principal"]) == (200, "ann")


async def test_a_text_line_carries_the_request_id_and_the_access_fields(client: httpx.AsyncClient) -> None:
    with captured("text") as buffer:
        await client.get("/v1/sessions/s", headers={"X-Request-ID": "r-1"})
    (line,) = [line for line in buffer.getvalue().splitlines() if f"INFO {ACCESS_LOGGER}" in line]
    assert f" INFO {ACCESS_LOGGER} [r-1] GET /v1/sessions/s 200 " in line
    assert line.endswith("principal=local route=/v1/sessions/{session_id}")


def test_no_token_or_event_content_is_logged_at_debug(tmp_path: Path) -> None:
    """A real server, token auth, every request kind a caller makes, and malformed ones; all of stderr at DEBUG."""
    token_file = tmp_path / "tokens"
    token_file.write_text(TOKEN + "\n")
    server = ServerProcess(f"sqlite:///{tmp_path / 'h.db'}", env={"HISTORY_AUTH": "token"})
    server.start("--token-file", str(token_file), "--log-format", "json", "--log-level", "debug")
    try:
        caller = {"Authorization": f"Bearer {TOKEN}", "X-Principal": "ann"}
        json_body = {**caller, "Content-Type": "application/json"}
        with httpx.Client(base_url=server.url, timeout=30) as client:
            header = {"id": "s", "createdAt": 0, "meta": {"title": EVENT_TEXT}}
            assert client.post("/v1/sessions", json=header, headers=caller).status_code == 201
            events = [Event("user/message", 0, 5, {"text": EVENT_TEXT}), text(1, 6, EVENT_TEXT), text(2, 7, "!")]
            appended = client.post("/v1/sessions/s/events", content=events_body(events), headers=json_body)
            assert appended.status_code == 201
            bad = b'{"events":[{"type":"x","seq":3,"time":"' + EVENT_TEXT.encode() + b'"}]}'
            assert client.post("/v1/sessions/s/events", content=bad, headers=json_body).status_code == 422
            broken = b'{"events":[{"text":"' + EVENT_TEXT.encode() + b'"'
            assert client.post("/v1/sessions/s/events", content=broken, headers=json_body).status_code == 400
            conflict = events_body([text(7, 8, EVENT_TEXT)])
            assert client.post("/v1/sessions/s/events", content=conflict, headers=json_body).status_code == 409
            page = client.get("/v1/sessions/s/page", headers={**caller, "X-Request-ID": "page-1"})
            assert page.status_code == 200 and EVENT_TEXT in page.text
            assert client.get("/v1/sessions/s", headers=caller).status_code == 200
            assert client.get("/v1/sessions", headers=caller).status_code == 200
            wrong = {"Authorization": f"Bearer {TOKEN}x", "X-Principal": "ann"}
            assert client.get("/v1/sessions/s/page", headers=wrong).status_code == 401
            with client.stream(
                "GET", "/v1/sessions/s/follow", headers={**caller, "X-Request-ID": "follow-1"}
            ) as stream:
                seen = ""
                for chunk in stream.iter_text():
                    seen += chunk
                    if EVENT_TEXT in seen:
                        break
        # The follow stream's line is written when the server sees the stream end.
        wait_for(lambda: '"request_id":"follow-1"' in server.stderr())
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(30)
        output = server.stderr()
    finally:
        server.stop()
    assert TOKEN not in output and TOKEN[4:-4] not in output
    assert EVENT_TEXT not in output and "violet lanterns" not in output
    lines = [json.loads(line) for line in output.splitlines() if not line.startswith("history-service:")]
    assert lines and all(set(line) >= {"ts", "level", "logger", "message", "request_id"} for line in lines)
    assert any(line["level"] == "DEBUG" for line in lines)
    assert not [line for line in lines if line["logger"].startswith("uvicorn.access")]
    access = {line["request_id"]: line for line in access_lines(lines)}
    assert access["page-1"]["route"] == "/v1/sessions/{session_id}/page" and access["page-1"]["principal"] == "ann"
    follow = access["follow-1"]
    assert (follow["route"], follow["status"]) == ("/v1/sessions/{session_id}/follow", 200) and follow["bytes"] > 0
    assert [line["status"] for line in access_lines(lines) if line["method"] == "POST"] == [201, 201, 422, 400, 409]


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_an_access_line_queued_as_such_is_the_line_its_record_would_be(log_format: str) -> None:
    buffer = io.StringIO()
    handler = QueuedLogHandler(Settings(log_format=log_format), buffer)  # type: ignore[arg-type]
    logger = logging.getLogger(f"history_service.test.access.{log_format}")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    scope = {
        "method": "GET",
        "path": '/v1/sessions/a b"\x85/page',
        "route": Route("/v1/sessions/{session_id}/page", healthz),
        "state": {"principal": "ann"},
    }
    try:
        token = REQUEST_ID.set("same-1")
        log_access(logger, scope, 200, 2.5, 5120, "zstd")
        # A filter on the logger sends the next line the usual way, as a record.
        logger.addFilter(lambda record: True)
        log_access(logger, scope, 200, 2.5, 5120, "zstd")
        REQUEST_ID.reset(token)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        logger.filters.clear()
        handler.close()
    queued_line, record_line = buffer.getvalue().splitlines()
    if log_format == "json":
        first, second = json.loads(queued_line), json.loads(record_line)
        assert first.pop("ts") and second.pop("ts")
        assert first == second and first["request_id"] == "same-1" and first["principal"] == "ann"
        assert first["logger"] == logger.name
    else:
        assert queued_line.split(" ", 1)[1] == record_line.split(" ", 1)[1]
        assert f" INFO {logger.name} [same-1] GET " in queued_line

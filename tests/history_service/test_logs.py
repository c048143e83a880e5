"""Logs: a request id on every line and in the response, one access line per request, and no secrets."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, strategies as st
from starlette.routing import Route

from codec import Event, encode
from history_service.app import create_app
from history_service.endpoints import healthz
from history_service.logs import (
    ACCESS_LOGGER,
    REQUEST_ID,
    LogHandler,
    QueuedLogHandler,
    Timestamps,
    Tracebacks,
    Warnings,
    configure_logging,
    current_request_id,
    log_access,
    request_id,
)
from history_service.settings import Settings
from persistence import SessionKey, SessionSummary
from persistence.errors import StoreError
from persistence.memory import MemoryStore
from testing.asgi import serving
from testing.events import text
from testing.servers import ServerProcess

pytestmark = pytest.mark.anyio

TOKEN = "tok-7f3a-QUARTZ-PELICAN-91c2"
EVENT_TEXT = "the heron counts nine violet lanterns"


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


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ([b"abc-123"], True),
        ([b"0af7651916cd43dd8448eb211c80319c"], True),
        ([b"trace:3f2a/span.9+x=@_"], True),
        ([b"a" * 128], True),
        ([b"a" * 129], False),
        ([b""], False),
        ([b"has space"], False),
        ([b'quote"d'], False),
        ([b"line\nbreak"], False),
        ([b"caf\xc3\xa9"], False),
        ([b"one", b"two"], False),
        ([], False),
    ],
    ids=[
        "plain",
        "hex",
        "punctuation",
        "at-the-bound",
        "too-long",
        "empty",
        "space",
        "quote",
        "newline",
        "utf8",
        "two-headers",
        "none",
    ],
)
def test_a_callers_request_id_is_kept_only_when_bounded_and_safe(given: list[bytes], kept: bool) -> None:
    found = request_id([(b"x-request-id", value) for value in given] + [(b"host", b"x")])
    if kept:
        assert found == given[0].decode()
    else:
        assert len(found) == 32 and int(found, 16) >= 0


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


class UnreadyStore(MemoryStore):
    async def check_ready(self) -> None:
        raise StoreError("store unavailable: the disk is on fire")


async def test_a_callers_request_id_is_echoed_and_carried_by_every_line_of_its_request() -> None:
    async with serving(create_app(Settings(), store=UnreadyStore())) as client:
        with captured("json") as buffer:
            response = await client.get("/readyz", headers={"X-Request-ID": "gateway-42"})
    assert response.status_code == 503
    assert response.headers["X-Request-ID"] == "gateway-42"
    lines = [line for line in json_lines(buffer) if line["logger"].startswith("history_service")]
    assert [(line["logger"], line["level"]) for line in lines] == [
        (ACCESS_LOGGER, "DEBUG"),
        ("history_service.readiness", "WARNING"),
        (ACCESS_LOGGER, "INFO"),
    ]
    assert all(line["request_id"] == "gateway-42" for line in lines)
    assert lines[0]["message"] == "GET /readyz started"
    assert (lines[2]["status"], lines[2]["route"], lines[2]["content_coding"]) == (503, "/readyz", "identity")
    assert current_request_id() is None


class FailingStore(MemoryStore):
    async def list_sessions(
        self, owner: str, *, limit: int, before: SessionKey | None = None, closed: bool | None = None
    ) -> list[SessionSummary]:
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


async def test_an_unsafe_request_id_is_replaced_in_the_response_and_the_log(client: httpx.AsyncClient) -> None:
    with captured("json") as buffer:
        response = await client.get("/healthz", headers={"X-Request-ID": "evil id\twith tab"})
    rid = response.headers["X-Request-ID"]
    assert rid != "evil id\twith tab" and len(rid) == 32
    (line,) = access_lines(json_lines(buffer))
    assert line["request_id"] == rid and "evil" not in buffer.getvalue()


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


async def test_a_text_line_quotes_what_could_forge_a_line(client: httpx.AsyncClient) -> None:
    with captured("text") as buffer:
        await client.get("/v1/sessions/a%0Afake%20line/page")
    (line,) = [line for line in buffer.getvalue().splitlines() if f"INFO {ACCESS_LOGGER}" in line]
    assert 'GET "/v1/sessions/a\\nfake line/page" 4' in line


def test_configure_logging_replaces_its_own_handler_and_turns_off_uvicorns_access_log() -> None:
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    try:
        first, second = io.StringIO(), io.StringIO()
        configure_logging(Settings(log_format="json", log_level="warning"), stream=first)
        configure_logging(Settings(log_format="json", log_level="warning"), stream=second)
        assert sum(isinstance(handler, LogHandler) for handler in root.handlers) == 1
        assert root.level == logging.WARNING
        assert logging.getLogger("uvicorn.access").disabled
        assert logging.getLogger("sqlalchemy").level == logging.WARNING
        logging.getLogger("uvicorn.error").warning("from uvicorn")
        (line,) = json_lines(second)
        assert (line["logger"], line["message"], line["request_id"]) == ("uvicorn.error", "from uvicorn", None)
        assert first.getvalue() == ""
    finally:
        for handler in [h for h in root.handlers if isinstance(h, LogHandler)]:
            root.removeHandler(handler)
        root.setLevel(before[1])
        logging.getLogger("uvicorn.access").disabled = False
        logging.getLogger("sqlalchemy").setLevel(logging.NOTSET)


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


# Every character str.splitlines() splits on, and every other C0, DEL and C1 control.
BREAKERS = "".join(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029])
FORGED = "\x85 2026-12-01T00:00:00.000Z INFO history_service.access [forged] GET /admin 200"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_record_is_one_line_whatever_control_characters_its_fields_hold(log_format: str) -> None:
    """R8: one record is one line, in every field: logger name, message, arguments and traceback."""
    try:
        raise ValueError(f"bad{BREAKERS}{FORGED}")
    except ValueError as exc:
        error = exc
    with captured(log_format) as buffer:
        logging.getLogger(f"history_service.x{FORGED}").error("m%s%s", BREAKERS, FORGED, exc_info=error)
    (line,) = buffer.getvalue().splitlines()
    assert not set(BREAKERS) & set(line)
    if log_format == "json":
        record = json.loads(line)
        assert record["message"] == f"m{BREAKERS}{FORGED}" and record["logger"].endswith(FORGED)
        assert f"ValueError: bad{BREAKERS}{FORGED}" in record["exception"]
    else:
        assert "\\u0085 2026-12-01T00:00:00.000Z INFO history_service.access [forged]" in line
        assert "\\nTraceback (most recent call last):\\n" in line and "\\u2028\\u2029" in line


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_an_access_line_for_a_path_with_a_c1_control_is_one_line(
    client: httpx.AsyncClient, log_format: str
) -> None:
    """R8: msgspec leaves U+0080-U+009F and U+2028 unescaped, which splitlines() splits on."""
    with captured(log_format, logging.INFO) as buffer:
        response = await client.get("/v1/sessions/a%C2%85b%E2%80%A8c/page")
    assert response.status_code == 422
    lines = buffer.getvalue().splitlines()
    assert all(line.startswith("{" if log_format == "json" else "20") for line in lines)
    (access,) = [line for line in lines if ACCESS_LOGGER in line and "INFO" in line]
    if log_format == "json":
        assert json.loads(access)["path"] == "/v1/sessions/a\x85b\u2028c/page"
    else:
        assert 'GET "/v1/sessions/a\\u0085b\\u2028c/page" 422' in access


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def store_failure(cause: Exception) -> StoreError:
    try:
        raise StoreError("store unavailable") from cause
    except StoreError as exc:
        return exc


def test_a_repeated_failure_shows_its_traceback_once_a_window_and_counts_the_others() -> None:
    """R7: the first of a kind with its traceback, then one line each, then a count and the next traceback."""
    clock = Clock()
    tracebacks = Tracebacks(window=10, clock=clock)
    logger = logging.getLogger("history_service.errors")
    with captured("json", logging.INFO) as buffer:
        for n in range(5):
            tracebacks.error(logger, store_failure(OSError("refused")), "failure %d", n)
        tracebacks.error(logger, store_failure(TimeoutError("slow")), "other kind")
        clock.now += 9
        tracebacks.error(logger, store_failure(OSError("refused")), "failure %d", 5)
        clock.now += 1
        tracebacks.error(logger, store_failure(OSError("refused")), "failure %d", 6)
        tracebacks.close()
    lines = json_lines(buffer)
    assert [(line["message"], "exception" in line) for line in lines] == [
        ("failure 0", True),
        *[(f"failure {n} (traceback logged before)", False) for n in range(1, 5)],
        ("other kind", True),
        ("failure 5 (traceback logged before)", False),
        ("StoreError from OSError repeated 5 times in the 10 s after its traceback", False),
        ("failure 6", True),
    ]
    assert all(line["level"] == "ERROR" for line in lines)


def test_a_repeated_warning_is_logged_once_a_window_and_then_counted() -> None:
    clock = Clock()
    warnings = Warnings(window=10, clock=clock)
    logger = logging.getLogger("history_service.durable.subscriptions")
    with captured("json", logging.INFO) as buffer:
        for _ in range(1000):
            warnings.warning(logger, "a delivery could not be queued")
        warnings.warning(logger, "another kind %d", 1)
        clock.now += 10
        warnings.warning(logger, "a delivery could not be queued")
        warnings.close()
    lines = json_lines(buffer)
    assert [line["message"] for line in lines] == [
        "a delivery could not be queued",
        "another kind 1",
        "a delivery could not be queued repeated 999 times in the 10 s after it was logged",
        "a delivery could not be queued",
    ]
    assert all(line["level"] == "WARNING" for line in lines)


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


def test_a_queued_record_keeps_the_request_id_of_the_thread_that_logged_it() -> None:
    logger = logging.getLogger("history_service.test")
    with queued() as (handler, buffer):
        token = REQUEST_ID.set("queued-1")
        logger.info("inside the request")
        REQUEST_ID.reset(token)
        logger.info("after it")
        handler.flush()
        lines = json_lines(buffer)
    assert [(line["message"], line["request_id"]) for line in lines] == [
        ("inside the request", "queued-1"),
        ("after it", None),
    ]


def test_a_warning_is_written_at_once_after_every_record_queued_before_it() -> None:
    logger = logging.getLogger("history_service.test")
    with queued() as (_, buffer):
        for n in range(200):
            logger.info("line %d", n)
        logger.warning("the warning")
        # No flush: the warning's own write carried every line queued before it.
        lines = json_lines(buffer)
    assert [line["message"] for line in lines] == [*(f"line {n}" for n in range(200)), "the warning"]


def test_the_writer_thread_writes_queued_lines_without_a_flush() -> None:
    logger = logging.getLogger("history_service.test")
    with queued("text") as (_, buffer):
        logger.info("written by the thread")
        deadline = time.monotonic() + 30
        while "written by the thread" not in buffer.getvalue():
            assert time.monotonic() < deadline, "the writer thread never wrote the line"
            time.sleep(0.01)


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


def test_past_its_bound_the_queue_is_written_by_the_caller() -> None:
    buffer = io.StringIO()
    # A writer that never wakes by itself: only the bound can write these lines.
    handler = QueuedLogHandler(Settings(log_format="json"), buffer, max_queued=5, every=3600)
    logger = logging.getLogger("history_service.test.bound")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        for n in range(6):
            logger.info("line %d", n)
        # The sixth found five queued: it wrote them and itself, without waiting for the thread.
        assert [line["message"] for line in json_lines(buffer)] == [f"line {n}" for n in range(6)]
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_after_close_nothing_is_lost_and_records_are_written_at_once() -> None:
    logger = logging.getLogger("history_service.test")
    with queued() as (handler, buffer):
        for n in range(50):
            logger.info("before %d", n)
        handler.close()
        assert not any(
            thread.name == "history-log-writer" and thread is handler._writer for thread in threading.enumerate()
        )
        logger.info("after close")
        lines = json_lines(buffer)
    assert [line["message"] for line in lines] == [*(f"before {n}" for n in range(50)), "after close"]


def test_no_access_line_is_lost_across_sigterm_under_load(tmp_path: Path) -> None:
    """A real server under load from 16 connections is stopped by SIGTERM: every answered request has its line."""
    server = ServerProcess("memory://", env={"HISTORY_AUTH": "none"})
    server.start("--log-format", "json")
    answered: list[str] = []
    stop = threading.Event()

    def load(worker: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for n in range(1_000_000):
                if stop.is_set():
                    return
                rid = f"load-{worker}-{n}"
                try:
                    response = client.get("/healthz", headers={"X-Request-ID": rid})
                except httpx.TransportError:
                    return
                if response.status_code == 200 and response.headers.get("X-Request-ID") == rid:
                    answered.append(rid)

    workers = [threading.Thread(target=load, args=(n,)) for n in range(16)]
    try:
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 30
        while len(answered) < 2_000:
            assert time.monotonic() < deadline, "the load never reached 2,000 answers"
            time.sleep(0.01)
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        # A graceful stop: uvicorn then raises the signal again, and the process dies of it.
        assert server.process.wait(30) == -signal.SIGTERM
        stop.set()
        for worker in workers:
            worker.join(30)
        output = server.stderr()
    finally:
        stop.set()
        server.stop()
    logged = {
        line["request_id"]
        for line in access_lines([json.loads(line) for line in output.splitlines() if line.startswith("{")])
    }
    assert len(answered) >= 2_000
    assert set(answered) <= logged
    assert '"message":"Finished server process' in output


@given(
    created=st.one_of(
        st.floats(min_value=0, max_value=4e9, allow_nan=False),
        st.integers(0, 4_000_000_000 * 1000).map(lambda ms: ms / 1000),
        st.integers(0, 4_000_000_000).map(lambda s: s + 0.9999995),
    )
)
def test_a_kept_second_stamps_each_record_as_datetime_would(created: float) -> None:
    stamps = Timestamps()
    expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert stamps(created) == expected
    # And again, from the second it keeps.
    assert stamps(created) == expected

"""The process's handler: configured once, queued INFO records written by a thread, nothing lost at exit."""

from __future__ import annotations

import io
import json
import logging
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from history_service.logs import REQUEST_ID, LogHandler, QueuedLogHandler, configure_logging
from history_service.settings import Settings
from testing.servers import ServerProcess
from tests.history_service.logs.conftest import access_lines, json_lines, queued

pytestmark = pytest.mark.anyio


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

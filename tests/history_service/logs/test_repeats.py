"""Records that repeat: the first of a kind in full, then counted within a window."""

from __future__ import annotations

import logging

import pytest

from history_service.logs import Tracebacks, Warnings
from persistence.errors import StoreError
from tests.history_service.logs.conftest import captured, json_lines

pytestmark = pytest.mark.anyio


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

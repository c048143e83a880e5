"""Request ids: each request's, held while it runs, and put on every record logged meanwhile.

Every request gets an id: the caller's ``X-Request-ID`` when it is one header of 1-128
safe characters, else a new one (`request_id`). The app's edge
(`history_service.edge.Edge`) holds it in `REQUEST_ID` while the request runs and echoes
it; `RequestIdFilter` puts it on every record logged meanwhile, whichever logger wrote it.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Callable
from contextvars import ContextVar
from typing import Final

__all__ = ["REQUEST_ID", "RequestIdFilter", "RequestIdSource", "current_request_id", "request_id"]

# A context variable, not a global: each request's task, and the tasks it starts, see their own.
REQUEST_ID: Final[ContextVar[str | None]] = ContextVar("history_request_id", default=None)
# Bounded, and nothing that could end a log line, quote a field or hide in a terminal.
_SAFE_ID: Final = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")


def current_request_id() -> str | None:
    """The id of the request this code runs for, or ``None`` outside one."""
    return REQUEST_ID.get()


def request_id(headers: list[tuple[bytes, bytes]], new: Callable[[], str] | None = None) -> str:
    """The caller's ``X-Request-ID`` when there is exactly one and it is safe to log and echo; else a new id.

    A new id is ``new()``, by default 32 random hex digits (`RequestIdSource` makes them cheaper).
    """
    given = [value for name, value in headers if name.lower() == b"x-request-id"]
    if len(given) == 1:
        text = given[0].decode("latin-1")
        if _SAFE_ID.fullmatch(text):
            return text
    return new() if new is not None else os.urandom(16).hex()


class RequestIdSource:
    """New request ids: 32 hex digits, a random prefix of 20 and a count of 12, unique without a syscall each."""

    def __init__(self) -> None:
        self._prefix = os.urandom(10).hex()
        self._count = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._count) & 0xFFFFFFFFFFFF:012x}"


class RequestIdFilter(logging.Filter):
    """Sets ``record.request_id`` to the current request's id (``None`` outside a request); drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True

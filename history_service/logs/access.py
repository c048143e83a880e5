"""The access log: one line per request, written when its response ends (a follow stream's when it ends).

The app's edge (`history_service.edge.Edge`) calls `log_access`. An access line names
the route template, not only the path, and never a credential, another request header or
a body (the event content).
"""

from __future__ import annotations

import logging
import time
from typing import Final

from starlette.types import Scope

from history_service.logs.formats import ACCESS_FORMAT, AccessLine
from history_service.logs.handlers import QueuedLogHandler
from history_service.logs.request_ids import REQUEST_ID

__all__ = ["ACCESS_LOGGER", "log_access", "route_template"]

ACCESS_LOGGER: Final = "history_service.access"


def log_access(logger: logging.Logger, scope: Scope, status: int, latency_ms: float, size: int, coding: str) -> None:
    """Log a request's access line at INFO on ``logger`` (`ACCESS_LOGGER`), with its ``access`` fields.

    The fields: ``method``, ``route`` (the template, ``None`` when no route matched),
    ``path``, ``status`` (500 when the app failed before it answered), ``latency_ms`` (to the
    end of the response), ``bytes`` (the body as sent, after content coding),
    ``content_coding`` and ``principal`` (``None`` when the request was refused before its
    caller was known).
    """
    if not logger.isEnabledFor(logging.INFO):
        return
    line = AccessLine(
        time.time(),
        logger.name,
        REQUEST_ID.get(),
        scope["method"],
        scope["path"],
        status,
        latency_ms,
        size,
        coding,
        _principal(scope),
        route_template(scope),
    )
    handler = _sole_queued(logger)
    if handler is not None and handler.put_access(line):
        return
    # The record made directly: the caller's frame, which `Logger.info` would look up, is always this one.
    fields = {"access": line.fields()}
    record = logger.makeRecord(
        logger.name, logging.INFO, __file__, 0, ACCESS_FORMAT, line.args(), None, "log_access", fields
    )
    logger.handle(record)


def _sole_queued(logger: logging.Logger) -> QueuedLogHandler | None:
    """The `QueuedLogHandler` that alone would handle an INFO record of ``logger``, as it is; else None.

    Then `log_access` queues an `AccessLine` there instead of a record: same line, less work.
    With any other handler or filter on the way (a test's capture, say), records go as usual.
    """
    if logger.filters:
        return None
    found: QueuedLogHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if found is not None or type(handler) is not QueuedLogHandler or len(handler.filters) != 1:
                return None
            if handler.level > logging.INFO:
                return None
            found = handler
        current = current.parent if current.propagate else None
    return found


def route_template(scope: Scope) -> str | None:
    """The template the router matched (set on the scope as it routes), never the raw path; None if none."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return None
    # A route under a mount (`/ds`) is named with the mount's path before its own.
    root: str = scope.get("root_path", "")
    mounted = root[len(scope.get("app_root_path", root)) :]
    return mounted + path


def _principal(scope: Scope) -> str | None:
    # `history_service.auth.principal` leaves the caller it found in the request's state.
    state = scope.get("state")
    who = state.get("principal") if isinstance(state, dict) else None
    return who if isinstance(who, str) else None

"""Logs: one line per record, as text or JSON, each carrying the id of the request it belongs to.

Its modules, one concept each:

* `history_service.logs.request_ids`: each request's id, held while it runs (`REQUEST_ID`)
  and put on every record logged meanwhile (`RequestIdFilter`);
* `history_service.logs.access`: the access line each request writes when its response
  ends (`log_access`);
* `history_service.logs.formats`: the text and JSON lines, each one line whatever a record
  holds;
* `history_service.logs.handlers`: the process's handler (`configure_logging`), writing
  INFO and DEBUG records from a thread of its own;
* `history_service.logs.repeats`: a failure or a warning that repeats, shown once a window
  and then counted (`Tracebacks`, `Warnings`).

Never logged: credentials and other request headers, and request or response bodies (the
event content).
"""

from __future__ import annotations

from history_service.logs.access import ACCESS_LOGGER, log_access, route_template
from history_service.logs.formats import AccessLine, JsonFormatter, TextFormatter, Timestamps, shown
from history_service.logs.handlers import LogHandler, QueuedLogHandler, configure_logging, finish_queued_logs
from history_service.logs.repeats import Tracebacks, Warnings
from history_service.logs.request_ids import (
    REQUEST_ID,
    RequestIdFilter,
    RequestIdSource,
    current_request_id,
    request_id,
)

__all__ = [
    "ACCESS_LOGGER",
    "AccessLine",
    "configure_logging",
    "current_request_id",
    "finish_queued_logs",
    "JsonFormatter",
    "log_access",
    "LogHandler",
    "QueuedLogHandler",
    "REQUEST_ID",
    "request_id",
    "RequestIdFilter",
    "RequestIdSource",
    "route_template",
    "shown",
    "TextFormatter",
    "Timestamps",
    "Tracebacks",
    "Warnings",
]

"""Logs: one line per record, as text or JSON, each carrying the id of the request it belongs to.

Every request gets an id: the caller's ``X-Request-ID`` when it is one header of 1-128
safe characters, else a new one. `AccessLog`, a pure ASGI middleware (so a follow stream
passes through unbuffered), holds the id in a context variable while the request runs,
echoes it in the response, and writes one access line when the response ends, a follow
stream's when the stream ends. `RequestIdFilter` puts the id on every record logged
meanwhile, whichever logger wrote it.

Never logged: credentials and other request headers, and request or response bodies (the
event content). An access line names the route template, not only the path. SQLAlchemy
logs statements with their parameters at INFO and DEBUG, so its loggers are held at
WARNING whatever the level.
"""

from __future__ import annotations

import logging
import re
import sys
import time
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final, TextIO

import msgspec
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from history_service.settings import Settings

__all__ = [
    "ACCESS_LOGGER",
    "AccessLog",
    "JsonFormatter",
    "LogHandler",
    "RequestIdFilter",
    "TextFormatter",
    "configure_logging",
    "current_request_id",
    "request_id",
    "route_template",
]

ACCESS_LOGGER: Final = "history_service.access"
# A context variable, not a global: each request's task, and the tasks it starts, see their own.
_REQUEST_ID: Final[ContextVar[str | None]] = ContextVar("history_request_id", default=None)
# Bounded, and nothing that could end a log line, quote a field or hide in a terminal.
_SAFE_ID: Final = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
_PLAIN: Final = re.compile(r"[\x21-\x7e]+")
# Loggers that write data they are handed (SQL parameters: event content) below WARNING.
_HELD_AT_WARNING: Final = ("sqlalchemy",)
# uvicorn's own loggers: its access log is replaced by ours; its other lines go through our handler.
_UVICORN: Final = ("uvicorn", "uvicorn.error", "uvicorn.asgi")


def current_request_id() -> str | None:
    """The id of the request this code runs for, or ``None`` outside one."""
    return _REQUEST_ID.get()


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The caller's ``X-Request-ID`` when there is exactly one and it is safe to log and echo; else a new id."""
    given = [value for name, value in headers if name.lower() == b"x-request-id"]
    if len(given) == 1:
        text = given[0].decode("latin-1")
        if _SAFE_ID.fullmatch(text):
            return text
    return uuid.uuid4().hex


class RequestIdFilter(logging.Filter):
    """Sets ``record.request_id`` to the current request's id (``None`` outside a request); drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _REQUEST_ID.get()
        return True


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``message``, ``request_id``, the access fields.

    A record's ``access`` mapping (see `AccessLog`) adds its fields at the top level; a
    traceback goes in ``exception`` as one string, so every record stays one line.
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            line.update(access)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return msgspec.json.encode(line).decode()


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger> [<request id>] <message>``, a traceback on the lines after."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_timestamp(record)} {record.levelname} {record.name} [{getattr(record, 'request_id', None) or '-'}]"
        text = f"{text} {record.getMessage()}"
        if record.exc_info:
            text = f"{text}\n{self.formatException(record.exc_info)}"
        if record.stack_info:
            text = f"{text}\n{self.formatStack(record.stack_info)}"
        return text


class LogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes ``settings.log_format`` lines to ``stream`` (stderr), each with its request's id."""

    def __init__(self, settings: Settings, stream: TextIO | None = None) -> None:
        super().__init__(stream if stream is not None else sys.stderr)
        self.setFormatter(JsonFormatter() if settings.log_format == "json" else TextFormatter())
        self.addFilter(RequestIdFilter())


def configure_logging(settings: Settings, *, stream: TextIO | None = None) -> None:
    """Send every record at ``settings.log_level`` or above, the app's, uvicorn's and the stores', to one `LogHandler`.

    For the process's edge (``serve``, the uvicorn factory), never for an app in a test: it
    sets up the root logger, replacing a `LogHandler` an earlier call put there. uvicorn's
    access log is turned off, since `AccessLog` writes ours; uvicorn's other loggers lose
    their own handlers and pass their records on.
    """
    level = logging.getLevelNamesMapping()[settings.log_level.upper()]
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, LogHandler)]:
        root.removeHandler(handler)
    root.addHandler(LogHandler(settings, stream))
    root.setLevel(level)
    for name in _UVICORN:
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
        uvicorn_logger.setLevel(logging.NOTSET)
    access = logging.getLogger("uvicorn.access")
    access.handlers.clear()
    access.propagate = False
    access.disabled = True
    for name in _HELD_AT_WARNING:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))


def _shown(value: object) -> str:
    """A value as one token of a text line: as it is when plain, else JSON-quoted (no line breaks, no spaces)."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) and '"' not in text else msgspec.json.encode(text).decode()


def route_template(scope: Scope) -> str | None:
    """The template the router matched (set on the scope as it routes), never the raw path; None if none."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else None


def _principal(scope: Scope) -> str | None:
    # `history_service.auth.principal` leaves the caller it found in the request's state.
    state = scope.get("state")
    who = state.get("principal") if isinstance(state, dict) else None
    return who if isinstance(who, str) else None


class AccessLog:
    """Pure ASGI middleware: an id for every HTTP request, echoed as ``X-Request-ID``, and one access line at its end.

    The line is logged at INFO on `ACCESS_LOGGER` when the response has ended, so a follow
    stream's comes when the stream closes; at DEBUG, a line says when the request arrived.
    The access line's ``access`` fields: ``method``, ``route`` (the template, ``None`` when
    no route matched), ``path``, ``status`` (500 when the app failed before it answered),
    ``latency_ms`` (to the end of the response), ``bytes`` (the body as sent, after content
    coding), ``content_coding`` and ``principal`` (``None`` when the request was refused
    before its caller was known).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.logger = logging.getLogger(ACCESS_LOGGER)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope["headers"])
        token = _REQUEST_ID.set(rid)
        started = time.perf_counter()
        # A follow stream's access line comes only when it ends, maybe hours later: say when it began.
        self.logger.debug("%s %s started", scope["method"], _shown(scope["path"]))
        status: int | None = None
        coding = "identity"
        size = 0

        async def sending(message: Message) -> None:
            nonlocal status, coding, size
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers.append("X-Request-ID", rid)
                coding = headers.get("content-encoding", "identity")
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._log(scope, status or 500, (time.perf_counter() - started) * 1000, size, coding)
            # An app that failed before answering is answered by Starlette's error handler, outside
            # this middleware: the id stays set so that handler's log line carries it too.
            if status is not None:
                _REQUEST_ID.reset(token)

    def _log(self, scope: Scope, status: int, latency_ms: float, size: int, coding: str) -> None:
        route, who = route_template(scope), _principal(scope)
        fields = {
            "method": scope["method"],
            "route": route,
            "path": scope["path"],
            "status": status,
            "latency_ms": round(latency_ms, 3),
            "bytes": size,
            "content_coding": coding,
            "principal": who,
        }
        self.logger.info(
            "%s %s %d %.1fms %dB %s principal=%s route=%s",
            scope["method"],
            _shown(scope["path"]),
            status,
            latency_ms,
            size,
            _shown(coding),
            "-" if who is None else _shown(who),
            "-" if route is None else _shown(route),
            extra={"access": fields},
        )

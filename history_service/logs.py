"""Logs: one line per record, as text or JSON, each carrying the id of the request it belongs to.

Every request gets an id: the caller's ``X-Request-ID`` when it is one header of 1-128
safe characters, else a new one. `RequestIds`, the outermost layer of the app, holds the id
in a context variable while the request runs and echoes it in every response, a 500 of the
outer error handler included. `AccessLog`, a pure ASGI middleware (so a follow stream
passes through unbuffered), writes one access line when the response ends, a follow
stream's when the stream ends. `RequestIdFilter` puts the id on every record logged
meanwhile, whichever logger wrote it.

A record is one line in either format: every control character and line separator in it,
a traceback's line breaks included, is written as an escape. `Tracebacks` keeps a failure
that repeats, such as every request's during a store outage, from writing its traceback
each time.

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
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
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
    "RequestIds",
    "TextFormatter",
    "Tracebacks",
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
# What could end a line or hide in a terminal: C0, DEL, C1, and the separators str.splitlines() also
# splits on. JSON escapes only C0 (msgspec leaves the rest), so both formats escape these last.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
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


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT.get(char) or f"\\u{ord(char):04x}"


def _one_line(text: str) -> str:
    """``text`` with every control character and line separator written as a JSON-style escape (``\\n``, ``\\u0085``).

    The escapes are valid inside a JSON string too, so a JSON line stays the same value.
    """
    return _CONTROL.sub(_escape, text)


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
        return _one_line(msgspec.json.encode(line).decode())


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger> [<request id>] <message>``, then a traceback, all on one line (see `_one_line`)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_timestamp(record)} {record.levelname} {record.name} [{getattr(record, 'request_id', None) or '-'}]"
        text = f"{text} {record.getMessage()}"
        if record.exc_info:
            text = f"{text}\n{self.formatException(record.exc_info)}"
        if record.stack_info:
            text = f"{text}\n{self.formatStack(record.stack_info)}"
        return _one_line(text)


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


class RequestIds:
    """Pure ASGI middleware, outermost: each request's id (`request_id`) in a context variable and ``X-Request-ID``.

    It wraps Starlette's own outer error handler too, so the 500 that handler sends for an
    error nothing else caught carries the id like every other response.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope["headers"])
        token = _REQUEST_ID.set(rid)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("X-Request-ID", rid)
            await send(message)

        await self.app(scope, receive, sending)
        # Left set when the app raised, so the server's own line about the error carries the id too.
        _REQUEST_ID.reset(token)


class AccessLog:
    """Pure ASGI middleware: one access line for every HTTP request, at its end, with the id `RequestIds` gave it.

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
                coding = MutableHeaders(scope=message).get("content-encoding", "identity")
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._log(scope, status or 500, (time.perf_counter() - started) * 1000, size, coding)

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


@dataclass
class _Repeats:
    logger: logging.Logger
    shown_at: float
    count: int = 0


class Tracebacks:
    """Which logged failures carry their traceback: the first of a kind, then one a window; the others are counted.

    A kind is the failure's type and its cause's, so a store outage that fails every
    request is one kind. Each failure is still one line; within ``window`` seconds of its
    kind's last traceback it has none. Once the window has passed, the next failure of
    any kind first logs, for each kind whose window ended, how many went without.
    """

    def __init__(self, *, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self.clock = clock
        self._kinds: dict[tuple[str, ...], _Repeats] = {}

    def error(self, logger: logging.Logger, exc: BaseException, message: str, *args: object) -> None:
        """Log ``message % args`` at ERROR, with ``exc``'s traceback unless its kind showed one this window."""
        now = self.clock()
        self._report(now)
        kind = _kind(exc)
        seen = self._kinds.get(kind)
        if seen is None:
            self._kinds[kind] = _Repeats(logger, now)
            logger.error(message, *args, exc_info=exc)
        else:
            seen.count += 1
            logger.error(f"{message} (traceback logged before)", *args)

    def close(self) -> None:
        """Log the count of every kind still in its window: for when the app stops."""
        self._report(None)

    def _report(self, now: float | None) -> None:
        for kind, seen in list(self._kinds.items()):
            if now is None or now - seen.shown_at >= self.window:
                del self._kinds[kind]
                if seen.count:
                    seen.logger.error(
                        "%s repeated %d times in the %g s after its traceback",
                        " from ".join(kind),
                        seen.count,
                        self.window,
                    )


def _kind(exc: BaseException) -> tuple[str, ...]:
    cause = exc.__cause__ or exc.__context__
    names = [type(exc).__qualname__]
    if cause is not None:
        names.append(type(cause).__qualname__)
    return tuple(names)

"""Logs: one line per record, as text or JSON, each carrying the id of the request it belongs to.

Every request gets an id: the caller's ``X-Request-ID`` when it is one header of 1-128
safe characters, else a new one (`request_id`). The app's edge
(`history_service.edge.Edge`) holds it in `REQUEST_ID` while the request runs, echoes it,
and writes the request's access line (`log_access`) when the response ends, a follow
stream's when the stream ends. `RequestIdFilter` puts the id on every record logged
meanwhile, whichever logger wrote it.

The process's handler (`configure_logging`) is a `QueuedLogHandler`: access lines and
other INFO and DEBUG records are formatted and written by a thread of its own, many to a
write, so they cost the event loop little; warnings and errors are written at once.

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

import itertools
import logging
import math
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple, TextIO

import msgspec
from starlette.types import Scope

from history_service.control import CONTROL_CLASS
from history_service.settings import Settings

__all__ = [
    "ACCESS_LOGGER",
    "REQUEST_ID",
    "JsonFormatter",
    "LogHandler",
    "QueuedLogHandler",
    "AccessLine",
    "RequestIdFilter",
    "RequestIdSource",
    "TextFormatter",
    "Timestamps",
    "Tracebacks",
    "Warnings",
    "configure_logging",
    "current_request_id",
    "finish_queued_logs",
    "log_access",
    "request_id",
    "route_template",
    "shown",
]

ACCESS_LOGGER: Final = "history_service.access"
# A context variable, not a global: each request's task, and the tasks it starts, see their own.
REQUEST_ID: Final[ContextVar[str | None]] = ContextVar("history_request_id", default=None)
# Bounded, and nothing that could end a log line, quote a field or hide in a terminal.
_SAFE_ID: Final = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
_PLAIN: Final = re.compile(r"[\x21-\x7e]+")
# What could end a line or hide in a terminal: C0, DEL, C1, and the separators str.splitlines() also
# splits on. JSON escapes only C0 (msgspec leaves the rest), so both formats escape these last.
_CONTROL: Final = re.compile(f"[{CONTROL_CLASS}\u2028\u2029]")
_SHORT: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Loggers that write data they are handed (SQL parameters: event content) below WARNING.
_HELD_AT_WARNING: Final = ("sqlalchemy",)
# uvicorn's own loggers: its access log is replaced by ours; its other lines go through our handler.
_UVICORN: Final = ("uvicorn", "uvicorn.error", "uvicorn.asgi")
_ACCESS_LINE: Final = "%s %s %d %.1fms %dB %s principal=%s route=%s"


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


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT.get(char) or f"\\u{ord(char):04x}"


def _one_line(text: str) -> str:
    """``text`` with every control character and line separator written as a JSON-style escape (``\\n``, ``\\u0085``).

    The escapes are valid inside a JSON string too, so a JSON line stays the same value.
    """
    return _CONTROL.sub(_escape, text)


class Timestamps:
    """A record's UTC time, ISO 8601 to the millisecond: the last second's date and time are kept, so a stamp costs
    only its milliseconds.

    The milliseconds are those `datetime.fromtimestamp` gives (microseconds rounded half to
    even, then cut), so each stamp is what ``datetime.isoformat(timespec="milliseconds")`` writes.
    """

    def __init__(self) -> None:
        # One attribute, replaced whole: a stamp made on another thread meanwhile reads a consistent pair.
        self._last: tuple[int, str] = (-1, "")

    def __call__(self, created: float) -> str:
        second = math.floor(created)
        micros = round((created - second) * 1e6)
        if micros >= 1_000_000:
            second, micros = second + 1, micros - 1_000_000
        last = self._last
        if last[0] != second:
            last = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
            self._last = last
        return f"{last[1]}.{micros // 1000:03d}Z"


class AccessLine(NamedTuple):
    """An access line as `log_access` queues it for a `QueuedLogHandler`: what its record would hold, no more."""

    created: float
    logger: str
    request_id: str | None
    args: tuple[object, ...]
    fields: dict[str, Any]


class _Parts(NamedTuple):
    created: float
    level: str
    logger: str
    message: str
    request_id: str | None
    access: dict[str, Any] | None = None
    exception: str | None = None
    stack: str | None = None


class _LineFormatter(logging.Formatter):
    """Formats a record, or an `AccessLine`, as one line (`line`) from the same parts."""

    def __init__(self) -> None:
        super().__init__()
        self.timestamp = Timestamps()

    def format(self, record: logging.LogRecord) -> str:
        access = getattr(record, "access", None)
        return self.line(
            _Parts(
                record.created,
                record.levelname,
                record.name,
                record.getMessage(),
                getattr(record, "request_id", None),
                access if isinstance(access, dict) else None,
                self.formatException(record.exc_info) if record.exc_info else None,
                self.formatStack(record.stack_info) if record.stack_info else None,
            )
        )

    def format_access(self, line: AccessLine) -> str:
        return self.line(
            _Parts(line.created, "INFO", line.logger, _ACCESS_LINE % line.args, line.request_id, line.fields)
        )

    def line(self, parts: _Parts) -> str:
        raise NotImplementedError


class JsonFormatter(_LineFormatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``message``, ``request_id``, the access fields.

    A record's ``access`` mapping (see `log_access`) adds its fields at the top level; a
    traceback goes in ``exception`` as one string, so every record stays one line.
    """

    def line(self, parts: _Parts) -> str:
        line: dict[str, Any] = {
            "ts": self.timestamp(parts.created),
            "level": parts.level,
            "logger": parts.logger,
            "message": parts.message,
            "request_id": parts.request_id,
        }
        if parts.access is not None:
            line.update(parts.access)
        if parts.exception is not None:
            line["exception"] = parts.exception
        if parts.stack is not None:
            line["stack"] = parts.stack
        return _one_line(msgspec.json.encode(line).decode())


class TextFormatter(_LineFormatter):
    """``<ts> <LEVEL> <logger> [<request id>] <message>``, then a traceback, all on one line (see `_one_line`)."""

    def line(self, parts: _Parts) -> str:
        text = (
            f"{self.timestamp(parts.created)} {parts.level} {parts.logger} [{parts.request_id or '-'}] {parts.message}"
        )
        if parts.exception is not None:
            text = f"{text}\n{parts.exception}"
        if parts.stack is not None:
            text = f"{text}\n{parts.stack}"
        return _one_line(text)


class LogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes ``settings.log_format`` lines to ``stream`` (stderr), each with its request's id."""

    def __init__(self, settings: Settings, stream: TextIO | None = None) -> None:
        super().__init__(stream if stream is not None else sys.stderr)
        self.line_formatter: _LineFormatter = JsonFormatter() if settings.log_format == "json" else TextFormatter()
        self.setFormatter(self.line_formatter)
        self.addFilter(RequestIdFilter())


class QueuedLogHandler(LogHandler):
    """A `LogHandler` whose INFO and DEBUG records are formatted and written by a thread of its own, in batches.

    So the access line of every request costs the event loop only the record and a queue put.
    A record's request id is read first, on the caller's thread. A WARNING or worse is
    written at once, on the caller's thread, after every record queued before it: nothing
    overtakes, and an error is written before the process could crash. `flush` writes what
    is queued. The writer thread drains the queue and stops once the main thread has ended
    (or at `finish`); every record after that is written at once, so none is lost at exit.
    The thread writes every ``every`` seconds. The queue holds at most ``max_queued``
    records: past it, the caller writes them all, so a stalled stderr slows the process
    down as a plain handler would, and memory stays bounded.
    """

    def __init__(
        self, settings: Settings, stream: TextIO | None = None, *, max_queued: int = 10_000, every: float = 0.05
    ) -> None:
        super().__init__(settings, stream)
        self.max_queued = max_queued
        self.every = every
        self._stopping = threading.Event()
        self._queue: queue.SimpleQueue[logging.LogRecord | AccessLine] = queue.SimpleQueue()
        # Held only to queue a record, and by the writer as it stops: a record is queued only while it runs.
        self._gate = threading.Lock()
        # Held to write: by the writer for each batch, and by a caller that writes at once.
        self._writing = threading.RLock()
        self._open = True
        self._writer = threading.Thread(target=self._run, name="history-log-writer")
        self._writer.start()

    def handle(self, record: logging.LogRecord) -> bool:
        kept = self.filter(record)
        if not kept:
            return False
        if isinstance(kept, logging.LogRecord):
            record = kept
        if record.levelno < logging.WARNING:
            with self._gate:
                if self._open and self._queue.qsize() < self.max_queued:
                    self._queue.put(record)
                    return True
        with self._writing:
            self._write(after=record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        with self._writing:
            self._write(after=record)

    def put_access(self, line: AccessLine) -> bool:
        """Queue an access line (see `log_access`); False when it must be logged as a record instead."""
        with self._gate:
            if self._open and self._queue.qsize() < self.max_queued:
                self._queue.put(line)
                return True
        return False

    def flush(self) -> None:
        with self._writing:
            self._write()

    def finish(self) -> None:
        """Write what is queued and stop the writer: every record from now on is written at once."""
        self._stop()
        if self._writer is not threading.current_thread():
            self._writer.join()
        with self._writing:
            self._write()

    def close(self) -> None:
        self.finish()
        super().close()

    def _stop(self) -> None:
        with self._gate:
            self._open = False
        self._stopping.set()

    def _run(self) -> None:
        # It sleeps rather than waits on the queue: a waiting thread would be woken, and take the
        # GIL from the event loop, for every record; asleep, it takes each batch in one go.
        main = threading.main_thread()
        while True:
            self._stopping.wait(self.every)
            if not main.is_alive():
                self._stop()
            with self._writing:
                self._write()
                if not self._open:
                    return

    def _write(self, *, after: logging.LogRecord | None = None) -> None:
        """Write every queued record, then ``after``, in one write; the caller holds ``_writing``."""
        records: list[logging.LogRecord | AccessLine] = []
        while True:
            try:
                queued = self._queue.get_nowait()
            except queue.Empty:
                break
            records.append(queued)
        if after is not None:
            records.append(after)
        if not records:
            return
        lines = []
        for record in records:
            try:
                if isinstance(record, AccessLine):
                    lines.append(self.line_formatter.format_access(record) + self.terminator)
                else:
                    lines.append(self.format(record) + self.terminator)
            except Exception:
                self.handleError(record if isinstance(record, logging.LogRecord) else logging.makeLogRecord({}))
        try:
            self.stream.write("".join(lines))
            self.stream.flush()
        except Exception:
            last = records[-1]
            self.handleError(last if isinstance(last, logging.LogRecord) else logging.makeLogRecord({}))


def finish_queued_logs() -> None:
    """`QueuedLogHandler.finish` every such handler of the root logger: for the end of the app's lifespan.

    uvicorn, once shut down by a signal, raises that signal again, and the process dies of it
    before its threads could write; from here on, every record is written at once.
    """
    for handler in logging.getLogger().handlers:
        if isinstance(handler, QueuedLogHandler):
            handler.finish()


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
        handler.close()
    root.addHandler(QueuedLogHandler(settings, stream))
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


def shown(value: object) -> str:
    """A value as one token of a text line: as it is when plain, else JSON-quoted (no line breaks, no spaces)."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) and '"' not in text else msgspec.json.encode(text).decode()


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
    args = (
        scope["method"],
        shown(scope["path"]),
        status,
        latency_ms,
        size,
        shown(coding),
        "-" if who is None else shown(who),
        "-" if route is None else shown(route),
    )
    handler = _sole_queued(logger)
    if handler is not None and handler.put_access(AccessLine(time.time(), logger.name, REQUEST_ID.get(), args, fields)):
        return
    # The record made directly: the caller's frame, which `Logger.info` would look up, is always this one.
    record = logger.makeRecord(
        logger.name, logging.INFO, __file__, 0, _ACCESS_LINE, args, None, "log_access", {"access": fields}
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


@dataclass
class _Repeats:
    logger: logging.Logger
    shown_at: float
    count: int = 0


class _Windows:
    """Kinds of record that repeat: the first of a kind is shown, then the others within ``window`` seconds counted.

    Once a kind's window has passed, the next record of any kind first logs how many went unshown.
    """

    def __init__(self, window: float, clock: Callable[[], float], level: int, after: str) -> None:
        self.window = window
        self.clock = clock
        self._level = level
        self._after = after
        self._kinds: dict[tuple[str, ...], _Repeats] = {}

    def _shown(self, logger: logging.Logger, kind: tuple[str, ...]) -> bool:
        """Whether a record of ``kind`` is shown now in full; else it is counted."""
        now = self.clock()
        self._report(now)
        seen = self._kinds.get(kind)
        if seen is None:
            self._kinds[kind] = _Repeats(logger, now)
            return True
        seen.count += 1
        return False

    def close(self) -> None:
        """Log the count of every kind still in its window: for when the app stops."""
        self._report(None)

    def _report(self, now: float | None) -> None:
        for kind, seen in list(self._kinds.items()):
            if now is None or now - seen.shown_at >= self.window:
                del self._kinds[kind]
                if seen.count:
                    seen.logger.log(
                        self._level,
                        "%s repeated %d times in the %g s after %s",
                        " from ".join(kind),
                        seen.count,
                        self.window,
                        self._after,
                    )


class Tracebacks(_Windows):
    """Which logged failures carry their traceback: the first of a kind, then one a window; the others are counted.

    A kind is the failure's type and its cause's, so a store outage that fails every
    request is one kind. Each failure is still one line; within ``window`` seconds of its
    kind's last traceback it has none. Once the window has passed, the next failure of
    any kind first logs, for each kind whose window ended, how many went without.
    """

    def __init__(self, *, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(window, clock, logging.ERROR, "its traceback")

    def error(self, logger: logging.Logger, exc: BaseException, message: str, *args: object) -> None:
        """Log ``message % args`` at ERROR, with ``exc``'s traceback unless its kind showed one this window."""
        if self._shown(logger, _kind(exc)):
            logger.error(message, *args, exc_info=exc)
        else:
            logger.error(f"{message} (traceback logged before)", *args)


class Warnings(_Windows):
    """Warnings that can repeat without end (one per subscription a burst touches): one line a kind a window.

    A kind is the warning's message template; the first of a window is logged, the rest
    only counted, and the count is logged once the window has passed.
    """

    def __init__(self, *, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(window, clock, logging.WARNING, "it was logged")

    def warning(self, logger: logging.Logger, message: str, *args: object, exc_info: bool = False) -> None:
        """Log ``message % args`` at WARNING unless a warning of the same ``message`` was logged this window."""
        if self._shown(logger, (message,)):
            logger.warning(message, *args, exc_info=exc_info)


def _kind(exc: BaseException) -> tuple[str, ...]:
    cause = exc.__cause__ or exc.__context__
    names = [type(exc).__qualname__]
    if cause is not None:
        names.append(type(cause).__qualname__)
    return tuple(names)

"""The process's log handler: every record of the app, uvicorn and the stores, to stderr, one line each.

The handler `configure_logging` installs is a `QueuedLogHandler`: access lines and other
INFO and DEBUG records are formatted and written by a thread of its own, many to a write,
so they cost the event loop little; warnings and errors are written at once.

SQLAlchemy logs statements with their parameters at INFO and DEBUG, so its loggers are
held at WARNING whatever the level.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
from typing import Final, TextIO

from history_service.logs.formats import AccessLine, JsonFormatter, LineFormatter, TextFormatter
from history_service.logs.request_ids import RequestIdFilter
from history_service.settings import Settings

__all__ = ["LogHandler", "QueuedLogHandler", "configure_logging", "finish_queued_logs"]

# Loggers that write data they are handed (SQL parameters: event content) below WARNING.
_HELD_AT_WARNING: Final = ("sqlalchemy",)
# uvicorn's own loggers: its access log is replaced by ours; its other lines go through our handler.
_UVICORN: Final = ("uvicorn", "uvicorn.error", "uvicorn.asgi")


class LogHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes ``settings.log_format`` lines to ``stream`` (stderr), each with its request's id."""

    def __init__(self, settings: Settings, stream: TextIO | None = None) -> None:
        super().__init__(stream if stream is not None else sys.stderr)
        self.line_formatter: LineFormatter = JsonFormatter() if settings.log_format == "json" else TextFormatter()
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

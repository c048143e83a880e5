"""An incremental ``text/event-stream`` decoder (the WHATWG event-stream rules).

Bytes go in as they arrive, in chunks of any size; complete events come out. Lines end
with CRLF, LF or CR, including a CR at the end of one chunk and its LF at the start of
the next. ``data`` lines are joined with LF, comments are skipped, an ``id`` holding NUL
is ignored, and ``retry`` is kept for the reconnect delay.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SSEDecoder", "ServerSentEvent"]


class ServerSentEvent(NamedTuple):
    """One dispatched event, with the stream's last event id and ``retry`` (ms) when it was dispatched."""

    event: str
    data: bytes
    id: str | None
    retry: int | None = None


class SSEDecoder:
    """Turns event-stream bytes into `ServerSentEvent` values. ``retry`` is the last ``retry`` in ms."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._event = b""
        self._data: list[bytes] = []
        self.last_event_id: str | None = None
        self.retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Every event the chunk completes, in order."""
        if b"\n" not in chunk and b"\r" not in chunk:
            # Part of a long line: keep the pieces and join them once, when the line ends.
            self._pending.append(chunk)
            return []
        buffer = b"".join((*self._pending, chunk))
        # A CR at the very end may be the first half of a CRLF split across chunks.
        hold_cr = buffer.endswith(b"\r")
        lines = buffer.splitlines(keepends=True)
        tail = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
        if hold_cr:
            tail = lines.pop() if lines else tail
        self._pending = [tail] if tail else []
        out: list[ServerSentEvent] = []
        for line in lines:
            event = self._line(line.rstrip(b"\r\n"))
            if event is not None:
                out.append(event)
        return out

    def _line(self, line: bytes) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(b":"):
            return None
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        elif name == b"id":
            if b"\0" not in value:
                self.last_event_id = value.decode("utf-8", "replace")
        elif name == b"retry":
            if value.isdigit():
                self.retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], b""
        if not data:
            return None
        return ServerSentEvent(
            event.decode("utf-8", "replace") or "message", b"\n".join(data), self.last_event_id, self.retry
        )

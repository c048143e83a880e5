"""The client's error tree.

- `ClientError`: the root; every error this package raises on purpose is one.
  - `ServiceError`: the service answered with a non-2xx status.
  - `TransportError`: the service could not be reached, or the connection broke and
    the retries ran out.
  - `ProtocolError`: the service sent something that breaks the wire contract. The
    client stops rather than yield an event it cannot prove exact.
    - `PageContinuityError`: a page does not end at its cursor, its records overlap,
      leave a gap or have an inverted range, or two pages do not join.
    - `StreamOverlapError`: a live record partly overlaps what was already delivered.
    - `ResumeBehindError`: a resumed stream opened behind the last delivered seq.
  - `CursorAheadError`: ``follow`` asked to resume after a seq the session does not have.
  - `SessionDeletedError`: the session a follow or a read of several pages was of is gone:
    deleted (docs/protocol.md §6.4), and perhaps created again as another incarnation (§2.5).
"""

from __future__ import annotations

import httpx

__all__ = [
    "ClientError",
    "CursorAheadError",
    "PageContinuityError",
    "ProtocolError",
    "ResumeBehindError",
    "ServiceError",
    "SessionDeletedError",
    "StreamOverlapError",
    "TransportError",
    "describe",
]


class ClientError(Exception):
    """The root of every error the client raises on purpose."""


class ServiceError(ClientError):
    """Raised when the service answers with a non-2xx status.

    ``code`` and ``message`` come from the service's ``{"error": {"code", "message"}}``
    body; a body that is not of that shape gives ``code`` ``"http_<status>"``.
    """

    def __init__(self, message: str, *, status_code: int, code: str, response: httpx.Response | None = None) -> None:
        super().__init__(f"{status_code} {code}: {message}")
        self.message = message
        self.status_code = status_code
        self.code = code
        self.response = response


class TransportError(ClientError):
    """Raised when the service cannot be reached, or a follow stream's reconnects run out."""


class ProtocolError(ClientError):
    """Raised when a response breaks the wire contract: malformed JSON, an invalid row, a bad frame."""


class PageContinuityError(ProtocolError):
    """Raised when records do not cover their interval exactly, or pages do not join."""


class StreamOverlapError(ProtocolError):
    """Raised when a live record partly overlaps the events already delivered."""


class ResumeBehindError(ProtocolError):
    """Raised when a reconnected stream opens at a cursor behind the last delivered seq."""


class CursorAheadError(ClientError):
    """Raised when ``follow`` resumes after a seq beyond the session's head (``head_seq``)."""

    def __init__(self, after: int, head_seq: int) -> None:
        super().__init__(f"cannot resume after seq {after}: the session's head is {head_seq}")
        self.after = after
        self.head_seq = head_seq


class SessionDeletedError(ClientError):
    """Raised when the session being read was deleted (docs/protocol.md §6.4); nothing of it is read again.

    A follow stream said so, or a request that named the session's incarnation (§2.5) got
    404 ``session_not_found``: the id is unknown now, or it holds a session created again,
    whose events the read must not mix in. ``incarnation`` is the one that is gone, when
    the client knew it.
    """

    def __init__(self, message: str, *, incarnation: str | None) -> None:
        super().__init__(message)
        self.incarnation = incarnation


def describe(error: BaseException) -> str:
    """An error as one line: httpx's errors are named by their class, since their messages often are not."""
    lines = str(error).splitlines()
    text = lines[0] if lines else ""
    if isinstance(error, httpx.HTTPError):
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text or type(error).__name__

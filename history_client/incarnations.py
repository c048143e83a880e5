"""The incarnation a read is of (docs/protocol.md §2.5), so that it never mixes two sessions of one id.

An id may be deleted and created again. A read that takes several requests (pages walked
back, a follow that reconnects and repairs gaps) learns the incarnation from its first
answer, or from its caller, and names it on every later request: the service then answers
404 ``session_not_found`` once that session is gone, which the client raises as
`SessionDeletedError`, rather than serve the next session's events as this one's.

A service from before incarnations names none; a read of it learns nothing and pins nothing.
"""

from __future__ import annotations

from typing import Final

from codec import parse_event_id
from history_client.errors import ProtocolError, ServiceError, SessionDeletedError

__all__ = ["INCARNATION_HEADER", "Pin", "deleted_error"]

# The page response header that names the page's incarnation (§4.2).
INCARNATION_HEADER: Final = "Session-Incarnation"


class Pin:
    """The incarnation one read is of: ``None`` until an answer (or the caller) names it, then fixed."""

    __slots__ = ("incarnation",)

    def __init__(self, incarnation: str | None = None) -> None:
        self.incarnation = incarnation

    def learn(self, incarnation: str | None, where: str) -> None:
        """Take the incarnation an answer names; one that names another is a `ProtocolError`.

        Once the pin is set, an answer must name it: only a service from before incarnations names none.
        """
        if incarnation is None:
            if self.incarnation is not None:
                raise ProtocolError(f"{where} names no incarnation, but the read is of incarnation {self.incarnation}")
            return
        if self.incarnation is None:
            self.incarnation = incarnation
        elif incarnation != self.incarnation:
            raise ProtocolError(f"{where} names incarnation {incarnation}, but the read is of {self.incarnation}")

    def learn_event_id(self, text: str | None, where: str) -> None:
        """Take the incarnation of an SSE ``id:``, ``<incarnation>:<seq>`` (§5.1).

        No id (``None``) names none; a malformed one is a `ProtocolError`.
        """
        if text is None:
            self.learn(None, where)
            return
        parsed = parse_event_id(text)
        if parsed is None:
            raise ProtocolError(f"{where} has a malformed id {text[:80]!r}")
        self.learn(parsed[0], f"{where} (id {text!r})")


def deleted_error(error: ServiceError, incarnation: str | None) -> SessionDeletedError | None:
    """The `SessionDeletedError` that a 404 ``session_not_found`` to a request naming ``incarnation`` means.

    ``None`` for any other answer, or when the request named no incarnation: then the id
    may simply never have existed.
    """
    if incarnation is None or error.status_code != 404 or error.code != "session_not_found":
        return None
    deleted = SessionDeletedError(
        f"the session's incarnation {incarnation} is gone: it was deleted ({error})", incarnation=incarnation
    )
    deleted.__cause__ = error
    return deleted

"""A session's incarnation (docs/protocol.md §2.5): which life of an id a cursor, ETag or SSE id names.

An id may be deleted and created again. Every creation gets a fresh incarnation, kept in
the header; a header stored without one (from before incarnations, or a log placed by
hand) has one derived from its id and ``createdAt`` (`incarnation_of`), so it never
changes while the session lives, and the header stays as it was written. An SSE ``id:``
is ``<incarnation>:<seq>``, which is what a browser's ``EventSource`` sends back.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Annotated, Final, Protocol

from msgspec import Meta, UnsetType

__all__ = [
    "INCARNATION_PATTERN",
    "Incarnation",
    "derived_incarnation",
    "event_id",
    "incarnation_of",
    "new_incarnation",
    "parse_event_id",
]

INCARNATION_PATTERN: Final = r"^[0-9a-z]{1,32}$"
Incarnation = Annotated[str, Meta(pattern=INCARNATION_PATTERN)]
_INCARNATION: Final = re.compile(INCARNATION_PATTERN)
_SEQ: Final = re.compile(r"^-?[0-9]{1,16}$")


class Headed(Protocol):
    """What the rules below read of a header (`codec.events.SessionHeader`): neither module imports the other."""

    @property
    def id(self) -> str: ...
    @property
    def createdAt(self) -> int: ...  # noqa: N802 - the wire's name
    @property
    def incarnation(self) -> str | UnsetType: ...


def new_incarnation() -> str:
    """A fresh incarnation for a session being created: 48 random bits, as 12 hex digits."""
    return secrets.token_hex(6)


def derived_incarnation(session_id: str, created_at: int) -> str:
    """The incarnation of a header that holds none: the same for the same id and ``createdAt``."""
    digest = hashlib.blake2b(f"{session_id}\n{created_at}".encode(), digest_size=6, person=b"incarnation")
    return digest.hexdigest()


def incarnation_of(header: Headed) -> str:
    """The header's incarnation: the one it holds, else the one derived from its id and ``createdAt``."""
    if isinstance(header.incarnation, str):
        return header.incarnation
    return derived_incarnation(header.id, header.createdAt)


def event_id(incarnation: str, seq: int) -> bytes:
    """The SSE ``id:`` value of the frame at ``seq``."""
    return b"%s:%d" % (incarnation.encode(), seq)


def parse_event_id(text: str) -> tuple[str | None, int] | None:
    """``(incarnation, seq)`` of an SSE id; a bare seq (a client from before incarnations) has ``None``.

    ``None`` when the text is neither ``<incarnation>:<seq>`` nor ``<seq>`` (the seq as a
    query integer is written: an optional ``-`` and 1-16 digits).
    """
    incarnation, colon, seq = text.rpartition(":")
    if not _SEQ.fullmatch(seq):
        return None
    if not colon:
        return None, int(seq)
    if not _INCARNATION.fullmatch(incarnation):
        return None
    return incarnation, int(seq)

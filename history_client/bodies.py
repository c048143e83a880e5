"""The JSON answers of writes and session reads, as the client returns them (docs/protocol.md §6, §12).

Each is a frozen Struct with Python names (``head_seq``) for the service's camelCase keys
(``headSeq``), decoded by one reused typed decoder. They are the service's own bodies
(`history_service.bodies`, held to these by a test), read the way a client should read
them: an unknown key is ignored, so a newer service that adds one does not break an older
client, while a missing or mistyped one is a `ProtocolError`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Final, TypeVar

import httpx
import msgspec
from msgspec import UNSET, Struct, UnsetType

from codec import SessionHeader
from history_client.errors import ProtocolError
from history_client.requests import service_error

__all__ = [
    "Appended",
    "Closed",
    "ListedSession",
    "SearchHit",
    "SearchHits",
    "SessionCreated",
    "SessionList",
    "SessionState",
    "Usage",
    "read_body",
]

B = TypeVar("B", bound=Struct)


class SessionCreated(Struct, frozen=True, rename="camel"):
    """A create's answer: the new session's id, its head (-1: no event yet), and its incarnation (§2.5)."""

    id: str
    head_seq: int
    incarnation: str


class Appended(Struct, frozen=True, rename="camel"):
    """An append's answer: the batch's first seq and the new head; ``idempotent`` is True for an exact re-send."""

    first_seq: int
    head_seq: int
    idempotent: bool = False


class Closed(Struct, frozen=True, rename="camel"):
    """A close's answer: the final head (-1 when empty) and when the session was first closed (epoch ms)."""

    head_seq: int
    closed_at: int


class Usage(Struct, frozen=True, rename="camel"):
    """The tokens a session's events report, summed (§12.1)."""

    input_tokens: int
    output_tokens: int


class ListedSession(Struct, frozen=True, rename="camel"):
    """One session of a listing: id, creation time, head, direct subagent children; close and expiry times if any;
    and its synopsis when it has one: title, last event's time, tokens (§12.1)."""

    id: str
    created_at: int
    head_seq: int
    child_count: int
    closed_at: int | UnsetType = UNSET
    expires_at: int | UnsetType = UNSET
    title: str | UnsetType = UNSET
    last_event_at: int | UnsetType = UNSET
    usage: Usage | UnsetType = UNSET


class SessionList(Struct, frozen=True, rename="camel"):
    """A page of a listing, newest first; ``next_cursor`` continues it as ``cursor=`` (``None``: no more), and
    ``total`` is how many sessions the whole listing holds under the same ``state`` and ``q``."""

    sessions: list[ListedSession]
    next_cursor: str | None
    total: int


class SearchHit(Struct, frozen=True, rename="camel"):
    """A passage that matched a search (§14.1): its session (and that session's parent, for a child), the seq of its
    first event, its kind and time, its snippet (even positions plain text, odd ones matched), its rank (higher
    first), and the session's title."""

    session: str
    seq: int
    kind: str
    time: int
    snippet: list[str]
    rank: float
    parent: str | UnsetType = UNSET
    title: str | UnsetType = UNSET


class SearchHits(Struct, frozen=True, rename="camel"):
    """A page of a search's hits, the latest written first; ``next_cursor`` continues it as ``cursor=``
    (``None``: no more)."""

    hits: list[SearchHit]
    next_cursor: str | None


class SessionState(Struct, frozen=True, rename="camel"):
    """A session's header and head (-1 while it has no event), when it expires (§6.5), if it will, and its
    synopsis as a listing gives it (§12.1)."""

    header: SessionHeader
    head_seq: int
    expires_at: int | UnsetType = UNSET
    title: str | UnsetType = UNSET
    last_event_at: int | UnsetType = UNSET
    usage: Usage | UnsetType = UNSET


_DECODERS: Final[MappingProxyType[type, msgspec.json.Decoder[Any]]] = MappingProxyType(
    {
        kind: msgspec.json.Decoder(kind)
        for kind in (SessionCreated, Appended, Closed, SessionList, SessionState, SearchHits)
    }
)


def read_body(kind: type[B], response: httpx.Response) -> B:
    """The answer as ``kind``; a non-2xx answer raises its `ServiceError`, a malformed one `ProtocolError`."""
    if not response.is_success:
        raise service_error(response)
    try:
        return _DECODERS[kind].decode(response.content)  # type: ignore[no-any-return]
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ProtocolError(f"{response.request.url.path}: {exc}") from exc

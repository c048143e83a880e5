"""A session read as a Durable Stream (docs/protocol.md §13.7): read-only, JSON mode, one value per logical event.

``GET /ds/v1/session/{id}`` (a child: ``/ds/v1/session/{id}/subagents/{child}``) reads the
session's logical events as any Durable Streams client reads a stream. An offset is
``<incarnation>_<next seq>``, the seq zero-padded to 16 digits: it compares as a string
within one life of the id, and an offset of another life answers 410. A read ends at a
message boundary, as a page does, unless one message alone is past the read's budget; it
reaches at most the session's head. Each value is the event's canonical JSON line, spliced
from the stored records, never decoded. A closed session is a closed stream; appends get 405.

A reader that asks for `RECORDS_TYPE` in ``Accept`` (our extension) gets page records
instead: a read covers the interval the events' read would, and each value is one record of
that interval's page (§4.2), spliced as a page's are, so a run of deltas is one chunk row.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Final, Literal

from starlette.requests import Request
from starlette.responses import Response

from codec import StoredRecord, event_lines
from history_service.durable.reading import CLOSED, NEXT, Snapshot
from history_service.encoding import accept_weights
from history_service.errors import HistoryServiceError, NoAcceptableType
from history_service.pages import page_records
from history_service.requests import address
from history_service.service import HistoryService
from persistence import (
    Chunk,
    SessionInfo,
    SessionNotFoundError,
    StreamGoneError,
    StreamNotFoundError,
    StreamRequestError,
)

__all__ = ["RECORDS_TYPE", "SESSION_KEY", "SessionView", "records_asked", "session"]

# A session's readers wait on this key in the waker, apart from any stream's name.
SESSION_KEY: Final = "\x00session\x00"
MEDIA_TYPE: Final = "application/json"
# Our vendor type (§13.7): "history" as in HISTORY_* and history_service, "records" as in a page's records.
RECORDS_TYPE: Final = "application/vnd.history.records+json"
_OFFSET: Final = re.compile(r"([0-9a-z]{1,32})_([0-9]{1,19})")
# The most events one read splices, whatever their size.
_MAX_EVENTS: Final = 4096


class SessionView:
    """One life of a session, as `history_service.durable.reading` reads it: its events, or its page records."""

    mode: Literal["json", "text", "base64"] = "json"

    def __init__(
        self,
        service: HistoryService,
        principal: str,
        session_id: str,
        child: str | None,
        info: SessionInfo,
        *,
        records: bool = False,
    ):
        self._service = service
        self._address = (principal, session_id, child)
        self._id = child or session_id
        self._incarnation = info.incarnation
        self._records = records
        self.content_type = RECORDS_TYPE if records else MEDIA_TYPE
        self.variant = "records" if records else ""
        self.name = SESSION_KEY + self._id
        self.key: tuple[object, ...] = ("session", principal, session_id, child, info.incarnation, self.variant)

    def offset(self, position: int) -> str:
        return f"{self._incarnation}_{position:016d}"

    def position(self, offset: str) -> int:
        match = _OFFSET.fullmatch(offset)
        if match is None:
            raise StreamRequestError(f"not an offset of this session: {offset[:40]!r}")
        if match[1] != self._incarnation:
            raise StreamGoneError("the offset is of an earlier life of this session id, which was deleted")
        return int(match[2])

    async def read(self, after: int | None, budget: int) -> Snapshot:
        info = await _readable(self._service, *self._address)
        if info.incarnation != self._incarnation:
            raise StreamGoneError("the session was deleted")
        tail = info.head_seq + 1
        if after is None or after >= tail:
            return Snapshot(content_type=self.content_type, tail=tail, chunks=[], complete=True, closed=info.closed)
        store = self._service.store
        stop = min(tail, after + _MAX_EVENTS)
        stored = await store.read_stored(self._id, after, stop)
        chunks = _within(_event_values(stored, after, stop), budget)
        end = chunks[-1].end if chunks else after
        if end < tail:
            # Not at the head: end where the last message whole in the read begins.
            cut = (await store.page_cuts(self._id, to_seq=end, max_messages=1))[0]
            if cut > after:
                chunks = [chunk for chunk in chunks if chunk.end <= cut]
        if self._records and chunks:
            # The interval the events' read covers, packed: a read's offsets are the same in both.
            chunks = _record_values(stored, after, chunks[-1].end)
        complete = bool(chunks) and chunks[-1].end == tail
        return Snapshot(content_type=self.content_type, tail=tail, chunks=chunks, complete=complete, closed=info.closed)

    async def touch(self) -> None:
        return None


def _event_values(stored: list[StoredRecord], after: int, stop: int) -> Iterator[Chunk]:
    """Each event of ``[after, stop)`` as a JSON-mode fragment, and the seq after it."""
    for first, lines in event_lines(stored, after, stop, closing=b","):
        for seq, line in enumerate(lines, first):
            yield Chunk(seq + 1, line)


def _record_values(stored: list[StoredRecord], after: int, stop: int) -> list[Chunk]:
    """Each record of the page of ``[after, stop)`` as a JSON-mode fragment, and the seq after it."""
    return [Chunk(end, record + b",") for end, record in page_records(stored, after, stop)]


def _within(values: Iterable[Chunk], budget: int) -> list[Chunk]:
    """The values up to the first that reaches ``budget`` bytes, that one included."""
    chunks: list[Chunk] = []
    size = 0
    for chunk in values:
        if size >= budget:
            break
        chunks.append(chunk)
        size += len(chunk.data)
    return chunks


def records_asked(accept: str | None) -> bool:
    """Whether ``Accept`` asks for `RECORDS_TYPE` rather than the view's own JSON.

    JSON stands as identity does in a page's ``Accept-Encoding`` (§4.4): acceptable unless the
    header excludes it, and it wins only when listed with a higher q. Raises `NoAcceptableType`
    when the header excludes it and does not ask for records.
    """
    if accept is None:
        return False
    weights = accept_weights(accept)
    records = weights.get(RECORDS_TYPE, 0.0)
    listed = weights.get(MEDIA_TYPE)
    json = next((weights[name] for name in (MEDIA_TYPE, "application/*", "*/*") if name in weights), 1.0)
    if records > 0 and (listed is None or listed <= records):
        return True
    if json > 0:
        return False
    raise NoAcceptableType(f"a session reads as {MEDIA_TYPE} or {RECORDS_TYPE}; Accept refuses both")


async def _readable(service: HistoryService, principal: str, session_id: str, child: str | None) -> SessionInfo:
    try:
        return await service.readable(principal, session_id, child)
    except (SessionNotFoundError, HistoryServiceError) as exc:
        raise StreamNotFoundError(f"no session {child or session_id!r} here") from exc


Reader = Callable[[Request, SessionView, dict[str, str]], Awaitable[Response]]


async def session(
    request: Request, service: HistoryService, reader: Reader, principal: str, headers: dict[str, str]
) -> Response:
    """GET or HEAD on a session read as a stream (a write never routes here: it is 405)."""
    # The answer depends on Accept, refusals included.
    headers["Vary"] = "Accept"
    # The id rule of every session address (§2.4): an id outside it is 422, before any store is asked.
    session_id, child = address(request)
    records = records_asked(request.headers.get("accept"))
    info = await _readable(service, principal, session_id, child)
    view = SessionView(service, principal, session_id, child, info, records=records)
    if request.method == "GET":
        return await reader(request, view, headers)
    headers.update({NEXT: view.offset(info.head_seq + 1), "Cache-Control": "no-store"})
    headers["Content-Type"] = view.content_type
    if info.closed:
        headers[CLOSED] = "true"
    return Response(None, 200, headers)

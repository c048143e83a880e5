"""What the endpoints do, once parsed: access rules, appends that wake followers, pages.

Access (DESIGN §8): a session is visible only to its owner; to anyone else it answers
exactly as an unknown id does (404), so ids leak nothing. A subagent child is read only
through its parent's address, by the parent's owner.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

import anyio
import msgspec

from codec import (
    CodecError,
    ContentEncodingError,
    Event,
    SessionHeader,
    decode_storage_line,
    decompress,
    encode,
    expand_records,
)
from history_service.errors import ApiError
from history_service.follow import Hub
from history_service.pages import EncodedPage, PageCache, PageQuery, build_page, encode_page
from history_service.settings import Settings
from persistence import (
    AppendResult,
    HistoryStore,
    SeqConflictError,
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    StoreError,
)

__all__ = ["HistoryService", "decode_body", "parse_events", "parse_header"]

DECODINGS: Final = ("zstd", "br", "gzip")
_OWNER_CACHE: Final = 100_000


class _AppendBody(msgspec.Struct, forbid_unknown_fields=True):
    events: list[msgspec.Raw]


_APPEND: Final = msgspec.json.Decoder(_AppendBody)
_HEADER: Final = msgspec.json.Decoder(SessionHeader)


def decode_body(body: bytes, content_encoding: str | None, settings: Settings) -> bytes:
    """The request body with its content coding removed, within the body limit."""
    coding = (content_encoding or "identity").strip().lower()
    if coding == "identity":
        return body
    if coding not in DECODINGS:
        raise ApiError(
            415, "unsupported_encoding", f"Content-Encoding {coding!r} is not supported; use zstd, br or gzip"
        )
    try:
        return decompress(body, coding, max_size=settings.max_body_bytes)
    except ContentEncodingError as exc:
        if "more than" in str(exc):
            raise ApiError(413, "body_too_large", f"decoded body exceeds {settings.max_body_bytes} bytes") from exc
        raise ApiError(400, "bad_encoding", str(exc)) from exc


def _json_error(exc: msgspec.DecodeError, what: str) -> ApiError:
    if isinstance(exc, msgspec.ValidationError):
        return ApiError(422, f"invalid_{what}", str(exc))
    return ApiError(400, "malformed_json", f"the body is not valid JSON: {exc}")


def parse_header(body: bytes) -> SessionHeader:
    try:
        return _HEADER.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        if isinstance(exc, RecursionError):
            raise ApiError(400, "malformed_json", "the body nests too deeply") from exc
        raise _json_error(exc, "header") from exc


def parse_events(body: bytes, settings: Settings) -> list[Event]:
    """An append body's events, with packed rows expanded; 422 names the first bad item."""
    try:
        items = _APPEND.decode(body).events
    except (msgspec.DecodeError, RecursionError) as exc:
        if isinstance(exc, RecursionError):
            raise ApiError(400, "malformed_json", "the body nests too deeply") from exc
        raise _json_error(exc, "batch") from exc
    if not items:
        raise ApiError(422, "invalid_batch", "events must not be empty")
    if len(items) > settings.max_batch_events:
        raise ApiError(413, "batch_too_large", f"a batch holds at most {settings.max_batch_events} events")
    records = []
    for i, item in enumerate(items):
        try:
            records.append(decode_storage_line(bytes(item), where=f"events[{i}]"))
        except CodecError as exc:
            raise ApiError(422, "invalid_event", str(exc), index=i) from exc
    events = expand_records(records)
    if len(events) > settings.max_batch_events:
        raise ApiError(413, "batch_too_large", f"a batch holds at most {settings.max_batch_events} events")
    return events


class HistoryService:
    """The service state a lifespan owns: the store, the follow hub and the page cache."""

    def __init__(self, settings: Settings, store: HistoryStore) -> None:
        self.settings = settings
        self.store = store
        self.hub = Hub(
            settings.follow_buffer, ping_interval=settings.ping_interval, coalesce=settings.follow_coalesce_ms / 1000
        )
        self.cache = PageCache(settings.page_cache_bytes)
        self._append_locks: dict[str, anyio.Lock] = {}
        # Owner and header never change once a session exists, so appends need not ask the store.
        self._owners: OrderedDict[str, tuple[str, SessionHeader]] = OrderedDict()

    async def _owned(self, principal: str, session_id: str, *, need_head: bool = True) -> SessionInfo:
        known = self._owners.get(session_id)
        if known is not None and not need_head:
            owner, header = known
            if owner != principal:
                raise ApiError(404, "session_not_found", f"no session {session_id!r}")
            return SessionInfo(header, owner, -1)
        try:
            info = await self.store.get_session(session_id)
        except SessionNotFoundError:
            info = None
        except StoreError as exc:
            raise ApiError(503, "store_unavailable", str(exc)) from exc
        if info is None or info.owner != principal:
            raise ApiError(404, "session_not_found", f"no session {session_id!r}")
        self._owners[session_id] = (info.owner, info.header)
        if len(self._owners) > _OWNER_CACHE:
            self._owners.popitem(last=False)
        return info

    async def readable(self, principal: str, session_id: str, child: str | None = None) -> SessionInfo:
        """The session a page or follow address names, if the caller may read it."""
        info = await self._owned(principal, session_id)
        if child is None:
            if info.header.origin == "subagent" and isinstance(info.header.parentSession, str):
                raise ApiError(
                    403,
                    "subagent_child",
                    f"session {session_id!r} is a subagent child; read it through "
                    f"/v1/sessions/{info.header.parentSession}/subagents/{session_id}",
                )
            return info
        try:
            target = await self.store.get_session(child)
        except SessionNotFoundError:
            raise ApiError(404, "session_not_found", f"no session {child!r}") from None
        if target.header.origin == "subagent" and target.header.parentSession == session_id:
            return target
        if target.owner == principal:
            raise ApiError(
                403, "not_a_direct_child", f"session {child!r} is not a direct subagent child of {session_id!r}"
            )
        raise ApiError(404, "session_not_found", f"no session {child!r}")

    async def create(self, principal: str, header: SessionHeader) -> SessionInfo:
        if header.origin == "subagent" and isinstance(header.parentSession, str):
            try:
                await self._owned(principal, header.parentSession)
            except ApiError:
                raise ApiError(422, "invalid_parent", f"no session {header.parentSession!r} to be the parent") from None
        try:
            return await self.store.create_session(header, owner=principal)
        except SessionExistsError as exc:
            raise ApiError(409, "session_exists", str(exc)) from exc
        except StoreError as exc:
            raise ApiError(400 if isinstance(exc, ValueError) else 503, "store_error", str(exc)) from exc

    async def append(self, principal: str, session_id: str, events: Sequence[Event]) -> AppendResult:
        await self._owned(principal, session_id, need_head=False)
        lock = self._append_locks.setdefault(session_id, anyio.Lock())
        # Publishing under the lock keeps each session's frames in seq order.
        async with lock:
            try:
                result = await self.store.append(session_id, events)
            except SeqConflictError as exc:
                raise ApiError(409, "seq_conflict", str(exc), headSeq=exc.head_seq) from exc
            except StoreError as exc:
                raise ApiError(503, "store_unavailable", str(exc)) from exc
            if not result.idempotent:
                self.hub.publish(session_id, events)
        return result

    async def page(self, info: SessionInfo, query: PageQuery) -> EncodedPage:
        """The encoded page; immutable pages (explicit ``through``) come from and go to the cache."""
        session_id = info.header.id
        if query.through is not None and query.through > info.head_seq:
            raise ApiError(400, "invalid_parameter", f"through {query.through} is beyond the head {info.head_seq}")
        key = (session_id, query)
        if query.through is not None:
            cached = self.cache.get(key)
            if cached is not None:
                return cached
        try:
            body, _, _ = await build_page(self.store, session_id, info.head_seq, query)
        except StoreError as exc:
            raise ApiError(503, "store_unavailable", str(exc)) from exc
        page = encode_page(body)
        if query.through is not None:
            self.cache.put(key, page)
        return page

    def snapshot(self, info: SessionInfo, page: bytes) -> bytes:
        """A follow snapshot's data: the header and cursor, then the page's own fields."""
        return b'{"header":%b,"cursor":%d,%b' % (encode(info.header), info.head_seq, page[1:])

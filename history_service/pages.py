"""``session.page`` (docs/protocol.md §4): the cut, one store read, the byte target, the coding and the cache.

A `PageReader` serves a page in four steps:

1. the candidate starts (message-aligned cuts) come from the store's message index;
2. one store read covers the largest candidate, and the codec splices its records;
3. each candidate's size is then a subtraction, so the oldest start whose page fits
   ``maxBytes`` is found without reading again; a page exceeds the target only when its
   newest message group alone does;
4. the body gets its validator, and is compressed once per coding and kept when immutable.

A page that is not kept is served as the parts the codec spliced, the stored records'
own bytes, so it never exists as one more copy of them. Large pages are spliced and
compressed in worker threads, so the event loop keeps serving meanwhile.
"""

from __future__ import annotations

import bisect
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

import anyio.to_thread
import msgspec

from codec import Part, SplicedRecords, StoredRecord, page_parts, page_size, raw_records, splice
from history_service.budget import Hold, InFlight
from history_service.encoding import compress
from history_service.errors import ThroughBeyondHead
from history_service.metrics import Metrics
from persistence import OFF_LOOP_BYTES, HistoryStore, PageRead, SessionNotFoundError

__all__ = [
    "EncodedPage",
    "PageBody",
    "PageCache",
    "PageQuery",
    "PageReader",
    "ServedPage",
    "encode_page",
    "page_records",
]

MIN_COMPRESS: Final = 1024
# A kept page is served without asking the store whether its life still exists for at most this many
# seconds: the backstop for a delete that sends this process no notice (a foreign writer; §4.4, §7.6).
LIFE_CHECK_EVERY: Final = 1.0


class PageQuery(msgspec.Struct, frozen=True):
    """A validated page request; ``through``/``before`` are ``None`` when not given."""

    through: int | None
    before: int | None
    max_messages: int
    max_bytes: int
    raw: bool = False
    # The incarnation the request names (§2.5); ``None`` when it names none.
    incarnation: str | None = None


class PageBody(NamedTuple):
    """A body as parts in order, and its size in bytes."""

    parts: list[Part]
    size: int

    @classmethod
    def of(cls, body: bytes) -> PageBody:
        return cls([body], len(body))

    def join(self) -> bytes:
        only = self.parts[0] if len(self.parts) == 1 else None
        return only if isinstance(only, bytes) else b"".join(self.parts)


class ServedPage(NamedTuple):
    """A page body in the content coding it is sent with, its strong validator when it has one, and its hold.

    ``hold`` is the page's share of the budget of bytes in flight, when it was read for this
    request; the caller releases it once the body is sent.
    """

    body: PageBody
    coding: str
    etag: str | None
    hold: Hold | None = None
    incarnation: str | None = None


class EncodedPage(msgspec.Struct):
    """A page body with its strong validator, the encodings made of it so far, and when its life was last confirmed.

    ``checked`` is a `time.monotonic` reading: when the store last held the page's incarnation (0, never).
    """

    identity: bytes
    etag: str
    encoded: dict[str, bytes]
    checked: float = 0.0

    @property
    def size(self) -> int:
        return len(self.identity) + sum(len(body) for body in self.encoded.values())


def encode_page(body: bytes, incarnation: str) -> EncodedPage:
    """The page with its ETag: the incarnation, then a hash of the body, so no other incarnation's page matches it."""
    digest = hashlib.blake2b(body, digest_size=16).hexdigest()
    return EncodedPage(body, f'"{incarnation}.{digest}"', {}, time.monotonic())


def _key(session_id: str, incarnation: str, query: PageQuery) -> tuple[object, ...]:
    """A page's cache key: the incarnation served, whether or not the request named it."""
    return (session_id, incarnation, query.through, query.before, query.max_messages, query.max_bytes, query.raw)


class PageCache:
    """A bounded LRU of encoded immutable pages (those with an explicit ``through``).

    It is bounded in bytes, every kept encoding counted, and in entries. A running total
    makes every call O(1) amortised: nothing is ever re-summed.
    """

    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self._max_bytes = max_bytes
        self._max_entries = max_entries
        self._pages: OrderedDict[tuple[object, ...], EncodedPage] = OrderedDict()
        self._bytes = 0

    @property
    def size(self) -> int:
        """The bytes held, every encoding counted."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._pages)

    def get(self, key: tuple[object, ...]) -> EncodedPage | None:
        page = self._pages.get(key)
        if page is not None:
            self._pages.move_to_end(key)
        return page

    def put(self, key: tuple[object, ...], page: EncodedPage) -> None:
        old = self._pages.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        self._pages[key] = page
        self._bytes += page.size
        self._evict()

    def forget(self, session_id: str, incarnation: str | None = None) -> None:
        """Drop every page of a deleted session (of ``incarnation`` only, when given).

        A scan: deletes are rare and the entries bounded.
        """
        for key in [key for key in self._pages if key[0] == session_id and incarnation in (None, key[1])]:
            self._bytes -= self._pages.pop(key).size

    def clear(self) -> None:
        self._pages.clear()
        self._bytes = 0

    def grew(self, key: tuple[object, ...], page: EncodedPage, added: int) -> None:
        """Account for ``added`` bytes of a new encoding of ``page``, if the cache still holds it."""
        if self._pages.get(key) is page:
            self._bytes += added
            self._evict()

    def _evict(self) -> None:
        while self._pages and (self._bytes > self._max_bytes or len(self._pages) > self._max_entries):
            _, evicted = self._pages.popitem(last=False)
            self._bytes -= evicted.size


def _records(stored: Sequence[StoredRecord], from_seq: int, to_seq: int, raw: bool) -> SplicedRecords:
    return raw_records(stored, from_seq, to_seq) if raw else splice(stored, from_seq, to_seq)


def page_records(stored: Sequence[StoredRecord], from_seq: int, to_seq: int) -> list[tuple[int, bytes]]:
    """The records of the page of ``[from_seq, to_seq)`` one by one, each with the seq after it: a session
    read as page records (§13.7) sends them as values."""
    records = splice(stored, from_seq, to_seq)
    return list(zip([*records.starts[1:], to_seq], records, strict=True))


def choose_body(
    stored: Sequence[StoredRecord], cuts: Sequence[int], to_seq: int, max_bytes: int, raw: bool
) -> tuple[PageBody, int]:
    """The body of the oldest of ``cuts`` (newest first) whose page fits ``max_bytes``, else the newest; and its start.

    ``stored`` covers the oldest cut's interval. The records are spliced once; every later
    start's page is a suffix of them, except where a start falls inside a run, whose
    cut record alone is spliced again.
    """
    records = _records(stored, cuts[-1], to_seq, raw)
    for cut in reversed(cuts):
        page, first = _from(stored, records, cut, to_seq, raw)
        size = page_size(page, first, cut, to_seq)
        if size <= max_bytes or cut == cuts[0]:
            return PageBody(page_parts(page, first, cut, to_seq), size), cut
    raise AssertionError("cuts is empty")


def _from(
    stored: Sequence[StoredRecord], records: SplicedRecords, cut: int, to_seq: int, raw: bool
) -> tuple[SplicedRecords, int]:
    """The records of ``[cut, to_seq)``: ``records`` from an index on, after a re-splice of the one ``cut`` falls in."""
    i = bisect.bisect_left(records.starts, cut)
    if i == len(records.starts) or records.starts[i] == cut:
        return records, i
    end = records.starts[i]
    return _records(stored, cut, end, raw).followed_by(records, i), 0


class PageReader:
    """The one way a page is built, for HTTP, the follow snapshot and the CLI.

    `page` takes it from the cache when it is immutable and kept; else it holds the read's
    estimate on the budget of bytes in flight, reads once from the store, refuses a
    ``through`` past the head (`persistence.rules.page_span`), splices, codes and keeps it.
    """

    def __init__(
        self,
        store: HistoryStore,
        cache: PageCache | None = None,
        *,
        inflight: InFlight | None = None,
        metrics: Metrics | None = None,
        gone: Callable[[str, str], bool] | None = None,
        settle: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._cache = cache
        # Whether an incarnation of a session was deleted: its pages are neither served from the cache nor kept.
        self._gone = gone or (lambda session_id, incarnation: False)
        # Hears the other processes' notices committed so far, so a delete among them reaches `_gone` first.
        self._settle = settle or (lambda: None)
        # Without a budget (the CLI), every read is admitted at once.
        self._inflight = inflight if inflight is not None else InFlight(1 << 62, wait=0, shapes=1)
        self.metrics = metrics if metrics is not None else Metrics()

    async def page(
        self,
        session_id: str,
        query: PageQuery,
        coding: str = "identity",
        *,
        holds: tuple[Hold, Hold] | None = None,
        incarnation: str | None = None,
    ) -> ServedPage:
        """The page of ``session_id`` that ``query`` names, in ``coding`` (identity when too small to pay).

        A page that was read carries its hold on the budget of bodies being sent, which the
        caller releases once it is sent. ``holds`` are the reading and sending holds the
        caller took already (a follow stream's, at admission); without them the read takes
        its own, and then learns what its shape costs. ``incarnation`` is the session's, as
        the caller knows it, which finds a kept page before any read. A query that names
        another incarnation than the session's raises `SessionNotFoundError`: that session is
        gone (§2.5). Raises `ThroughBeyondHead`, and the store's errors as it raises them.
        """
        if query.incarnation is not None and incarnation is not None and query.incarnation != incarnation:
            raise SessionNotFoundError(session_id)
        if query.through is not None and incarnation is not None:
            cached = await self._cached(session_id, incarnation, query, coding)
            if cached is not None:
                return cached
        shape = (session_id, query.max_messages, query.max_bytes, query.raw)
        if holds is None:
            reading = await self._inflight.reading.hold(self._inflight.estimate(shape, query.max_bytes, 4))
        else:
            reading = holds[0]
        try:
            # The store held this incarnation when the read began, not when the page is built.
            read_at = time.monotonic()
            read = await self._store.read_page(
                session_id,
                through=query.through,
                before=query.before,
                max_messages=query.max_messages,
                max_bytes=query.max_bytes,
            )
            served_incarnation = read.info.incarnation
            if served_incarnation != (query.incarnation or incarnation or served_incarnation):
                # Not the incarnation the request names, or the one the caller's access was checked on.
                raise SessionNotFoundError(session_id)
            if holds is None:
                # What the read really holds is known once it is read.
                size = sum(len(record.line) for record in read.stored)
                reading.resize(size)
                self._inflight.learned(shape, size)
            if query.through is not None and read.beyond_head:
                raise ThroughBeyondHead(query.through, read.info.head_seq)
            if query.through is None and read.info.closed:
                # A closed session's head never moves: its newest page is the one through the head (§6.3).
                query = msgspec.structs.replace(query, through=read.info.head_seq)
                cached = await self._cached(session_id, served_incarnation, query, coding) if holds is None else None
                if cached is not None:
                    return cached
            started = time.perf_counter()
            served = await self._build(read, query, coding, read_at)
            self.metrics.page_built(time.perf_counter() - started, immutable=query.through is not None)
            if holds is None:
                return served._replace(hold=await self._inflight.to_send(served.body.size))
            holds[1].resize(served.body.size)
            return served._replace(hold=holds[1])
        finally:
            reading.release()

    async def _cached(self, session_id: str, incarnation: str, query: PageQuery, coding: str) -> ServedPage | None:
        if self._cache is None:
            return None
        self._settle()
        if self._gone(session_id, incarnation):
            return None
        key = _key(session_id, incarnation, query)
        page = self._cache.get(key)
        if page is None:
            return None
        if time.monotonic() - page.checked >= LIFE_CHECK_EVERY:
            await self._confirm(session_id, incarnation)
            page.checked = time.monotonic()
        self.metrics.page_cached()
        return (await self._encoded(key, page, coding))._replace(incarnation=incarnation)

    async def _confirm(self, session_id: str, incarnation: str) -> None:
        """Raise `SessionNotFoundError`, and drop the kept pages, unless the store's session is of ``incarnation``.

        One read of the session row: it is how a delete by another process reaches this one's cache.
        """
        try:
            life: str | None = (await self._store.get_session(session_id)).incarnation
        except SessionNotFoundError:
            life = None
        if life != incarnation:
            if self._cache is not None:
                self._cache.forget(session_id, incarnation)
            raise SessionNotFoundError(session_id)

    async def _build(self, read: PageRead, query: PageQuery, coding: str, read_at: float) -> ServedPage:
        body, _ = await _chosen(read, query)
        incarnation = read.info.incarnation
        if query.through is None:
            if coding == "identity" or body.size < MIN_COMPRESS:
                return ServedPage(body, "identity", None, incarnation=incarnation)
            return ServedPage(PageBody.of(await _compressed(body, coding)), coding, None, incarnation=incarnation)
        identity = body.join()
        if body.size < OFF_LOOP_BYTES:
            page = encode_page(identity, incarnation)
        else:
            page = await anyio.to_thread.run_sync(encode_page, identity, incarnation)
        page.checked = read_at
        key = _key(read.info.header.id, incarnation, query)
        if self._cache is not None and not self._gone(read.info.header.id, incarnation):
            self._cache.put(key, page)
        return (await self._encoded(key, page, coding))._replace(incarnation=incarnation)

    async def _encoded(self, key: tuple[object, ...], page: EncodedPage, coding: str) -> ServedPage:
        if coding == "identity" or len(page.identity) < MIN_COMPRESS:
            return ServedPage(PageBody.of(page.identity), "identity", page.etag)
        body = page.encoded.get(coding) or await _compressed(PageBody.of(page.identity), coding)
        if coding not in page.encoded:
            # Another request may have made the same encoding meanwhile: keep one, count it once.
            page.encoded[coding] = body
            if self._cache is not None:
                self._cache.grew(key, page, len(body))
        return ServedPage(PageBody.of(page.encoded[coding]), coding, f'{page.etag[:-1]}-{coding}"')


async def _chosen(read: PageRead, query: PageQuery) -> tuple[PageBody, int]:
    """The page body of ``read`` and its start; splicing that decodes many bytes runs in a worker thread."""
    if not read.cuts:
        empty = page_parts(SplicedRecords(), 0, 0, 0)
        return PageBody(empty, sum(map(len, empty))), 0
    # Splicing is cheap but for rows it decodes (cut at an edge, or every row when raw),
    # whose cost follows their bytes; large reads go to a worker thread.
    stored, cuts = read.stored, read.cuts
    if not query.raw and sum(len(record.line) for record in stored) < OFF_LOOP_BYTES:
        return choose_body(stored, cuts, read.to_seq, query.max_bytes, query.raw)
    return await anyio.to_thread.run_sync(choose_body, stored, cuts, read.to_seq, query.max_bytes, query.raw)


async def _compressed(body: PageBody, coding: str) -> bytes:
    """``body`` in ``coding``, off the event loop when it is large."""
    if body.size >= OFF_LOOP_BYTES:
        return await anyio.to_thread.run_sync(compress, body.parts, coding)
    return compress(body.parts, coding)

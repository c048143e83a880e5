"""``session.page`` bodies (docs/protocol.md §4): selection over logical events, then packing, then encoding.

The cut comes from the store's message index. With a byte target, candidates are measured
with the real builder, by bisection, so a page exceeds the target only when its newest
message group alone does. Packing and content coding of large bodies run in worker threads.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Final

import anyio.to_thread
import msgspec

from codec import compress, encode
from persistence import HistoryStore
from persistence.page_builder import records_body

__all__ = ["EncodedPage", "PageCache", "PageQuery", "build_page", "encode_page"]

MIN_COMPRESS: Final = 1024
_THREAD_AT: Final = 256 * 1024


class PageQuery(msgspec.Struct, frozen=True):
    """A validated page request; ``through``/``before`` are ``None`` when not given."""

    through: int | None
    before: int | None
    max_messages: int
    max_bytes: int
    raw: bool = False


def _body(records: bytes, from_seq: int, to_seq: int) -> bytes:
    has_more = b"true" if from_seq > 0 else b"false"
    return b'{"records":%b,"hasMore":%b,"fromSeq":%d,"toSeq":%d}' % (records, has_more, from_seq, to_seq)


async def _records(store: HistoryStore, session_id: str, from_seq: int, to_seq: int, raw: bool) -> bytes:
    if raw:
        events = await store.read_events(session_id, from_seq, to_seq)
        return records_body([b'{"event":' + encode(event) + b"}" for event in events])
    return records_body(await store.page_records(session_id, from_seq, to_seq))


async def build_page(store: HistoryStore, session_id: str, head: int, query: PageQuery) -> tuple[bytes, int, int]:
    """The page body and its ``(fromSeq, toSeq)``; ``head`` is the session's head at request time."""
    to_seq = head + 1 if query.through is None else query.through + 1
    if query.before is not None:
        to_seq = min(to_seq, query.before)
    if to_seq <= 0:
        return _body(b"[]", 0, 0), 0, 0
    cuts = await store.page_cuts(session_id, to_seq=to_seq, max_messages=query.max_messages)
    oldest = await _records(store, session_id, cuts[-1], to_seq, query.raw)
    if len(_body(oldest, cuts[-1], to_seq)) <= query.max_bytes or len(cuts) == 1:
        return _body(oldest, cuts[-1], to_seq), cuts[-1], to_seq
    # Sizes grow with each older candidate; find the oldest that fits, but keep at least the newest.
    low, high = 0, len(cuts) - 1
    best: tuple[bytes, int] | None = None
    while low < high:
        middle = (low + high) // 2
        body = _body(await _records(store, session_id, cuts[middle], to_seq, query.raw), cuts[middle], to_seq)
        if len(body) <= query.max_bytes:
            best, low = (body, cuts[middle]), middle + 1
        else:
            high = middle
    if best is None:
        first = cuts[0]
        best = (_body(await _records(store, session_id, first, to_seq, query.raw), first, to_seq), first)
    return best[0], best[1], to_seq


class EncodedPage(msgspec.Struct):
    """A page body with its strong validator and the encodings made of it so far."""

    identity: bytes
    etag: str
    encoded: dict[str, bytes]

    @property
    def size(self) -> int:
        return len(self.identity) + sum(len(body) for body in self.encoded.values())


def encode_page(body: bytes) -> EncodedPage:
    return EncodedPage(body, '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"', {})


async def encoded_body(page: EncodedPage, coding: str) -> tuple[bytes, int]:
    """The page in ``coding`` (``identity``, or one of codec.CODINGS), compressed once and kept.

    Returns the body and how many bytes the page grew by (0 when the encoding was already kept).
    """
    if coding == "identity" or len(page.identity) < MIN_COMPRESS:
        return page.identity, 0
    body = page.encoded.get(coding)
    if body is not None:
        return body, 0
    if len(page.identity) >= _THREAD_AT:
        body = await anyio.to_thread.run_sync(compress, page.identity, coding)
        # Another request may have made the same encoding meanwhile: keep one, count it once.
        kept = page.encoded.get(coding)
        if kept is not None:
            return kept, 0
    else:
        body = compress(page.identity, coding)
    page.encoded[coding] = body
    return body, len(body)


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

    def grew(self, key: tuple[object, ...], page: EncodedPage, added: int) -> None:
        """Account for ``added`` bytes of a new encoding of ``page``, if the cache still holds it."""
        if self._pages.get(key) is page:
            self._bytes += added
            self._evict()

    def _evict(self) -> None:
        while self._pages and (self._bytes > self._max_bytes or len(self._pages) > self._max_entries):
            _, evicted = self._pages.popitem(last=False)
            self._bytes -= evicted.size

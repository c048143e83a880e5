"""Paging plans, written once for the sync and the async client.

A plan is a generator that does no I/O. It yields `Fetch` when it needs a page (the
client sends back a `PageAnswer`) and `Emit` when it has events or pages for the caller.
Each client runs the same plan with its own transport, so the continuity rules live in
one place.

A plan reads one incarnation of its session (docs/protocol.md §2.5): the caller's, or the
one its first page names. Every later `Fetch` names it, so a delete and re-create between
two pages ends the read with `SessionDeletedError` (the client maps the 404) instead of
joining pages of two sessions.
"""

from __future__ import annotations

import tempfile
from collections.abc import Generator, Iterable
from typing import IO, Any, NamedTuple

from history_client.incarnations import Pin
from history_client.pages import HistoryPage, open_lazy_page, read_page

__all__ = ["Emit", "Fetch", "PageAnswer", "Plan", "fetch", "history_plan", "pages_plan"]


class Fetch(NamedTuple):
    """Fetch one page, of ``incarnation`` when it is set; the reply is a `PageAnswer`."""

    through: int | None
    before: int | None = None
    incarnation: str | None = None


class PageAnswer(NamedTuple):
    """A page's body, and the incarnation its ``Session-Incarnation`` header names (``None``: no header)."""

    body: bytes
    incarnation: str | None = None


class Emit(NamedTuple):
    """Hand these values to the caller, in order."""

    values: Iterable[Any]


Plan = Generator[Fetch | Emit, PageAnswer | None, None]


def fetch(pin: Pin, through: int | None) -> Generator[Fetch, PageAnswer | None, bytes]:
    """One page body through ``through``, of the pinned incarnation; the first answer sets the pin."""
    answer = yield Fetch(through, incarnation=pin.incarnation)
    assert answer is not None
    pin.learn(answer.incarnation, "a page")
    return answer.body


def pages_plan(*, through: int | None = None, after: int = -1, incarnation: str | None = None) -> Plan:
    """Validated `HistoryPage` values, newest first, from ``through`` (default: the head) back
    to the page holding ``after + 1``. Each page must end exactly where the previous one began,
    and be of the same incarnation."""
    pin = Pin(incarnation)
    cursor = through
    while cursor is None or cursor > after:
        body = yield from fetch(pin, cursor)
        page: HistoryPage = read_page(body, through=cursor, incarnation=pin.incarnation)
        yield Emit((page,))
        if page.from_seq <= after + 1:
            return
        cursor = page.from_seq - 1


def history_plan(*, through: int | None = None, after: int = -1, incarnation: str | None = None) -> Plan:
    """The exact events with ``after < seq <= through``, in ascending seq order.

    The page API cuts backwards from a cursor, so the plan walks back first. Every page
    but the oldest is spooled to a temporary file as its body bytes, never decoded as a
    whole; then the pages are replayed oldest first, one record at a time. Memory is one
    body plus one expanded row, whatever the session's length; disk holds the bodies.
    """
    if through is not None and through <= after:
        return
    pin = Pin(incarnation)
    spool: IO[bytes] | None = None
    spooled: list[tuple[int, int, int]] = []  # (offset, length, through) of each newer page
    cursor = through
    try:
        while True:
            body = yield from fetch(pin, cursor)
            page = open_lazy_page(body, through=cursor)
            if page.to_seq <= after + 1:
                return
            if page.from_seq <= after + 1:
                yield Emit(page.events(after=after))
                break
            if spool is None:
                spool = tempfile.TemporaryFile()
            spooled.append((spool.tell(), spool.write(body), page.to_seq - 1))
            cursor = page.from_seq - 1
            del page, body
        for offset, length, page_through in reversed(spooled):
            assert spool is not None
            spool.seek(offset)
            page = open_lazy_page(spool.read(length), through=page_through)
            yield Emit(page.events())
    finally:
        if spool is not None:
            spool.close()

"""Paging plans, written once for the sync and the async client.

A plan is a generator that does no I/O. It yields `Fetch` when it needs a page body
(the client sends the body back) and `Emit` when it has events or pages for the caller.
Each client runs the same plan with its own transport, so the continuity rules live in
one place.
"""

from __future__ import annotations

import tempfile
from collections.abc import Generator, Iterable
from typing import IO, Any, NamedTuple

from history_client.pages import HistoryPage, open_lazy_page, read_page

__all__ = ["Emit", "Fetch", "Plan", "history_plan", "pages_plan"]


class Fetch(NamedTuple):
    """Fetch one page body; the reply is the body's bytes."""

    through: int | None
    before: int | None = None


class Emit(NamedTuple):
    """Hand these values to the caller, in order."""

    values: Iterable[Any]


Plan = Generator[Fetch | Emit, bytes | None, None]


def pages_plan(*, through: int | None = None, after: int = -1) -> Plan:
    """Validated `HistoryPage` values, newest first, from ``through`` (default: the head) back
    to the page holding ``after + 1``. Each page must end exactly where the previous one began."""
    cursor = through
    while cursor is None or cursor > after:
        body = yield Fetch(cursor)
        assert body is not None
        page: HistoryPage = read_page(body, through=cursor)
        yield Emit((page,))
        if page.from_seq <= after + 1:
            return
        cursor = page.from_seq - 1


def history_plan(*, through: int | None = None, after: int = -1) -> Plan:
    """The exact events with ``after < seq <= through``, in ascending seq order.

    The page API cuts backwards from a cursor, so the plan walks back first. Every page
    but the oldest is spooled to a temporary file as its body bytes, never decoded as a
    whole; then the pages are replayed oldest first, one record at a time. Memory is one
    body plus one expanded row, whatever the session's length; disk holds the bodies.
    """
    if through is not None and through <= after:
        return
    spool: IO[bytes] | None = None
    spooled: list[tuple[int, int, int]] = []  # (offset, length, through) of each newer page
    cursor = through
    try:
        while True:
            body = yield Fetch(cursor)
            assert body is not None
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

"""Bounds on PostgreSQL calls: whatever a call was doing when the server stopped answering, it ends in its bound."""

from __future__ import annotations

import time

import anyio
import pytest
import sqlalchemy as sa

from codec import Event, SessionHeader
from persistence.call_bound import CALL_MARGIN
from persistence.errors import StoreError
from persistence.sql import SqlStore
from testing.postgres import PG_URL, empty_postgres
from testing.servers import CuttingProxy

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set")]

TIMEOUT = 1.0
APPENDERS = 30
READERS = 6


async def test_no_call_outlives_its_bound_however_long_the_server_answers_nothing() -> None:
    """F12: 30 appenders and some readers, then the server answers nothing for 8 s (as under SIGSTOP).

    Calls meet the freeze in every phase: connecting, waiting for the writer or a reader,
    in a statement, in a commit. Each must end, answered or 503, within the timeout and
    the documented margin (here with 2 s more, for a loaded machine).
    """
    assert PG_URL
    await empty_postgres(PG_URL)
    url = sa.make_url(PG_URL)
    async with CuttingProxy(url.port or 5432) as proxy:
        through = url.set(host="127.0.0.1", port=int(proxy.url.rpartition(":")[2]))
        store = await SqlStore.open(through.render_as_string(hide_password=False), timeout=TIMEOUT)
        took: list[tuple[float, bool]] = []
        try:
            for n in range(APPENDERS):
                await store.create_session(SessionHeader(id=f"s{n}", createdAt=0))
            stop = anyio.Event()

            async def call(work: object) -> None:
                started = time.monotonic()
                try:
                    await work  # type: ignore[misc]
                    ok = True
                except StoreError:
                    ok = False
                took.append((time.monotonic() - started, ok))

            async def append(n: int) -> None:
                seq = 0
                while not stop.is_set():
                    try:
                        head = (await store.get_session(f"s{n}")).head_seq
                    except StoreError:
                        continue
                    seq = head + 1
                    await call(store.append(f"s{n}", [Event("x", seq, 0, {"n": seq})]))

            async def read(n: int) -> None:
                while not stop.is_set():
                    await call(store.read_page(f"s{n}", through=None, before=None, max_messages=50, max_bytes=None))
                    await call(store.get_session(f"s{n}"))

            async with anyio.create_task_group() as group:
                for n in range(APPENDERS):
                    group.start_soon(append, n)
                for n in range(READERS):
                    group.start_soon(read, n)
                await anyio.sleep(1)
                proxy.freeze()
                await anyio.sleep(8)
                proxy.thaw()
                await anyio.sleep(1)
                stop.set()
        finally:
            proxy.thaw()
            await store.close()
    assert any(not ok for _, ok in took), "the freeze failed no call"
    longest = max(seconds for seconds, _ in took)
    assert longest <= TIMEOUT + CALL_MARGIN + 2, f"a call took {longest:.1f} s"

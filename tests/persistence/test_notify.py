"""Head notices on PostgreSQL: sent at commit and never for a rollback, to every listener, and survived reconnects."""

from __future__ import annotations

import anyio
import msgspec
import pytest
import sqlalchemy as sa

from codec import Event, SessionHeader
from persistence import SeqConflictError, SqlStore
from persistence.notify import NOTIFY_CHANNEL, HeadListener, Notice, notice
from testing.postgres import PG_URL, fresh_postgres_store

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set; run under scripts/with-postgres"),
]


def test_a_notice_is_small_json() -> None:
    payload = notice("{{sessionId}}.child-1", 2**53 - 1, "0123456789ab")
    assert payload == '["{{sessionId}}.child-1",9007199254740991,"0123456789ab"]' and len(payload.encode()) < 8000


async def listen(
    listener: HeadListener,
    heard: list[tuple[str, int]],
    connects: list[int],
    closes: list[tuple[str, int]] | None = None,
    deletes: list[str] | None = None,
) -> None:
    async def connected() -> None:
        connects.append(len(heard))

    def on_head(told: Notice) -> None:
        if told.deleted and deletes is not None:
            deletes.append(told.session_id)
            return
        (closes if told.closed and closes is not None else heard).append((told.session_id, told.head))

    await listener.run(on_head, connected)


async def wait_for(condition: object, seconds: float = 30) -> None:
    with anyio.fail_after(seconds):
        while not condition():  # type: ignore[operator]
            await anyio.sleep(0.01)


async def test_appends_from_another_store_are_heard_once_each_and_a_rollback_is_not_nor_its_own() -> None:
    assert PG_URL
    writer = await fresh_postgres_store(PG_URL)
    reader = await SqlStore.open(PG_URL)
    listener = reader.listener()
    assert listener is not None and listener.state == "connecting"
    heard: list[tuple[str, int]] = []
    connects: list[int] = []
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(listen, listener, heard, connects)
            await wait_for(lambda: listener.state == "listening")
            await writer.create_session(SessionHeader(id="s", createdAt=0))
            await writer.append("s", [Event("x", 0, 0, 0), Event("x", 1, 0, 1)])
            with pytest.raises(SeqConflictError):
                await writer.append("s", [Event("x", 5, 0, 5)])
            await writer.append("s", [Event("x", 2, 0, 2)])
            await reader.append("s", [Event("x", 3, 0, 3)])  # the listener's own store: published from memory
            await wait_for(lambda: len(heard) >= 2)
            await anyio.sleep(0.2)
            tasks.cancel_scope.cancel()
    finally:
        await writer.close()
        await reader.close()
    assert heard == [("s", 1), ("s", 2)]
    assert connects == [0]


def test_a_close_notice_adds_a_flag_that_a_three_field_reader_ignores() -> None:
    payload = notice("s", 4, "origin", closed=True)
    assert payload == '["s",4,"origin",true]'
    assert msgspec.json.decode(payload, type=Notice) == Notice("s", 4, "origin", closed=True)
    assert msgspec.json.decode(notice("s", 4, "origin"), type=Notice) == Notice("s", 4, "origin", closed=False)


async def test_a_close_from_another_store_is_heard_once_with_its_head() -> None:
    assert PG_URL
    writer = await fresh_postgres_store(PG_URL)
    reader = await SqlStore.open(PG_URL)
    listener = reader.listener()
    assert listener is not None
    heard: list[tuple[str, int]] = []
    closes: list[tuple[str, int]] = []
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(listen, listener, heard, [], closes)
            await wait_for(lambda: listener.state == "listening")
            await writer.create_session(SessionHeader(id="s", createdAt=0))
            await writer.append("s", [Event("x", 0, 0, 0)])
            await writer.close_session("s", closed_at=1)
            await writer.close_session("s", closed_at=2)  # already closed: nothing is sent
            await wait_for(lambda: closes)
            await anyio.sleep(0.2)
            tasks.cancel_scope.cancel()
    finally:
        await writer.close()
        await reader.close()
    assert heard == [("s", 0)] and closes == [("s", 0)]


def test_a_delete_notice_adds_two_flags() -> None:
    payload = notice("s", -1, "origin", deleted=True, incarnation="0af")
    assert payload == '["s",-1,"origin",false,true,"0af"]'
    assert msgspec.json.decode(payload, type=Notice) == Notice("s", -1, "origin", deleted=True, incarnation="0af")


async def test_a_delete_from_another_store_is_heard_once_per_session_of_the_tree() -> None:
    assert PG_URL
    writer = await fresh_postgres_store(PG_URL)
    reader = await SqlStore.open(PG_URL)
    listener = reader.listener()
    assert listener is not None
    heard: list[tuple[str, int]] = []
    deletes: list[str] = []
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(listen, listener, heard, [], None, deletes)
            await wait_for(lambda: listener.state == "listening")
            await writer.create_session(SessionHeader(id="p", createdAt=0))
            await writer.create_session(SessionHeader(id="p.a", createdAt=0, parentSession="p", origin="subagent"))
            await writer.delete_session("p")
            await wait_for(lambda: len(deletes) == 2)
            await anyio.sleep(0.2)
            tasks.cancel_scope.cancel()
    finally:
        await writer.close()
        await reader.close()
    assert heard == [] and sorted(deletes) == ["p", "p.a"]


async def test_a_terminated_listen_connection_reconnects_and_asks_for_a_resync() -> None:
    assert PG_URL
    store = await fresh_postgres_store(PG_URL)
    listener = store.listener()
    assert listener is not None
    heard: list[tuple[str, int]] = []
    connects: list[int] = []
    engine = sa.create_engine(PG_URL)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(listen, listener, heard, connects)
            await wait_for(lambda: listener.state == "listening")
            for cut in range(1, 3):
                with engine.begin() as conn:
                    conn.execute(
                        sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE datname = current_database() AND query LIKE 'LISTEN %'"
                        )
                    )
                await wait_for(lambda cut=cut: len(connects) > cut)
            with engine.begin() as conn:
                conn.execute(sa.select(sa.func.pg_notify(NOTIFY_CHANNEL, notice("s", 7, "elsewhere"))))
            await wait_for(lambda: ("s", 7) in heard)
            tasks.cancel_scope.cancel()
    finally:
        engine.dispose()
        await store.close()
    assert len(connects) == 3

"""The JSONL root's notices between processes: told once durable, under the session's lock (docs/protocol.md §7.2)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from codec import SessionHeader
from persistence import notice_log
from persistence.base import DEFAULT_OWNER
from persistence.errors import StoreError
from persistence.jsonl.deletion import INTENT_PREFIX, TRASH_PREFIX, Doomed
from persistence.jsonl.files import LOCK_NAME
from persistence.jsonl.layout import encode_segment
from persistence.jsonl.notices import SIDECAR_NAME
from persistence.jsonl.store import JsonlStore
from persistence.notice_log import JOINED
from persistence.notify import Notice
from testing.events import plain
from testing.flocks import held

pytestmark = pytest.mark.anyio


def rows(root: Path) -> list[tuple[str, list[Any]]]:
    """The root's notices as written: each one's origin and payload."""
    with sqlite3.connect(root / SIDECAR_NAME) as db:
        found = db.execute("SELECT origin, notice FROM history_notices ORDER BY n").fetchall()
    return [(origin, json.loads(payload)) for origin, payload in found]


async def until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(30):
        while not condition():
            await anyio.sleep(0.005)


class Heard:
    """What a listener passed on."""

    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self.connects = 0

    def on_head(self, notice: Notice) -> None:
        self.notices.append(notice)

    async def on_connect(self) -> None:
        self.connects += 1

    def told(self) -> list[tuple[str, int, bool, bool]]:
        return [(n.session_id, n.head, n.closed, n.deleted) for n in self.notices]


@asynccontextmanager
async def listening(store: JsonlStore) -> AsyncIterator[Heard]:
    """``store``'s listener running, once it listens."""
    heard = Heard()
    listener = store.listener()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(listener.run, heard.on_head, heard.on_connect)
        await until(lambda: listener.state == "listening" and heard.connects > 0)
        yield heard
        tasks.cancel_scope.cancel()


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[JsonlStore, JsonlStore]]:
    """Two stores on one root, as two processes hold it."""
    one = await JsonlStore.open(tmp_path)
    other = await JsonlStore.open(tmp_path)
    yield one, other
    await one.close()
    await other.close()


def header(session_id: str, parent: str | None = None) -> SessionHeader:
    if parent is None:
        return SessionHeader(id=session_id, createdAt=1)
    return SessionHeader(id=session_id, createdAt=1, parentSession=parent, origin="subagent")


async def test_appends_closes_and_deletes_through_one_store_are_heard_by_the_other_once_in_order(
    stores: tuple[JsonlStore, JsonlStore],
) -> None:
    one, other = stores
    await one.create_session(header("own"))
    await other.create_session(header("s1"))
    await other.create_session(header("p"))
    child = await other.create_session(header("p.a", parent="p"))
    async with listening(one) as heard:
        await one.append("own", [plain(0)])  # its own: passed over
        await other.append("s1", [plain(0)])
        await other.append("s1", [plain(1), plain(2)])
        await other.append("s1", [plain(1), plain(2)])  # a re-send: its head does not move
        await other.close_session("s1", closed_at=5)
        await other.close_session("s1", closed_at=6)  # closed already: nothing to tell
        await other.delete_session("p")
        await until(lambda: len(heard.notices) >= 5)
        assert heard.told()[:3] == [("s1", 0, False, False), ("s1", 2, False, False), ("s1", 2, True, False)]
        # A tree's deletes, in name order, each naming the incarnation it ended.
        assert sorted(heard.told()[3:]) == [("p", -1, False, True), ("p.a", -1, False, True)]
        assert [n.incarnation for n in heard.notices if n.session_id == "p.a"] == [child.incarnation]
        await one.append("own", [plain(1)])
        await other.create_session(header("last"))
        await other.append("last", [plain(0)])
        await until(lambda: len(heard.notices) >= 6)
        assert len(heard.notices) == 6 and heard.told()[5] == ("last", 0, False, False)


async def test_an_append_whose_fsync_fails_is_not_told(
    stores: tuple[JsonlStore, JsonlStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, other = stores
    await other.create_session(header("s1"))
    await other.append("s1", [plain(0)])
    from persistence.jsonl import file_groups

    fsync = file_groups._fsync

    def failing(fd: int) -> OSError | None:
        if Path(f"/proc/self/fd/{fd}").readlink().name == "session.jsonl":
            return OSError(5, "Input/output error")
        return fsync(fd)

    monkeypatch.setattr(file_groups, "_fsync", failing)
    with pytest.raises(StoreError):
        await other.append("s1", [plain(1)])
    monkeypatch.setattr(file_groups, "_fsync", fsync)
    await other.append("s1", [plain(1), plain(2)])
    assert [payload[:2] for _, payload in rows(tmp_path)] == [["s1", 0], ["s1", 2]]


async def test_each_notice_is_written_while_its_sessions_lock_is_held(
    stores: tuple[JsonlStore, JsonlStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, other = stores
    await other.create_session(header("s1"))
    await other.create_session(header("s2"))
    lock = tmp_path / encode_segment("s1") / LOCK_NAME
    seen: list[tuple[str, bool]] = []
    tell = notice_log.tell

    def checking(cursor: sqlite3.Cursor, origin: str, payloads: Any) -> None:
        told = json.loads(payloads[0])[0]
        if told == "s2":
            # Deleted: its directory is in the trash by now, its lock still held.
            locks = list(tmp_path.glob(f"{TRASH_PREFIX}*/{LOCK_NAME}"))
            seen.append((told, len(locks) == 1 and held(locks[0])))
        else:
            seen.append((told, held(lock)))
        tell(cursor, origin, payloads)

    monkeypatch.setattr(notice_log, "tell", checking)
    await other.append("s1", [plain(0)])
    await other.close_session("s1", closed_at=5)
    await other.delete_session("s2")
    assert seen == [("s1", True), ("s1", True), ("s2", True)]
    assert len(rows(tmp_path)) == 3


async def test_a_store_that_starts_listening_makes_the_others_resync(stores: tuple[JsonlStore, JsonlStore]) -> None:
    one, other = stores
    async with listening(one) as heard:
        assert heard.connects == 1
        async with listening(other):
            await until(lambda: heard.connects == 2)
        assert heard.notices == []


async def test_a_failed_notice_reports_reconnecting_until_a_joined_notice_is_written(
    stores: tuple[JsonlStore, JsonlStore], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, other = stores
    await other.create_session(header("s1"))
    tell = notice_log.tell
    failing = True

    def full(cursor: sqlite3.Cursor, origin: str, payloads: Any) -> None:
        if failing:
            raise sqlite3.OperationalError("database or disk is full")
        tell(cursor, origin, payloads)

    async with listening(one) as heard, listening(other):
        await until(lambda: heard.connects == 2)
        monkeypatch.setattr(notice_log, "tell", full)
        # Durable before its notice: the append stands.
        assert (await other.append("s1", [plain(0)])).head_seq == 0
        assert other.listener().state == "reconnecting"
        failing = False
        await until(lambda: other.listener().state == "listening")
        await until(lambda: heard.connects == 3)
    assert rows(tmp_path)[-1][1][0] == JOINED


async def test_a_removed_notices_file_makes_the_store_unready_for_good(
    stores: tuple[JsonlStore, JsonlStore], tmp_path: Path
) -> None:
    _, other = stores
    await other.check_ready()  # not opened yet: nothing to check
    await other.create_session(header("s1"))
    await other.append("s1", [plain(0)])
    await other.check_ready()
    (tmp_path / SIDECAR_NAME).unlink()
    for _ in range(2):
        with pytest.raises(StoreError, match="removed or replaced"):
            await other.check_ready()
    # Never made again by this process, whose connection keeps the old file's shared memory.
    assert (await other.append("s1", [plain(1)])).head_seq == 1
    assert not (tmp_path / SIDECAR_NAME).exists()


async def test_forgetting_every_session_drops_every_kept_state(stores: tuple[JsonlStore, JsonlStore]) -> None:
    one, other = stores
    await other.create_session(header("s1"))
    await other.append("s1", [plain(0)])
    assert (await one.get_session("s1")).head_seq == 0
    assert [s.id for s in await one.list_sessions(DEFAULT_OWNER, limit=10)] == ["s1"]
    assert "s1" in one._states
    one._forget(None)
    assert "s1" not in one._states


async def test_one_store_at_a_time_holds_the_sweep_turn(stores: tuple[JsonlStore, JsonlStore]) -> None:
    one, other = stores
    async with one.sweeping() as mine:
        assert mine
        async with other.sweeping() as theirs:
            assert not theirs
    async with other.sweeping() as theirs:
        assert theirs


async def test_recovery_finishes_a_dead_process_delete_and_tells_it(
    stores: tuple[JsonlStore, JsonlStore], tmp_path: Path
) -> None:
    one, other = stores
    made = await other.create_session(header("s1"))
    await other.create_session(header("s2"))
    doomed = [Doomed(encode_segment("s1"), made.incarnation, "s1")]
    (tmp_path / f"{INTENT_PREFIX}dead").write_bytes(msgspec.json.encode(doomed))
    await one.recover()
    assert rows(tmp_path) == [(one._sidecar.origin, ["s1", -1, one._sidecar.origin, False, True, made.incarnation])]
    # The notices' and the turn's files are hidden from listings.
    async with one.sweeping():
        listed = [s.id for s in await one.list_sessions(DEFAULT_OWNER, limit=10)]
    assert listed == ["s2"]
    assert {path.name for path in tmp_path.iterdir() if path.name.startswith(".history-notices")} >= {SIDECAR_NAME}

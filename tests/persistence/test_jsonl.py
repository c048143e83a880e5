"""JSONL store: crash recovery, the sidecar index, the log format and path safety."""

from __future__ import annotations

import builtins
import errno
import io
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec
import pytest

from codec import SessionHeader, encode, pack, pack_page, read_session_log
from history_service.scenarios import multi_turn
from persistence import open_store
from persistence.base import DEFAULT_OWNER
from persistence.errors import InvalidSessionIdError, SchemaVersionError, SessionClosedError, StoreError
from persistence.jsonl import INDEX_NAME, JsonlStore, encode_segment
from persistence.jsonl.files import LOCK_NAME, locked
from persistence.jsonl.index import TAIL_WINDOW, last_seq, read_index, read_last_entry
from persistence.sealing import MAX_TAIL
from testing.corpus import corpus_logs
from testing.events import plain
from testing.flocks import held, hold
from testing.stores import page_records

pytestmark = pytest.mark.anyio

HEADER = SessionHeader(id="s1", createdAt=1_700_000_000_000)


def log_name(compression: str) -> str:
    return "session.jsonl.zst" if compression == "zstd" else "session.jsonl"


@pytest.fixture(params=["none", "zstd"])
def compression(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_log_is_the_deepseek_harness_line_format(tmp_path: Path) -> None:
    events = multi_turn(seed=1, turns=2)
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    await store.append("s1", events[:30])
    await store.append("s1", events[30:])
    data = (tmp_path / "s1" / "session.jsonl").read_bytes()
    assert data.startswith(b'{"type":"session","version":0,"id":"s1",')
    assert b'"type":"text-chunks","seq0":' in data or b'"type":"reasoning-chunks","seq0":' in data
    log = read_session_log(data)
    # The header as given, with the incarnation the store gave it (§2.5).
    assert isinstance(log.header.incarnation, str) and log.events == events
    assert msgspec.structs.replace(log.header, incarnation=msgspec.UNSET) == HEADER


async def test_truncation_anywhere_in_the_last_batch_cuts_it_whole(tmp_path: Path, compression: str) -> None:
    events = multi_turn(seed=2, turns=2, max_run=8)
    first, last = events[:-6], events[-6:]
    root = tmp_path / "root"
    store = await JsonlStore.open(root, compression=compression)
    await store.create_session(HEADER)
    await store.append("s1", first[:40])
    await store.append("s1", first[40:])
    log = root / "s1" / log_name(compression)
    committed = log.stat().st_size
    await store.append("s1", last)
    full_log, full_index = log.read_bytes(), (root / "s1" / INDEX_NAME).read_bytes()
    assert len(full_log) > committed
    for cut in range(committed, len(full_log)):
        log.write_bytes(full_log[:cut])
        (root / "s1" / INDEX_NAME).write_bytes(full_index)
        reopened = await JsonlStore.open(root, compression=compression)
        assert await reopened.head_seq("s1") == len(first) - 1, cut
        assert await reopened.read_events("s1", 0, len(events)) == first, cut
        assert log.stat().st_size == committed, cut
        await reopened.append("s1", last)
        assert await reopened.read_events("s1", 0, len(events)) == events, cut


async def test_torn_index_line_is_dropped_with_its_batch(tmp_path: Path, compression: str) -> None:
    store = await JsonlStore.open(tmp_path, compression=compression)
    await store.create_session(HEADER)
    await store.append("s1", [plain(0), plain(1)])
    index = tmp_path / "s1" / INDEX_NAME
    log = tmp_path / "s1" / log_name(compression)
    before_index, before_log = index.read_bytes(), log.read_bytes()
    await store.append("s1", [plain(2)])
    after_index = index.read_bytes()
    # Crash while writing the index entry: the log was not yet touched.
    for cut in range(len(before_index), len(after_index) - 1):
        index.write_bytes(after_index[:cut])
        log.write_bytes(before_log)
        reopened = await JsonlStore.open(tmp_path, compression=compression)
        assert await reopened.read_events("s1", 0, 5) == [plain(0), plain(1)]
        assert index.read_bytes() == before_index


async def test_missing_index_is_rebuilt_from_the_log(tmp_path: Path, compression: str) -> None:
    events = multi_turn(seed=3, turns=3)
    store = await JsonlStore.open(tmp_path, compression=compression)
    await store.create_session(HEADER)
    for start in range(0, len(events), 50):
        await store.append("s1", events[start : start + 50])
    expected_cuts = await store.page_cuts("s1", to_seq=len(events), max_messages=3)
    (tmp_path / "s1" / INDEX_NAME).unlink()
    reopened = await JsonlStore.open(tmp_path, compression=compression)
    assert await reopened.read_events("s1", 0, len(events)) == events
    assert await reopened.page_cuts("s1", to_seq=len(events), max_messages=3) == expected_cuts
    assert (tmp_path / "s1" / INDEX_NAME).exists()
    await reopened.append("s1", [plain(len(events))])
    assert await reopened.head_seq("s1") == len(events)


async def test_unreadable_index_is_rebuilt_and_the_log_wins(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    await store.append("s1", [plain(0), plain(1)])
    (tmp_path / "s1" / INDEX_NAME).write_bytes(b'{"version":1,"compression":"none","headerEnd":3}\n[oops\n')
    reopened = await JsonlStore.open(tmp_path)
    assert await reopened.read_events("s1", 0, 2) == [plain(0), plain(1)]


async def test_lines_after_the_index_are_kept_and_a_torn_line_is_cut(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    await store.append("s1", [plain(0)])
    log = tmp_path / "s1" / "session.jsonl"
    with open(log, "ab") as handle:
        handle.write(encode(plain(1)) + b"\n" + encode(plain(2))[:10])
    reopened = await JsonlStore.open(tmp_path)
    assert await reopened.read_events("s1", 0, 3) == [plain(0), plain(1)]
    assert log.read_bytes().endswith(encode(plain(1)) + b"\n")


async def test_a_second_store_sees_appends_from_the_first(tmp_path: Path) -> None:
    writer = await JsonlStore.open(tmp_path)
    reader = await JsonlStore.open(tmp_path)
    await writer.create_session(HEADER)
    await writer.append("s1", [plain(0)])
    assert await reader.read_events("s1", 0, 1) == [plain(0)]
    await writer.append("s1", [plain(1)])
    assert await reader.head_seq("s1") == 1
    await reader.append("s1", [plain(2)])
    assert await writer.read_events("s1", 0, 3) == [plain(0), plain(1), plain(2)]


async def test_a_session_deleted_and_made_again_elsewhere_at_the_same_index_size_is_read_again(
    tmp_path: Path,
) -> None:
    writer = await JsonlStore.open(tmp_path)
    reader = await JsonlStore.open(tmp_path)
    try:
        first = await writer.create_session(HEADER)
        assert (await reader.get_session("s1")).incarnation == first.incarnation
        # Kept open, so the new index cannot be given the old one's inode.
        with open(tmp_path / encode_segment("s1") / INDEX_NAME, "rb") as old:
            await writer.delete_session("s1")
            again = await writer.create_session(HEADER)
            assert os.fstat(old.fileno()).st_size == (tmp_path / encode_segment("s1") / INDEX_NAME).stat().st_size
            assert again.incarnation != first.incarnation
            assert (await reader.get_session("s1")).incarnation == again.incarnation
    finally:
        await writer.close()
        await reader.close()


def test_segments_never_escape_the_root() -> None:
    for session_id in ["..", ".", "a/../../etc", "/abs", "a\\b", "\x00", "~", "é", "😀"]:
        name = encode_segment(session_id)
        assert "/" not in name and "\\" not in name and not name.startswith(".") and "\x00" not in name
    assert encode_segment("..") == "~002E~002E"
    assert encode_segment("😀") == "~D83D~DE00"
    assert encode_segment("abc-DEF_09") == "abc-DEF_09"
    with pytest.raises(InvalidSessionIdError):
        encode_segment("")


def test_ids_too_long_to_escape_get_a_hashed_name() -> None:
    """F4: 200 characters of '.', ':' and '@' escape to 1,000; such ids still get a directory."""
    long_ids = ["é" * 60, ".:@" * 66 + "..", ".:@" * 66 + ".:", "a" * 240 + "."]
    names = [encode_segment(session_id) for session_id in long_ids]
    assert all(name.startswith("~~") and len(name) == 66 for name in names)
    assert len(set(names)) == len(names)
    assert encode_segment("a" * 240) == "a" * 240


async def test_root_keeps_its_compression_and_format(tmp_path: Path) -> None:
    await JsonlStore.open(tmp_path, compression="zstd")
    with pytest.raises(StoreError, match="holds compression=zstd logs"):
        await JsonlStore.open(tmp_path, compression="none")
    reopened = await JsonlStore.open(tmp_path)  # no mode given: the root's own
    await reopened.create_session(SessionHeader(id="z", createdAt=0))
    assert (tmp_path / "z" / "session.jsonl.zst").exists()
    (tmp_path / ".history-store.json").write_bytes(b'{"format":9,"compression":"zstd"}')
    with pytest.raises(SchemaVersionError, match="format 9"):
        await JsonlStore.open(tmp_path, compression="zstd")
    with pytest.raises(StoreError, match="unknown JSONL compression"):
        await JsonlStore.open(tmp_path / "other", compression="lz4")


FOREIGN = (
    b'{"type":"session","id":"fx","createdAt":5,"cwd":"{{cwd}}"}\n'
    b'{"type":"turn/start","data":{"turn":1}}\n'
    b'{"type":"user/message","data":{"id":"u","content":[]},"surfaceOp":"append"}\n'
    b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[4,-1],"texts":["a","b","c"]}}\n'
    b'{"type":"assistant/message","data":{"m":1},"sourceEventSeqs":[2,3,4],"surfaceOp":"append"}\n'
)


async def test_a_log_placed_in_the_root_is_served_as_is(tmp_path: Path) -> None:
    (tmp_path / "fx").mkdir()
    (tmp_path / "fx" / "session.jsonl").write_bytes(FOREIGN)
    store = await JsonlStore.open(tmp_path)
    events = read_session_log(FOREIGN, derive_times=False).events
    info = await store.get_session("fx")
    assert info.head_seq == len(events) - 1 and info.owner == "local"
    assert await store.read_events("fx", 0, len(events)) == events
    assert await page_records(store, "fx", 0, len(events)) == [encode(r) for r in pack_page(events)]
    assert await store.page_cuts("fx", to_seq=len(events), max_messages=1) == [2]
    assert (tmp_path / "fx" / "session.jsonl").read_bytes() == FOREIGN


@pytest.mark.parametrize("path", corpus_logs())
async def test_corpus_log_in_a_store_root_is_served_exactly(tmp_path: Path, path: Path) -> None:
    data = path.read_bytes()
    log = read_session_log(data, derive_times=False)
    directory = tmp_path / encode_segment(log.header.id)
    directory.mkdir()
    (directory / "session.jsonl").write_bytes(data)
    store = await JsonlStore.open(tmp_path)
    n = len(log.events)
    assert await store.read_events(log.header.id, 0, n) == log.events
    for start in range(0, n, max(1, n // 7)):
        expected = [encode(r) for r in pack_page(log.events[start:n])]
        assert await page_records(store, log.header.id, start, n) == expected


# Listing: head seqs from the index's last entry.


async def test_listing_reads_heads_without_loading_any_session(
    tmp_path: Path, compression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = multi_turn(seed=6, turns=2)
    store = await JsonlStore.open(tmp_path, compression=compression)
    for i in range(3):
        await store.create_session(SessionHeader(id=f"s{i}", createdAt=i), owner="alice")
    for start in range(0, len(events), 20):
        await store.append("s1", events[start : start + 20])
    await store.append("s2", [plain(0)])

    def no_loading(*args: object) -> None:
        raise AssertionError("listing loaded a session")

    monkeypatch.setattr(JsonlStore, "_load", no_loading)
    reopened = await JsonlStore.open(tmp_path, compression=compression)
    listed = await reopened.list_sessions("alice", limit=10)
    assert [(s.id, s.head_seq) for s in listed] == [("s2", 0), ("s1", len(events) - 1), ("s0", -1)]


async def test_last_entry_from_the_tail_is_the_last_entry_of_the_index(tmp_path: Path, compression: str) -> None:
    store = await JsonlStore.open(tmp_path, compression=compression)
    await store.create_session(HEADER)
    index = tmp_path / "s1" / INDEX_NAME
    found = read_last_entry(index)
    assert found is not None and found[1] is None and found[2] == index.stat().st_size
    events = multi_turn(seed=7, turns=3)
    for start in range(0, len(events), 13):
        await store.append("s1", events[start : start + 13])
        loaded, found = read_index(index), read_last_entry(index)
        assert loaded is not None and found is not None
        assert found == (loaded[0], loaded[1][-1], index.stat().st_size)
        assert last_seq(found[1]) == min(start + 12, len(events) - 1)
    data = index.read_bytes()
    index.write_bytes(data[:-3])
    assert read_last_entry(index) is None


async def test_listing_after_a_torn_batch_reports_the_committed_head(tmp_path: Path, compression: str) -> None:
    store = await JsonlStore.open(tmp_path, compression=compression)
    await store.create_session(HEADER, owner="alice")
    await store.append("s1", [plain(0), plain(1)])
    log = tmp_path / "s1" / log_name(compression)
    committed = log.stat().st_size
    await store.append("s1", [plain(2), plain(3)])
    log.write_bytes(log.read_bytes()[: committed + 5])
    reopened = await JsonlStore.open(tmp_path, compression=compression)
    assert [s.head_seq for s in await reopened.list_sessions("alice", limit=1)] == [1]
    assert log.stat().st_size == committed


async def test_listing_counts_lines_written_after_the_last_entry(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    await store.append("s1", [plain(0)])
    with open(tmp_path / "s1" / "session.jsonl", "ab") as handle:
        handle.write(encode(plain(1)) + b"\n")
    (tmp_path / "fx").mkdir()
    (tmp_path / "fx" / "session.jsonl").write_bytes(FOREIGN)
    reopened = await JsonlStore.open(tmp_path)
    listed = await reopened.list_sessions("local", limit=10)
    foreign = read_session_log(FOREIGN, derive_times=False)
    assert [(s.id, s.head_seq) for s in listed] == [("s1", 1), ("fx", len(foreign.events) - 1)]


async def test_listing_a_batch_larger_than_the_tail_window(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    await store.append("s1", [plain(seq) for seq in range(2000)])
    assert (tmp_path / "s1" / INDEX_NAME).stat().st_size > TAIL_WINDOW
    assert read_last_entry(tmp_path / "s1" / INDEX_NAME) is None
    reopened = await JsonlStore.open(tmp_path)
    assert [s.head_seq for s in await reopened.list_sessions("local", limit=1)] == [1999]


async def test_a_log_in_a_directory_its_id_does_not_name_is_not_listed(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    (tmp_path / "s1").rename(tmp_path / "elsewhere")
    assert await store.list_sessions("local", limit=10) == []


@pytest.mark.parametrize("compression", ["none", "zstd"])
async def test_rewrites_stay_as_small_as_the_open_run(tmp_path: Path, compression: str) -> None:
    """A seal splits the batch it starts in, so no entry carries the records before the open run again."""
    events = multi_turn(seed=3, turns=40, max_run=200)
    suffix = "?compression=zstd" if compression == "zstd" else ""
    store = await open_store(f"jsonl:///{tmp_path}/j{suffix}", create=True)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    batches = 0
    for start in range(0, len(events), 37):
        await store.append("s", events[start : start + 37])
        batches += 1
    assert await store.read_events("s", 0, len(events)) == events
    await store.close()
    loaded = read_index(tmp_path / "j" / "s" / "index.jsonl")
    assert loaded is not None
    listed = sum(len(entry.seqs) // 8 for entry in loaded[1])
    # Each batch lists its new records plus at most the open run's log2-bounded pieces.
    assert listed <= batches * (MAX_TAIL.bit_length() + 4) + len(pack(events))


# One session's readers never hold up another session's appends, and never starve their own.


async def eventually(predicate: Callable[[], bool], what: str, *, fail: bool = True) -> None:
    """Wait for ``predicate``: a bound so that a missing behaviour fails the test instead of hanging it."""
    for _ in range(2000):
        if predicate():
            return
        await anyio.sleep(0.005)
    if fail:
        raise AssertionError(f"never happened: {what}")


async def two_sessions(root: Path) -> JsonlStore:
    store = await JsonlStore.open(root)
    for name in ("big", "other"):
        await store.create_session(SessionHeader(id=name, createdAt=HEADER.createdAt))
        await store.append(name, [plain(0)])
    return store


async def test_a_session_held_by_readers_never_holds_up_appends_to_another(tmp_path: Path) -> None:
    store = await two_sessions(tmp_path)
    reader = hold(tmp_path / "big" / LOCK_NAME)
    done: list[str] = []

    async def append(session: str) -> None:
        await store.append(session, [plain(1, "note", {"session": session})])
        done.append(session)

    async with anyio.create_task_group() as group:
        group.start_soon(append, "big")
        # Only so that, without the fix, the append to big is the one the writer waits in.
        await anyio.sleep(0.2)
        group.start_soon(append, "other")
        try:
            await eventually(lambda: "other" in done, "the append to the other session completed")
            # The reader still holds big's lock, so its append cannot have completed.
            assert done == ["other"]
        finally:
            os.close(reader)
    assert done == ["other", "big"]
    await store.close()
    reopened = await JsonlStore.open(tmp_path)
    for name in ("big", "other"):
        assert await reopened.read_events(name, 0, 5) == [plain(0), plain(1, "note", {"session": name})]
    await reopened.close()


async def test_readers_that_come_after_a_waiting_append_wait_behind_it(tmp_path: Path) -> None:
    """A stream of new readers cannot starve an append: once it waits, later readers queue behind it."""
    store = await two_sessions(tmp_path)
    directory = tmp_path / "big"
    first = hold(directory / LOCK_NAME)
    seen: list[list[Any]] = []

    async def append() -> None:
        await store.append("big", [plain(1, "note", {"session": "big"})])

    async def read() -> None:
        seen.append(await store.read_events("big", 0, 5))

    def read_in_another_process() -> None:
        # What another process running this store does, from a thread of its own.
        with locked(directory, "big", shared=True):
            seen.append([(directory / INDEX_NAME).stat().st_size])

    async with anyio.create_task_group() as group:
        group.start_soon(append)
        try:
            # The waiting append keeps the gate (without it, readers pass and read the old log).
            await eventually(lambda: held(directory / "gate"), "the waiting append keeps the gate", fail=False)
            for _ in range(3):
                group.start_soon(read)
            group.start_soon(anyio.to_thread.run_sync, read_in_another_process)
            await anyio.sleep(0.05)
        finally:
            os.close(first)
    index_size = (directory / INDEX_NAME).stat().st_size
    assert sorted(seen, key=len) == [[index_size]] + [[plain(0), plain(1, "note", {"session": "big"})]] * 3
    await store.close()


async def test_a_cancelled_append_waiting_for_its_lock_lets_it_go(tmp_path: Path) -> None:
    store = await two_sessions(tmp_path)
    reader = hold(tmp_path / "big" / LOCK_NAME)
    async with anyio.create_task_group() as group:
        group.start_soon(store.append, "big", [plain(1)])
        try:
            await eventually(lambda: held(tmp_path / "big" / "gate"), "the append waits for its lock")
            group.cancel_scope.cancel()
        finally:
            os.close(reader)
    # The append may have committed (a queued unit runs to its end), but its lock is let go either way.
    assert not held(tmp_path / "big" / LOCK_NAME)
    head = await store.head_seq("big")
    await store.append("big", [plain(head + 1)])
    assert await store.head_seq("big") == head + 1
    await store.close()


# Any OS error in a read is a store error (503), and the session reads again once it passes.

FAULTS = [errno.EACCES, errno.EIO, errno.EMFILE]
READS: dict[str, Callable[[JsonlStore], Awaitable[object]]] = {
    "read_page": lambda store: store.read_page("s1", through=None, before=None, max_messages=2),
    "read_stored": lambda store: store.read_stored("s1", 0, 3),
    "get_session": lambda store: store.get_session("s1"),
    "list_sessions": lambda store: store.list_sessions(DEFAULT_OWNER, limit=10),
}


def inject(monkeypatch: pytest.MonkeyPatch, directory: Path, code: int) -> None:
    """Fail every open, stat and pread of ``directory``'s files with ``code``."""
    real_open, real_os_open, real_stat, real_pread = builtins.open, os.open, os.stat, os.pread

    def fault(path: Any) -> OSError:
        return OSError(code, os.strerror(code), str(path))

    def ours(path: Any) -> bool:
        return isinstance(path, str | os.PathLike) and os.fspath(path).startswith(str(directory))

    def faulty_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if ours(file):
            raise fault(file)
        return real_open(file, *args, **kwargs)

    def faulty_os_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if ours(path):
            raise fault(path)
        return real_os_open(path, *args, **kwargs)

    def faulty_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if ours(path):
            raise fault(path)
        return real_stat(path, *args, **kwargs)

    def faulty_pread(fd: int, length: int, offset: int) -> bytes:
        raise fault(fd)

    monkeypatch.setattr(builtins, "open", faulty_open)
    monkeypatch.setattr(io, "open", faulty_open)
    monkeypatch.setattr(os, "open", faulty_os_open)
    monkeypatch.setattr(os, "stat", faulty_stat)
    monkeypatch.setattr(os, "pread", faulty_pread)
    assert real_pread is not faulty_pread


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
async def test_an_os_error_in_a_read_is_a_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, read: str, warm: bool
) -> None:
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    await store.append("s1", [plain(0), plain(1), plain(2)])
    expected = await READS[read](store)
    if not warm:
        await store.close()
        store = await JsonlStore.open(tmp_path)
    inject(monkeypatch, tmp_path / "s1", code)
    with pytest.raises(StoreError, match="store unavailable") as caught:
        await READS[read](store)
    monkeypatch.undo()
    assert isinstance(caught.value.__cause__, OSError) and caught.value.__cause__.errno == code
    assert await READS[read](store) == expected
    await store.close()


async def test_a_close_made_by_another_process_is_seen_by_a_store_that_holds_the_session(tmp_path: Path) -> None:
    serving = await JsonlStore.open(tmp_path / "root")
    await serving.create_session(SessionHeader(id="s", createdAt=0))
    await serving.append("s", [plain(0)])
    assert not (await serving.get_session("s")).closed  # loaded and kept
    other = await JsonlStore.open(tmp_path / "root")
    await other.close_session("s", closed_at=7)
    await other.close()
    assert (await serving.get_session("s")).header.closedAt == 7
    with pytest.raises(SessionClosedError):
        await serving.append("s", [plain(1)])
    read = await serving.read_page("s", through=None, before=None, max_messages=5)
    assert read.info.header.closedAt == 7
    await serving.close()

"""A sealing rewrite of a JSONL log is all or nothing: a crash at any byte loses no committed record."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import anyio
import pytest

from codec import Event, SessionHeader, encode, pack_page
from persistence.errors import StoreError
from persistence.jsonl import INDEX_NAME, JsonlStore, journal as jsonl_journal
from persistence.jsonl.files import write_at as files_write_at
from testing.events import plain, text
from testing.stores import page_records

pytestmark = pytest.mark.anyio

COMMITTED = [plain(0), *(text(k, 10 + k, f"a{k}") for k in range(1, 6))]
# Continues the open run with as many members as its stored row holds: compaction merges the two.
SEALING = [text(k, 10 + k, f"b{k}") for k in range(6, 11)]


class Files:
    """A session directory's log, index and journal."""

    def __init__(self, directory: Path, log_name: str) -> None:
        self.directory = directory
        self.log = directory / log_name
        self.index = directory / INDEX_NAME
        self.journal = directory / jsonl_journal.JOURNAL_NAME

    def read(self) -> tuple[bytes, bytes]:
        return self.log.read_bytes(), self.index.read_bytes()

    def write(self, log: bytes, index: bytes, journal: bytes) -> None:
        self.log.write_bytes(log)
        self.index.write_bytes(index)
        self.journal.write_bytes(journal)


async def sealing_write(
    root: Path, compression: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[Files, dict[str, bytes]]:
    """Commit COMMITTED, then append SEALING; return the files before, after, and the journal it wrote."""
    store = await JsonlStore.open(root, compression=compression)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", COMMITTED)
    files = Files(
        next(p for p in root.iterdir() if p.is_dir()), "session.jsonl.zst" if compression == "zstd" else "session.jsonl"
    )
    old_log, old_index = files.read()
    kept: list[bytes] = []
    clearing = jsonl_journal.cleared

    def keep_then_clear(directory: Path) -> int:
        kept.append((directory / "journal").read_bytes())
        return clearing(directory)

    monkeypatch.setattr(jsonl_journal, "cleared", keep_then_clear)
    await store.append("s", SEALING)
    monkeypatch.undo()
    await store.close()
    new_log, new_index = files.read()
    assert len(kept) == 1, "the append did not rewrite the log"
    return files, {
        "old_log": old_log,
        "old_index": old_index,
        "new_log": new_log,
        "new_index": new_index,
        "journal": kept[0],
    }


async def reopened(root: Path) -> list[Event]:
    store = await JsonlStore.open(root)
    head = await store.head_seq("s")
    events = await store.read_events("s", 0, head + 1)
    assert await page_records(store, "s", 0, head + 1) == [encode(r) for r in pack_page(events)]
    await store.close()
    return events


def crash_states(found: dict[str, bytes]) -> list[tuple[str, bytes, bytes, bytes, bool]]:
    """Every state a crash can leave: (what, log, index, journal, whether the append survives)."""
    old_log, old_index, new_log, new_index, journal = (
        found[key] for key in ("old_log", "old_index", "new_log", "new_index", "journal")
    )
    at = next(i for i in range(min(len(old_log), len(new_log))) if old_log[i] != new_log[i])
    states = [(f"journal[:{i}]", old_log, old_index, journal[:i], False) for i in range(len(journal))]
    # The index entries and the log bytes share one barrier: any prefix of each may have reached the disk.
    middle = (at + len(new_log)) // 2
    for i in range(len(old_index), len(new_index) + 1):
        for j in (at, middle, len(new_log)) if i < len(new_index) else range(at, len(new_log) + 1):
            # The log is overwritten in place: bytes past the written prefix are still the old ones.
            log = new_log[:j] + old_log[j:]
            whole = (i, j) == (len(new_index), len(new_log))
            states.append((f"index[:{i}], log[:{j}]", log, new_index[:i], journal, whole))
    # A power loss may keep the index's new size and not its bytes (zeros), or keep its pages out of order.
    for i in (len(old_index), (len(old_index) + len(new_index)) // 2):
        zeros = new_index[:i] + bytes(len(new_index) - i)
        garbled = old_index + new_index[i:] if i > len(old_index) else zeros
        for j in (at, len(new_log)):
            log = new_log[:j] + old_log[j:]
            states += [(f"index[:{i}]+zeros, log[:{j}]", log, zeros, journal, False)]
            states += [(f"index out of order at {i}, log[:{j}]", log, garbled, journal, False)]
    return states


@pytest.mark.parametrize("compression", ["none", "zstd"])
async def test_a_crash_at_any_byte_of_a_sealing_write_loses_nothing(
    tmp_path: Path, compression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    files, found = await sealing_write(tmp_path / "root", compression, monkeypatch)
    assert await reopened(tmp_path / "root") == COMMITTED + SEALING
    states = crash_states(found)
    assert len(states) > 100
    for what, log, index, journal, survives in states:
        files.write(log, index, journal)
        assert await reopened(tmp_path / "root") == (COMMITTED + SEALING if survives else COMMITTED), what
        assert files.journal.read_bytes() == b"", what
        assert files.log.read_bytes() == (found["new_log"] if survives else found["old_log"]), what


async def test_the_store_keeps_working_after_an_undone_rewrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files, found = await sealing_write(tmp_path / "root", "none", monkeypatch)
    files.write(found["new_log"][: len(found["new_log"]) - 3], found["new_index"], found["journal"])
    store = await JsonlStore.open(tmp_path / "root")
    assert await store.read_events("s", 0, 11) == COMMITTED
    await store.append("s", SEALING)
    await store.close()
    assert await reopened(tmp_path / "root") == COMMITTED + SEALING
    assert files.read() == (found["new_log"], found["new_index"])


async def test_readers_never_see_a_log_mid_rewrite(tmp_path: Path) -> None:
    """Readers share the session's lock and a sealing append holds it: reads racing appends stay exact."""
    store = await JsonlStore.open(tmp_path)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    events = [plain(0)] + [text(k, k, f"t{k}") for k in range(1, 400)]
    done = anyio.Event()

    async def append() -> None:
        for k in range(len(events)):
            await store.append("s", events[k : k + 1])
        done.set()

    async def read() -> None:
        while not done.is_set():
            head = await store.head_seq("s")
            assert await page_records(store, "s", 0, head + 1) == [encode(r) for r in pack_page(events[: head + 1])]

    async with anyio.create_task_group() as group:
        group.start_soon(append)
        group.start_soon(read)
    await store.close()


async def test_a_journal_left_without_its_index_entry_is_settled_before_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process died after writing its journal: the index looks unchanged, so a cached state is reused."""
    files, found = await sealing_write(tmp_path / "root", "none", monkeypatch)
    files.write(found["old_log"], found["old_index"], b"")
    store = await JsonlStore.open(tmp_path / "root")
    assert await store.read_events("s", 0, 6) == COMMITTED
    files.journal.write_bytes(found["journal"])
    # The open run is one row already, so closing it rewrites nothing and writes no journal of its own.
    await store.append("s", [plain(6)])
    await store.append("s", [plain(7)])
    await store.close()
    assert files.journal.read_bytes() == b""
    assert await reopened(tmp_path / "root") == [*COMMITTED, plain(6), plain(7)]


async def committed(root: Path) -> JsonlStore:
    """A store whose session ``s`` holds COMMITTED, so that SEALING rewrites its log."""
    store = await JsonlStore.open(root)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", COMMITTED)
    return store


async def seals_again(store: JsonlStore, root: Path) -> None:
    """``store`` is ready, holds COMMITTED, and takes SEALING, which a reopen reads back."""
    await store.check_ready()
    assert await store.read_events("s", 0, 11) == COMMITTED
    await store.append("s", SEALING)
    await store.close()
    assert await reopened(root) == COMMITTED + SEALING


def log_fsyncs_fail(monkeypatch: pytest.MonkeyPatch, log_name: str, times: int) -> None:
    """The next ``times`` fsyncs of a session log fail, as a failing disk's would."""
    fsync = os.fsync
    left = [times]

    def failing_fsync(fd: int) -> None:
        if left[0] and os.readlink(f"/proc/self/fd/{fd}").endswith("/" + log_name):
            left[0] -= 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)


async def test_a_rewrite_whose_fsync_fails_is_undone_though_its_files_look_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    store = await committed(root)
    files = Files(root / "s", "session.jsonl")
    before = files.read()
    log_fsyncs_fail(monkeypatch, "session.jsonl", 1)
    with pytest.raises(StoreError):
        await store.append("s", SEALING)
    monkeypatch.undo()
    # The page cache held the whole rewrite, and its fsync failed: it is put back, not trusted.
    assert files.read() == before
    assert files.journal.read_bytes() == b""
    await seals_again(store, root)


async def test_a_rewrite_that_cannot_be_undone_fails_the_store_closed_and_its_reads_undo_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    store = await committed(root)
    # The log's fsync fails, and so does the undo, before it writes the old bytes back: the page
    # cache holds the whole rewrite, which the disk may not.
    log_fsyncs_fail(monkeypatch, "session.jsonl", 1)
    write_at = files_write_at

    def failing_write_at(path: Path, offset: int, data: bytes) -> None:
        monkeypatch.setattr(jsonl_journal, "write_at", write_at)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(jsonl_journal, "write_at", failing_write_at)
    with pytest.raises(StoreError):
        await store.append("s", SEALING)
    monkeypatch.undo()
    assert jsonl_journal.pending(root / "s")
    with pytest.raises(StoreError, match="reopened"):
        await store.append("s", [plain(11)])
    with pytest.raises(StoreError, match="reopened"):
        await store.check_ready()
    # A read does not trust the files either: it undoes the rewrite.
    assert await store.read_events("s", 0, 11) == COMMITTED
    assert not jsonl_journal.pending(root / "s")
    await store.close()

    await seals_again(await JsonlStore.open(root), root)


async def test_a_rewrite_found_done_is_made_durable_before_its_journal_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash inside the second barrier may leave the rewrite whole in the page cache only."""
    files, found = await sealing_write(tmp_path / "root", "none", monkeypatch)
    files.write(found["new_log"], found["new_index"], found["journal"])
    synced: list[str] = []
    fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        synced.append(os.path.basename(path) + (" (empty)" if os.fstat(fd).st_size == 0 else ""))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    assert await reopened(tmp_path / "root") == COMMITTED + SEALING
    cleared = synced.index("journal (empty)")
    assert {INDEX_NAME, "session.jsonl"} <= set(synced[:cleared]), synced


async def test_a_journal_not_cleared_durably_fails_the_store_closed_until_it_is_reopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    store = await JsonlStore.open(root)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.append("s", COMMITTED)
    files = Files(root / "s", "session.jsonl")
    # The journal the clearing would have erased: a power loss can bring it back, as its fsync failed.
    kept: list[bytes] = []
    clearing_fds: set[int] = set()
    clearing, fsync = jsonl_journal.cleared, os.fsync

    def clear(directory: Path) -> int:
        kept.append((directory / jsonl_journal.JOURNAL_NAME).read_bytes())
        fd = clearing(directory)
        clearing_fds.add(fd)
        return fd

    def failing_fsync(fd: int) -> None:
        if fd in clearing_fds:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        fsync(fd)

    monkeypatch.setattr(jsonl_journal, "cleared", clear)
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StoreError):
        await store.append("s", SEALING)
    monkeypatch.undo()
    assert len(kept) == 1
    with pytest.raises(StoreError, match="reopened"):
        await store.append("s", [plain(11)])
    with pytest.raises(StoreError, match="reopened"):
        await store.check_ready()
    # Reads go on: the files are whole, only a later power loss could undo the journal's clearing.
    assert await store.read_events("s", 0, 11) == COMMITTED + SEALING
    await store.close()

    store = await JsonlStore.open(root)
    await store.check_ready()
    # The failed append's rewrite stood (its bytes were durable): its re-send is idempotent.
    assert (await store.append("s", SEALING)).idempotent
    await store.append("s", [plain(11), plain(12)])
    await store.close()
    # The power loss: the journal's clearing never reached the disk.
    files.journal.write_bytes(kept[0])
    assert await reopened(root) == [*COMMITTED, *SEALING, plain(11), plain(12)]
    assert files.journal.read_bytes() == b""


@pytest.mark.parametrize("later", [0, 2])
async def test_a_journal_whose_clearing_never_reached_the_disk_is_never_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, later: int
) -> None:
    """A clearing whose fsync failed may come back after a power loss: done, or stale once appends follow."""
    files, found = await sealing_write(tmp_path / "root", "none", monkeypatch)
    store = await JsonlStore.open(tmp_path / "root")
    for seq in range(11, 11 + later):
        await store.append("s", [plain(seq)])
    await store.close()
    log, index = files.read()
    files.journal.write_bytes(found["journal"])
    assert await reopened(tmp_path / "root") == [*COMMITTED, *SEALING, *(plain(seq) for seq in range(11, 11 + later))]
    assert files.journal.read_bytes() == b""
    assert files.read() == (log, index)


def test_a_stale_journal_is_cleared_and_never_applied(tmp_path: Path) -> None:
    log, index = tmp_path / "log", tmp_path / "index"
    log.write_bytes(b"head|new|later")
    index.write_bytes(b"H|E|L")
    entries = b"E|"
    journal = jsonl_journal.Journal(5, b"old", 2, 3, 0, entries)
    (tmp_path / jsonl_journal.JOURNAL_NAME).write_bytes(jsonl_journal.encoded(journal))
    assert not jsonl_journal.settle(tmp_path, log, index)
    assert (log.read_bytes(), index.read_bytes()) == (b"head|new|later", b"H|E|L")
    assert not jsonl_journal.pending(tmp_path)

"""Group commit for file appends: barrier after barrier, each append failing alone."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from persistence.errors import SeqConflictError, StoreError
from persistence.jsonl.file_groups import SYNC_THREADS, FileGroup, FileGroups, Staged
from persistence.jsonl.files import write_unsynced


def staging(path: Path, data: bytes, calls: list[str], done: list[str], undone: list[str]) -> Any:
    name = path.name

    def step(stage: str) -> Any:
        def write() -> Any:
            calls.append(f"{stage}:{name}")
            return write_unsynced(path, 0, data + stage.encode())

        return write

    def work(group: FileGroup) -> str:
        group.stage(
            Staged(
                ((step("first"),), (), (step("second"),)),
                path,
                lambda: done.append(name),
                lambda: undone.append(name),
            )
        )
        return name

    return work


def test_every_write_of_a_barrier_comes_before_the_next_barrier(tmp_path: Path) -> None:
    calls: list[str] = []
    done: list[str] = []
    groups = FileGroups()
    paths = [tmp_path / f"f{k}" for k in range(5)]
    for path in paths:
        path.write_bytes(b"")
    outcomes = groups([staging(path, b"x", calls, done, []) for path in paths])
    groups.close()
    assert outcomes == [(True, path.name) for path in paths]
    assert [call.split(":")[0] for call in calls] == ["first"] * 5 + ["second"] * 5
    assert done == [path.name for path in paths]
    assert all(path.read_bytes() == b"xsecond" for path in paths)


def test_a_failed_write_fails_its_own_append_and_no_other(tmp_path: Path) -> None:
    calls: list[str] = []
    done: list[str] = []
    undone: list[str] = []
    good = tmp_path / "good"
    good.write_bytes(b"")
    missing = tmp_path / "gone" / "log"

    def refused(group: FileGroup) -> None:
        raise SeqConflictError("refused", session_id="s", head_seq=1)

    groups = FileGroups()
    outcomes = groups([staging(good, b"g", calls, done, undone), staging(missing, b"m", calls, done, undone), refused])
    groups.close()
    assert outcomes[0] == (True, "good")
    assert not outcomes[1][0] and isinstance(outcomes[1][1], StoreError) and "gone" in str(outcomes[1][1])
    assert not outcomes[2][0] and isinstance(outcomes[2][1], SeqConflictError)
    assert done == ["good"] and undone == ["log"]
    # The failed append's later barrier was never tried.
    assert calls == ["first:good", "first:log", "second:good"]
    assert good.read_bytes() == b"gsecond"


def test_the_steps_of_one_barrier_are_all_synced_before_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    synced: list[str] = []
    fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def write(path: Path) -> Any:
        def step() -> int:
            calls.append(f"{path.name} after {sorted(synced)}")
            return write_unsynced(path, 0, path.name.encode())

        return step

    paths = [tmp_path / name for name in ("journal", "index", "log")]
    for path in paths:
        path.write_bytes(b"")
    journal, index, log = (write(path) for path in paths)

    def work(group: FileGroup) -> None:
        group.stage(Staged(((journal,), (index, log)), paths[2], lambda: calls.append("durable"), lambda: None))

    monkeypatch.setattr(os, "fsync", recording_fsync)
    groups = FileGroups()
    assert groups([work]) == [(True, None)]
    groups.close()
    assert calls == ["journal after []", "index after ['journal']", "log after ['journal']", "durable"]
    assert sorted(synced) == ["index", "journal", "log"]
    assert [path.read_bytes() for path in paths] == [b"journal", b"index", b"log"]


class Lock:
    """A lock that records its taking and letting go in ``events``."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def __enter__(self) -> None:
        self.events.append("taken")

    def __exit__(self, *exc: object) -> None:
        self.events.append("released")


def test_locks_are_held_until_the_group_is_durable(tmp_path: Path) -> None:
    held: list[str] = []

    path = tmp_path / "f"
    path.write_bytes(b"")

    def work(group: FileGroup) -> None:
        group.hold(Lock(held))
        group.stage(
            Staged(((lambda: write_unsynced(path, 0, b"y"),),), path, lambda: held.append("durable"), lambda: None)
        )

    groups = FileGroups()
    assert groups([work]) == [(True, None)]
    groups.close()
    assert held == ["taken", "durable", "released"]


@pytest.mark.parametrize("size", [0, 10])
def test_write_unsynced_cuts_only_what_lies_past_its_end(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"z" * size)
    os.close(write_unsynced(path, 2, b"ab"))
    assert path.read_bytes() == (b"zzab" if size else b"\0\0ab")


def fail_fsync_of(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Have every fsync of the file named ``name`` fail with EIO."""
    fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(f"/{name}"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)


def test_a_failed_fsync_among_many_fails_its_own_append_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # More files than sync threads, so each thread syncs a share of them.
    paths = [tmp_path / f"f{k}" for k in range(3 * SYNC_THREADS + 1)]
    for path in paths:
        path.write_bytes(b"")
    fail_fsync_of(monkeypatch, "f13")
    done: list[str] = []
    undone: list[str] = []
    groups = FileGroups()
    outcomes = groups([staging(path, b"x", [], done, undone) for path in paths])
    groups.close()
    assert [ok for ok, _ in outcomes] == [path.name != "f13" for path in paths]
    assert "f13" in str(outcomes[13][1]) and "Input/output error" in str(outcomes[13][1])
    assert undone == ["f13"] and done == [path.name for path in paths if path.name != "f13"]


def test_the_notices_of_the_durable_appends_alone_are_told_once_under_the_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    paths = [tmp_path / name for name in ("ok", "bad", "quiet")]
    for path in paths:
        path.write_bytes(b"")
    fail_fsync_of(monkeypatch, "bad")

    def unit(path: Path, told: str | None) -> Any:
        def work(group: FileGroup) -> None:
            group.hold(Lock(events))
            write = lambda: write_unsynced(path, 0, b"y")  # noqa: E731
            group.stage(Staged(((write,),), path, lambda: events.append(f"durable {path.name}"), lambda: None, told))

        return work

    groups = FileGroups(tell=lambda notices: events.append(f"told {notices}"))
    outcomes = groups([unit(paths[0], "n-ok"), unit(paths[1], "n-bad"), unit(paths[2], None)])
    groups.close()
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert events == [
        "taken",
        "taken",
        "taken",
        "durable ok",
        "durable quiet",
        "told ['n-ok']",
        "released",
        "released",
        "released",
    ]


def test_a_group_with_nothing_durable_tells_nothing(tmp_path: Path) -> None:
    told: list[list[str]] = []
    groups = FileGroups(tell=told.append)
    assert groups([lambda group: "no write"]) == [(True, "no write")]
    groups.close()
    assert told == []

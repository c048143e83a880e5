"""The JSONL listing's kept parents: a tree in one scan, and a directory made again is read again."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codec import SessionHeader
from persistence.jsonl.store import JsonlStore

pytestmark = pytest.mark.anyio


def header(session_id: str, parent: str | None = None) -> SessionHeader:
    extra = {} if parent is None else {"parentSession": parent, "origin": "subagent"}
    return SessionHeader(id=session_id, createdAt=1, **extra)  # type: ignore[arg-type]


async def test_a_tree_is_every_session_below_parents_first(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path)
    try:
        for session_id, parent in (("p", None), ("p.b", "p"), ("p.a", "p"), ("p.a.x", "p.a"), ("q", None)):
            await store.create_session(header(session_id, parent))
        assert store._listing.tree("p") == ["p", "p.a", "p.b", "p.a.x"]
        assert store._listing.tree("q") == ["q"]
        assert [child.id for child in await store.children("p")] == ["p.a", "p.b"]
    finally:
        await store.close()


async def test_a_session_made_again_by_another_process_is_read_again(tmp_path: Path) -> None:
    mine, theirs = await JsonlStore.open(tmp_path), await JsonlStore.open(tmp_path)
    try:
        for session_id, parent in (("p", None), ("q", None), ("k", "p")):
            await mine.create_session(header(session_id, parent))
        assert mine._listing.tree("p") == ["p", "k"]  # now kept, by name and inode
        # The other process deletes the child and makes the id again, under another parent.
        await theirs.delete_session("k")
        await theirs.create_session(header("k", "q"))
        assert mine._listing.tree("p") == ["p"]
        assert mine._listing.tree("q") == ["q", "k"]
        assert [child.parentSession for child in await mine.children("q")] == ["q"]
    finally:
        await mine.close()
        await theirs.close()


async def test_a_delete_removes_the_whole_tree_it_found_in_one_scan(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path)
    try:
        for session_id, parent in (("p", None), ("p.a", "p"), ("p.a.x", "p.a"), ("q", None)):
            await store.create_session(header(session_id, parent))
        assert sorted(await store.delete_session("p")) == ["p", "p.a", "p.a.x"]
        assert store._listing.tree("q") == ["q"]
        assert sorted(path.name for path in tmp_path.iterdir() if not path.name.startswith(".")) == ["q"]
    finally:
        await store.close()


class SameInode:
    """A directory entry whose stat gives one inode for every directory, as a file system that reuses them may."""

    def __init__(self, entry: os.DirEntry[str]) -> None:
        self._entry = entry

    def __getattr__(self, name: str) -> Any:
        return getattr(self._entry, name)

    def stat(self, *, follow_symlinks: bool = True) -> Any:
        found = self._entry.stat(follow_symlinks=follow_symlinks)
        return os.stat_result((found.st_mode, 7, *found[2:7], 0, 0, 0), {"st_ctime_ns": found.st_ctime_ns})


class Scans:
    """``os.scandir``, counting the scans of ``root`` and giving its entries one inode."""

    def __init__(self, root: Path) -> None:
        self.count = 0
        self._root = root
        self._scandir = os.scandir

    def __call__(self, path: Any) -> Any:
        if isinstance(path, int) or Path(path) != self._root:
            return self._scandir(path)
        self.count += 1
        return _Entries(self._scandir(path))


class _Entries:
    def __init__(self, entries: Any) -> None:
        self._entries = entries

    def __enter__(self) -> Iterator[SameInode]:
        return (SameInode(entry) for entry in self._entries.__enter__())

    def __exit__(self, *exc: object) -> None:
        self._entries.__exit__(*exc)


async def test_an_inode_used_again_is_told_apart_by_its_change_time_and_a_tree_is_one_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans = Scans(tmp_path)
    monkeypatch.setattr(os, "scandir", scans)
    mine, theirs = await JsonlStore.open(tmp_path), await JsonlStore.open(tmp_path)
    try:
        for session_id, parent in (("p", None), ("q", None), ("k", "p"), ("k.x", "k")):
            await mine.create_session(header(session_id, parent))
        scans.count = 0
        assert mine._listing.tree("p") == ["p", "k", "k.x"] and scans.count == 1
        await theirs.delete_session("k")
        await theirs.create_session(header("k", "q"))
        assert mine._listing.tree("p") == ["p"]
        assert mine._listing.tree("q") == ["q", "k"]
    finally:
        await mine.close()
        await theirs.close()


async def test_a_delete_leaves_a_session_made_again_in_another_tree_since_it_looked(tmp_path: Path) -> None:
    mine, theirs = await JsonlStore.open(tmp_path), await JsonlStore.open(tmp_path)
    try:
        for session_id, parent in (("p", None), ("q", None), ("k", "p")):
            await mine.create_session(header(session_id, parent))
        looked = mine._listing.tree("p")
        assert looked == ["p", "k"]
        await theirs.delete_session("k")
        await theirs.create_session(header("k", "q"))
        # The first look is stale: under its lock, k is found to be q's now, and the tree is looked up again.
        trees = iter([looked])
        mine_tree = mine._tree
        mine._tree = lambda session_id: next(trees, None) or mine_tree(session_id)  # type: ignore[method-assign]
        assert await mine.delete_session("p") == ["p"]
        assert (await theirs.get_session("k")).header.parentSession == "q"
    finally:
        await mine.close()
        await theirs.close()

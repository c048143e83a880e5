"""The JSONL listing's kept parents: a tree in one scan, and a directory made again is read again."""

from __future__ import annotations

from pathlib import Path

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

"""A JSONL delete under its intent: whole or gone after any crash, finished on reopen (docs/protocol.md §7.2)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import msgspec
import pytest

from codec import SessionHeader
from persistence.errors import SessionNotFoundError
from persistence.jsonl.deletion import INTENT_PREFIX, TRASH_PREFIX, Doomed, delete_directories, finish_deletes
from persistence.jsonl.layout import encode_segment
from persistence.jsonl.store import JsonlStore
from testing.events import plain

pytestmark = pytest.mark.anyio


async def tree(root: Path) -> dict[str, str]:
    """A parent with two children and an unrelated session; their incarnations by id."""
    store = await JsonlStore.open(root)
    made = {}
    for session_id, parent in (("p", None), ("p.a", "p"), ("p.b", "p"), ("other", None)):
        extra = {} if parent is None else {"parentSession": parent, "origin": "subagent"}
        info = await store.create_session(SessionHeader(id=session_id, createdAt=1, **extra))  # type: ignore[arg-type]
        await store.append(session_id, [plain(0), plain(1)])
        made[session_id] = info.incarnation
    await store.close()
    return made


def intent(root: Path, token: str, doomed: list[Doomed]) -> None:
    (root / f"{INTENT_PREFIX}{token}").write_bytes(msgspec.json.encode(doomed))


@pytest.mark.parametrize("renamed", [0, 1, 3])
async def test_a_reopen_finishes_a_delete_that_a_crash_cut_after_its_intent(tmp_path: Path, renamed: int) -> None:
    made = await tree(tmp_path)
    doomed = [Doomed(encode_segment(s), made[s]) for s in sorted(("p", "p.a", "p.b"))]
    intent(tmp_path, "t1", doomed)
    for i, entry in enumerate(doomed[:renamed]):
        os.rename(tmp_path / entry.name, tmp_path / f"{TRASH_PREFIX}t1-{i}")
    store = await JsonlStore.open(tmp_path)
    try:
        for gone in ("p", "p.a", "p.b"):
            with pytest.raises(SessionNotFoundError):
                await store.get_session(gone)
        assert (await store.read_events("other", 0, 2)) == [plain(0), plain(1)]
        assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".d")) == []
    finally:
        await store.close()


async def test_a_session_created_again_since_the_intent_is_left_alone(tmp_path: Path) -> None:
    made = await tree(tmp_path)
    intent(tmp_path, "t2", [Doomed(encode_segment("p"), "0123456789ab"), Doomed(encode_segment("p.a"), made["p.a"])])
    store = await JsonlStore.open(tmp_path)
    try:
        assert (await store.get_session("p")).incarnation == made["p"]
        with pytest.raises(SessionNotFoundError):
            await store.get_session("p.a")
    finally:
        await store.close()


def test_an_intent_that_is_not_ours_is_left_in_place(tmp_path: Path) -> None:
    (tmp_path / f"{INTENT_PREFIX}junk").write_bytes(b"not json")
    (tmp_path / f"{TRASH_PREFIX}old-0").mkdir()
    assert finish_deletes(tmp_path, lambda directory: None) == 0
    assert (tmp_path / f"{INTENT_PREFIX}junk").exists() and not (tmp_path / f"{TRASH_PREFIX}old-0").exists()


async def test_an_intent_another_process_is_carrying_out_is_left_to_it(tmp_path: Path) -> None:
    made = await tree(tmp_path)
    doomed = [Doomed(encode_segment("p"), made["p"])]
    intent(tmp_path, "t3", doomed)
    held = os.open(tmp_path / f"{INTENT_PREFIX}t3", os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert finish_deletes(tmp_path, lambda directory: made["p"]) == 0
        assert (tmp_path / encode_segment("p")).is_dir()
    finally:
        os.close(held)
    assert finish_deletes(tmp_path, lambda directory: made["p"]) == 1
    assert not (tmp_path / encode_segment("p")).exists()


async def test_a_delete_is_told_after_its_renames_and_before_its_intent_goes(tmp_path: Path) -> None:
    made = await tree(tmp_path)
    doomed = [Doomed(encode_segment(s), made[s], s) for s in ("p", "p.a")]
    seen: list[tuple[list[Doomed], bool, list[str]]] = []

    def tell(told: list[Doomed]) -> None:
        intents = list(tmp_path.glob(f"{INTENT_PREFIX}*"))
        left = [entry.name for entry in doomed if (tmp_path / entry.name).exists()]
        seen.append((told, len(intents) == 1, left))

    delete_directories(tmp_path, doomed, tell)
    assert seen == [(doomed, True, [])]
    assert not list(tmp_path.glob(f"{INTENT_PREFIX}*"))


async def test_a_reopen_tells_every_session_its_intent_names(tmp_path: Path) -> None:
    # Cut before the telling or after it: either way it is told (again), naming the incarnation deleted.
    made = await tree(tmp_path)
    doomed = [Doomed(encode_segment(s), made[s], s) for s in ("p", "p.a", "p.b")]
    intent(tmp_path, "t4", doomed)
    os.rename(tmp_path / doomed[0].name, tmp_path / f"{TRASH_PREFIX}t4-0")
    told: list[list[Doomed]] = []
    by_name = {encode_segment(s): incarnation for s, incarnation in made.items()}
    assert finish_deletes(tmp_path, lambda directory: by_name.get(directory.name), told.append) == 1
    assert told == [doomed]
    assert not (tmp_path / doomed[1].name).exists() and (tmp_path / encode_segment("other")).is_dir()


async def test_an_intent_of_a_build_before_notices_is_finished_naming_no_session(tmp_path: Path) -> None:
    made = await tree(tmp_path)
    (tmp_path / f"{INTENT_PREFIX}t5").write_bytes(msgspec.json.encode([[encode_segment("p"), made["p"]]]))
    told: list[list[Doomed]] = []
    assert finish_deletes(tmp_path, lambda directory: made.get(directory.name), told.append) == 1
    assert told == [[Doomed(encode_segment("p"), made["p"], "")]]
    assert not (tmp_path / encode_segment("p")).exists()

"""The JSONL synopsis file: written with every batch that can change it, trusted only as far as it can be,
and folded from the log otherwise (a torn or early file, a log placed by hand or extended by another tool)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from codec import Event, SessionHeader, encode
from persistence.jsonl.store import JsonlStore
from persistence.jsonl.synopses import SYNOPSIS_NAME, Kept, read_kept, write_kept
from persistence.synopsis import Synopsis, synopsis_of
from testing.events import chunk_event, plain, text

pytestmark = pytest.mark.anyio

HEADER = SessionHeader(id="s1", createdAt=1)
USAGE = {"type": "usage", "usage": {"inputTokens": 4, "outputTokens": 2}}


def events() -> list[Event]:
    return [
        Event("user/message", 0, 10, {"text": "Hello"}, surfaceOp="append"),
        chunk_event(1, 11, USAGE),
        Event("session/title", 2, 12, {"title": "Greeting"}),
        *(text(seq, 10 + seq, "t") for seq in range(3, 8)),
    ]


async def written(root: Path, batches: list[list[Event]]) -> None:
    store = await JsonlStore.open(root)
    try:
        await store.create_session(HEADER, owner="alice")
        for batch in batches:
            await store.append("s1", batch)
    finally:
        await store.close()


async def reopened_synopsis(root: Path) -> Synopsis:
    """The synopsis a new process finds, through the listing and through a read; they agree."""
    store = await JsonlStore.open(root)
    try:
        (listed,) = await store.list_sessions("alice", limit=10)
        assert listed.synopsis == await store.synopsis("s1")
        return listed.synopsis
    finally:
        await store.close()


async def test_deltas_alone_leave_the_file_and_the_listing_takes_their_time_from_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    all_events = events()
    await written(tmp_path, [all_events[:3], *([event] for event in all_events[3:])])
    # Written by the batch that titled the session, not since: the token stream writes no file.
    assert read_kept(tmp_path / "s1") == Kept(2, Synopsis("Greeting", 12, 4, 2))

    def no_loading(*args: object) -> None:
        raise AssertionError("listing loaded a session")

    store = await JsonlStore.open(tmp_path)
    try:
        (listed,) = await store.list_sessions("alice", limit=10)
        # Behind the head, the listing reads the session under its lock, and its index's last time.
        assert listed.synopsis == synopsis_of([all_events]) == Synopsis("Greeting", 17, 4, 2)
        await store.append("s1", [plain(8, time=30)])
        assert read_kept(tmp_path / "s1") == Kept(8, Synopsis("Greeting", 30, 4, 2))
        monkeypatch.setattr(JsonlStore, "_load", no_loading)
        reopened = await JsonlStore.open(tmp_path)
        try:
            # At the head, the file alone: no session is loaded.
            assert [s.synopsis.title for s in await reopened.list_sessions("alice", limit=10, match="greet")] == [
                "Greeting"
            ]
        finally:
            await reopened.close()
    finally:
        await store.close()


@pytest.mark.parametrize("damage", ["torn", "ahead", "missing"])
async def test_a_file_that_cannot_be_trusted_is_folded_from_the_log(tmp_path: Path, damage: str) -> None:
    all_events = events()
    await written(tmp_path, [all_events[:2], all_events[2:]])
    path = tmp_path / "s1" / SYNOPSIS_NAME
    if damage == "torn":
        path.write_bytes(path.read_bytes()[:-3] + b"99}")
    elif damage == "ahead":
        # A batch whose file was written, and which a crash then cut: its title is not the session's.
        os.close(write_kept(tmp_path / "s1", Kept(99, Synopsis("Never appended", 1))))
    else:
        path.unlink()
    assert await reopened_synopsis(tmp_path) == synopsis_of([all_events])


async def test_a_log_placed_by_hand_and_lines_another_tool_added_are_folded(tmp_path: Path) -> None:
    all_events = events()
    directory = tmp_path / "s1"
    await written(tmp_path, [])
    # Another tool writes the log: no synopsis file, no seqs or times, its index rebuilt on open.
    (directory / "index.jsonl").unlink()
    lines = [encode(HEADER), *(encode(event) for event in all_events[:3])]
    (directory / "session.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    assert await reopened_synopsis(tmp_path) == synopsis_of([all_events[:3]])
    # The store appends a titled batch, then the tool adds a line that renames it: the file lags.
    await written_more(tmp_path, [Event("session/title", 3, 40, {"title": "Mine"})])
    with (directory / "session.jsonl").open("ab") as log:
        log.write(encode(Event("session/title", 4, 50, {"title": "Theirs"})) + b"\n")
    assert await reopened_synopsis(tmp_path) == Synopsis("Theirs", 50, 4, 2)


async def written_more(root: Path, batch: list[Event]) -> None:
    store = await JsonlStore.open(root)
    try:
        await store.append("s1", batch)
    finally:
        await store.close()

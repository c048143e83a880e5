"""Stores shared by several processes: concurrent appends, and a process killed mid-append."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Final

import anyio
import pytest

from codec import Event, SessionHeader
from history_service.scenarios import multi_turn
from persistence.errors import SessionNotFoundError
from persistence.url import open_store
from testing.events import plain
from testing.postgres import PG_URL
from testing.stores import emptied_backend_url

pytestmark = pytest.mark.anyio

WORKER = textwrap.dedent(
    """
    import anyio, json, sys
    from codec import Event
    from persistence.errors import SeqConflictError
    from persistence.url import open_store

    async def main(url, worker, batches):
        store = await open_store(url)
        accepted = []
        for i in range(batches):
            while True:
                head = await store.head_seq("shared")
                size = 1 + (i + worker) % 4
                batch = [Event("marker", head + 1 + k, 0, {"w": worker, "i": i, "k": k}) for k in range(size)]
                try:
                    await store.append("shared", batch)
                except SeqConflictError:
                    continue
                accepted.append([i, size])
                break
        await store.close()
        print(json.dumps(accepted))

    anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    """
)


def store_urls() -> list[object]:
    return [
        pytest.param("sqlite", id="sqlite"),
        pytest.param("jsonl", id="jsonl"),
        pytest.param(
            "postgresql", id="postgresql", marks=pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set")
        ),
    ]


@pytest.mark.parametrize("kind", store_urls())
async def test_two_processes_append_to_one_session(tmp_path: Path, kind: str) -> None:
    url = await emptied_backend_url(kind, tmp_path)
    store = await open_store(url, create=True)
    await store.create_session(SessionHeader(id="shared", createdAt=0))
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, url, str(worker), "40"], stdout=subprocess.PIPE, text=True)
        for worker in (1, 2)
    ]
    accepted = {}
    for worker, process in zip((1, 2), workers, strict=True):
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0
        accepted[worker] = {i: size for i, size in json.loads(out)}
    events = await store.read_events("shared", 0, 10_000)
    await store.close()
    assert [event.seq for event in events] == list(range(len(events)))
    seen: dict[tuple[int, int], list[int]] = {}
    for event in events:
        seen.setdefault((event.data["w"], event.data["i"]), []).append(event.data["k"])
    expected = {(w, i): list(range(size)) for w, batches in accepted.items() for i, size in batches.items()}
    assert seen == expected
    assert len(expected) == 80


KILLER = textwrap.dedent(
    """
    import anyio, os, sys
    import persistence.sql.tails as tails
    from codec import Event
    from persistence.url import open_store

    calls = 0
    original = tails.Tails.remember

    def remember_then_die(self, *args, **kwargs):
        # Dies inside the third append's transaction, after its rows were inserted, before the commit.
        global calls
        calls += 1
        if calls == 3:
            os._exit(17)
        return original(self, *args, **kwargs)

    tails.Tails.remember = remember_then_die

    async def main(url):
        store = await open_store(url)
        for batch in range(3):
            await store.append("s", [Event("x", batch * 2 + k, 0, {"b": batch}) for k in range(2)])

    anyio.run(main, sys.argv[1])
    """
)


async def test_sqlite_killed_mid_append_loses_nothing_committed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    store = await open_store(url, create=True)
    await store.create_session(SessionHeader(id="s", createdAt=0))
    await store.close()
    process = subprocess.run([sys.executable, "-c", KILLER, url], capture_output=True, text=True, timeout=120)
    assert process.returncode == 17, process.stderr
    reopened = await open_store(url)
    events = await reopened.read_events("s", 0, 100)
    assert [(e.seq, e.data["b"]) for e in events] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert await reopened.head_seq("s") == 3
    await reopened.append("s", [plain(4)])
    assert await reopened.head_seq("s") == 4
    await reopened.close()


DELETER = textwrap.dedent(
    """
    import anyio, sys, time
    from persistence.url import open_store

    async def main(url):
        store = await open_store(url)
        await store.get_session("tree")
        print("deleting", flush=True)
        await store.delete_session("tree")
        print("deleted", flush=True)
        time.sleep(600)

    anyio.run(main, sys.argv[1])
    """
)
TREE: Final = ["tree", *(f"tree.child-{k}" for k in range(5)), "tree.child-0.grandchild"]


def _tree_header(session_id: str) -> SessionHeader:
    parent = session_id.rpartition(".")[0] if "." in session_id else None
    extra = {} if parent is None else {"parentSession": parent, "origin": "subagent"}
    return SessionHeader(id=session_id, createdAt=0, **extra)  # type: ignore[arg-type]


async def _write_tree(url: str) -> dict[str, list[Event]]:
    store = await open_store(url, create=True)
    written = {}
    for n, session_id in enumerate([*TREE, "other", "other.child-0"]):
        header = _tree_header(session_id)
        events = multi_turn(seed=n, turns=12)
        await store.create_session(header)
        for start in range(0, len(events), 400):
            await store.append(session_id, events[start : start + 400])
        written[session_id] = events
    await store.close()
    return written


@pytest.mark.parametrize("kind", [*store_urls(), pytest.param("jsonl-zstd", id="jsonl-zstd")])
@pytest.mark.parametrize("delay", [0.0, 0.003, 0.01, 0.03, 0.1])
async def test_a_delete_killed_at_any_moment_leaves_each_session_whole_or_gone(
    tmp_path: Path, kind: str, delay: float
) -> None:
    url = await emptied_backend_url(kind, tmp_path)
    written = await _write_tree(url)
    command = [sys.executable, "-c", DELETER, url]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as killed:
        try:
            assert killed.stdout is not None and killed.stderr is not None
            assert killed.stdout.readline() == "deleting\n", killed.stderr.read()
            time.sleep(delay)
        finally:
            killed.send_signal(signal.SIGKILL)
            killed.wait(timeout=60)
    reopened = await open_store(url)
    try:
        outcomes = {}
        for session_id, events in written.items():
            try:
                info = await reopened.get_session(session_id)
            except SessionNotFoundError:
                outcomes[session_id] = "gone"
                continue
            assert info.head_seq == len(events) - 1, session_id
            assert await reopened.read_events(session_id, 0, len(events)) == events, session_id
            outcomes[session_id] = "whole"
        assert outcomes["other"] == outcomes["other.child-0"] == "whole"
        # After a reopen the tree's delete is either finished or never started: no store leaves half a tree.
        assert len({outcomes[session_id] for session_id in TREE}) == 1, outcomes
        if outcomes["tree"] == "gone":
            recreated = await reopened.create_session(_tree_header("tree"))
            assert recreated.head_seq == -1 and await reopened.read_stored("tree", 0, 10) == []
    finally:
        await reopened.close()


APPENDER = textwrap.dedent(
    """
    import anyio, itertools, sys
    from persistence.url import open_store
    from testing.events import plain

    async def main(url):
        store = await open_store(url)
        print("appending", flush=True)
        for n in itertools.count():
            await store.append(f"s{n % 3}", [plain(n // 3)])

    anyio.run(main, sys.argv[1])
    """
)


@pytest.mark.parametrize("heard_before_kill", [7, 150])
async def test_sqlite_notices_heard_are_exactly_the_commits_of_a_process_killed_mid_append(
    tmp_path: Path, heard_before_kill: int
) -> None:
    url = f"sqlite:///{tmp_path / 'told.db'}"
    store = await open_store(url, create=True)
    for k in range(3):
        await store.create_session(SessionHeader(id=f"s{k}", createdAt=0))
    listener = store.listener()
    assert listener is not None
    heard: list[tuple[str, int]] = []
    connected = anyio.Event()

    async def on_connect() -> None:
        connected.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.run, lambda told: heard.append((told.session_id, told.head)), on_connect)
            await connected.wait()
            command = [sys.executable, "-c", APPENDER, url]
            with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as appender:
                try:
                    assert appender.stdout is not None and appender.stdout.readline() == "appending\n"
                    with anyio.fail_after(60):
                        while len(heard) < heard_before_kill:
                            await anyio.sleep(0.001)
                finally:
                    appender.send_signal(signal.SIGKILL)
                    appender.wait(timeout=60)
            listener.catch_up()  # whatever it committed before it died
            tg.cancel_scope.cancel()
        for k in range(3):
            head = (await store.get_session(f"s{k}")).head_seq
            assert [h for s, h in heard if s == f"s{k}"] == list(range(head + 1))
    finally:
        await store.close()

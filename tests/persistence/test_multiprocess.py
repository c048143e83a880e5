"""Stores shared by several processes: concurrent appends, and a process killed mid-append."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codec import SessionHeader
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
    import persistence.sql.store as sql
    from codec import Event
    from persistence.url import open_store

    calls = 0
    original = sql.SqlStore._remember

    def remember_then_die(self, *args, **kwargs):
        # Dies inside the third append's transaction, after its rows were inserted, before the commit.
        global calls
        calls += 1
        if calls == 3:
            os._exit(17)
        return original(self, *args, **kwargs)

    sql.SqlStore._remember = remember_then_die

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

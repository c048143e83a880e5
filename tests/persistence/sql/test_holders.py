"""A SQLite file's holders: a vacuum beside another process that has the store open refuses, and says why."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import anyio
import httpx
import pytest

from codec import encode
from history_service.cli.program import main
from persistence.errors import StoreError
from persistence.sql.holders import Holders
from persistence.sql.store import SqlStore
from testing.events import make_events
from testing.servers import ServerProcess

JSON = {"Content-Type": "application/json"}


def _size(database: Path) -> int:
    return sum(os.path.getsize(f"{database}{tail}") for tail in ("", "-wal") if os.path.exists(f"{database}{tail}"))


def _vacuum(url: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(["vacuum", "--store", url], out=out, err=err), out.getvalue(), err.getvalue()


def test_a_vacuum_beside_a_running_server_refuses_says_why_and_leaves_the_file_alone(tmp_path: Path) -> None:
    database = tmp_path / "h.db"
    url = f"sqlite:///{database}"
    server = ServerProcess(url)
    server.start()
    try:
        for n in range(20):
            created = httpx.post(f"{server.url}/v1/sessions", json={"id": f"s{n}", "createdAt": 0})
            assert created.status_code == 201
            events = encode({"events": make_events(500)})
            assert httpx.post(f"{server.url}/v1/sessions/s{n}/events", content=events, headers=JSON).status_code == 201
        for n in range(10):
            assert httpx.delete(f"{server.url}/v1/sessions/s{n}").status_code == 204
        size = _size(database)
        status, out, err = _vacuum(url)
        assert (status, out) == (1, "")
        assert "another process has this SQLite store open" in err and "Stop it, then vacuum" in err
        assert _size(database) == size
        # The server goes on as before.
        more = encode({"events": make_events(10, start=500)})
        assert httpx.post(f"{server.url}/v1/sessions/s10/events", content=more, headers=JSON).status_code == 201
    finally:
        server.stop()
    # Alone, it vacuums.
    status, out, _ = _vacuum(url)
    sizes = json.loads(out)
    assert status == 0 and 0 < sizes["after"] < sizes["before"]


def test_a_store_opened_while_a_vacuum_holds_the_file_waits_its_bound_then_says_why(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"

    async def open_and_close() -> None:
        await (await SqlStore.open(url, timeout=0.2)).close()

    anyio.run(open_and_close)
    vacuum = Holders(str(tmp_path / "h.db"))
    vacuum.hold(1)
    try:
        with vacuum.alone(), pytest.raises(StoreError, match="`history-service vacuum` holds .* alone"):
            anyio.run(open_and_close)
        anyio.run(open_and_close)  # once the vacuum ends
    finally:
        vacuum.release()


def test_try_alone_says_whether_another_store_holds_the_file_and_keeps_the_hold(tmp_path: Path) -> None:
    database = str(tmp_path / "h.db")
    first, second = Holders(database), Holders(database)
    first.hold(1)
    assert first.try_alone()
    second.hold(1)
    assert not first.try_alone() and not second.try_alone()
    second.release()
    assert first.try_alone()
    # The hold is shared again: another store may open, and its vacuum is refused.
    third = Holders(database)
    third.hold(1)
    with pytest.raises(StoreError):
        with third.alone():
            pass
    third.release()
    first.release()


def test_the_last_holder_removes_the_gate_and_turn_files_beside_its_lock(tmp_path: Path) -> None:
    database = str(tmp_path / "h.db")
    first, second = Holders(database), Holders(database)
    first.hold(1)
    second.hold(1)
    for tail in ("-write", "-turn"):
        Path(f"{database}{tail}").touch()
    first.release()
    assert all(os.path.exists(f"{database}{tail}") for tail in ("-lock", "-write", "-turn"))
    second.release()
    assert not any(os.path.exists(f"{database}{tail}") for tail in ("-lock", "-write", "-turn"))

"""``serve --workers``: how many workers start, which stores refuse several, a killed worker's restart, and the
sweep's turn that a CLI ``purge`` shares with the servers (docs/protocol.md §7.6)."""

from __future__ import annotations

import io
import os
import signal
import socket
import threading
import time
from pathlib import Path

import anyio
import httpx
import pytest

from history_service.cli.launcher import usable_cores
from history_service.cli.program import main
from history_service.cli.worker_sockets import spreads
from persistence import open_store
from persistence.state.flocks import FileTurn
from testing.servers import ServerProcess, free_port
from testing.workers import serving_pid, serving_workers

BOUND = 60


def test_workers_auto_starts_one_per_usable_core_and_a_killed_one_is_restarted(tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path / 'h.db'}")
    server.start("--workers", "auto")
    try:
        assert server.process is not None
        workers = serving_workers(server.port, server.process.pid, usable_cores())
        assert len(workers) == usable_cores()
        os.kill(workers[0], signal.SIGKILL)
        restarted = serving_workers(server.port, server.process.pid, len(workers), without=workers[:1])
        assert set(restarted) & set(workers) == set(workers[1:])
        # Whichever worker answers, each is ready: the new one too.
        deadline = time.monotonic() + BOUND
        while {httpx.get(f"{server.url}/readyz").status_code for _ in range(4 * len(workers))} != {200}:
            assert time.monotonic() < deadline, "a restarted worker never became ready"
            time.sleep(0.05)
        # Each worker listens on a socket of its own (worker_sockets): the kernel spreads new connections
        # over them, so a burst of 40 is served by every worker (all on one: a chance of 2**-39 with two).
        if spreads():
            live = serving_workers(server.port, server.process.pid, len(workers), without=workers[:1])
            burst = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
            try:
                deadline = time.monotonic() + BOUND
                while None in (placed := [serving_pid(sock.getsockname()[1], live) for sock in burst]):
                    assert time.monotonic() < deadline, "a connection was never accepted"
                    time.sleep(0.05)
                assert set(placed) == set(live)
            finally:
                for sock in burst:
                    sock.close()
    finally:
        server.stop()


def test_several_workers_on_a_memory_store_are_refused() -> None:
    err = io.StringIO()
    status = main(["serve", "--workers", "2", "--store", "memory://", "--port", str(free_port())], err=err)
    assert status == 1
    line = err.getvalue().splitlines()[-1]
    assert line.startswith("history-service: error: --workers 2 needs a store several processes can share"), line
    assert "memory://" in line


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_purge_says_another_process_is_sweeping_while_the_turn_is_held(tmp_path: Path, kind: str) -> None:
    url, turn = (
        (f"sqlite:///{tmp_path / 'h.db'}", tmp_path / "h.db-turn")
        if kind == "sqlite"
        else (f"jsonl:///{tmp_path / 'logs'}", tmp_path / "logs" / ".turn")
    )

    async def create() -> None:
        await (await open_store(url, create=True)).close()

    anyio.run(create)
    taken, release = threading.Event(), threading.Event()

    async def hold() -> None:
        async with FileTurn(turn).taking() as mine:
            assert mine
            taken.set()
            await anyio.to_thread.run_sync(release.wait, BOUND)

    holder = threading.Thread(target=anyio.run, args=(hold,))
    holder.start()
    try:
        assert taken.wait(BOUND)
        err = io.StringIO()
        assert main(["purge", "--store", url], out=io.StringIO(), err=err) == 1
        assert "another process is sweeping this store now" in err.getvalue().splitlines()[-1]
    finally:
        release.set()
        holder.join(BOUND)
    # Let go, the turn is the CLI's.
    out = io.StringIO()
    assert main(["purge", "--store", url], out=out, err=io.StringIO()) == 0
    assert out.getvalue() == '{"deleted":[]}\n'

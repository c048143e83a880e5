"""Turns between processes through flock: the write gate and the sweep's turn, against real other processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from persistence.errors import StoreError
from persistence.state.flocks import FileGate, FileTurn

HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    sys.stdin.readline()
    """
)


@contextmanager
def holder(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding ``path`` exclusively until it reads a line (or is killed)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    with process:
        try:
            assert process.stdout is not None and process.stdout.readline() == "held\n"
            yield process
        finally:
            process.kill()


def test_the_gate_is_taken_at_once_when_free_and_again_after(tmp_path: Path) -> None:
    gate = FileGate(tmp_path / "db-write")
    for _ in range(3):
        with gate.held(1):
            pass
    gate.close()
    assert (tmp_path / "db-write").exists()


def test_a_waiter_gets_the_gate_when_the_holder_lets_go(tmp_path: Path) -> None:
    path = tmp_path / "db-write"
    gate = FileGate(path)
    with holder(path) as other:
        entered = threading.Event()

        def write() -> None:
            with gate.held(60):
                entered.set()

        thread = threading.Thread(target=write)
        thread.start()
        assert not entered.wait(0.2)
        assert other.stdin is not None
        other.stdin.write("go\n")
        other.stdin.flush()
        thread.join(60)
        assert entered.is_set()
    with gate.held(1):  # let go in full: the waiter's descriptor does not keep it
        pass
    gate.close()


def test_a_holder_stopped_past_the_timeout_gives_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "db-write"
    gate = FileGate(path)
    with holder(path) as other:
        os.kill(other.pid, signal.SIGSTOP)
        try:
            with pytest.raises(StoreError, match="write turn"):
                with gate.held(0.1):
                    pass
        finally:
            os.kill(other.pid, signal.SIGCONT)
    # The holder died: its lock went with it, and the waiter given up on did not keep one.
    with gate.held(30):
        pass
    gate.close()


@pytest.mark.anyio
async def test_the_turn_is_refused_while_another_holds_it_and_taken_once_it_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "db-turn"
    turn = FileTurn(path)
    with holder(path) as other:
        async with turn.taking() as mine:
            assert not mine
        other.kill()
        other.wait()
    async with turn.taking() as mine:
        assert mine
        async with FileTurn(path).taking() as theirs:
            assert not theirs
    async with turn.taking() as mine:
        assert mine

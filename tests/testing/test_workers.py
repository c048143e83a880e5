"""Finding the workers of a supervisor tree, and the process that serves a connection, through /proc."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from testing.servers import free_port
from testing.workers import serving_pid, wait_workers, worker_pids

# A launcher whose child spawns two multiprocessing workers (and the spawn context's resource
# tracker, which is no worker), as `serve` starts uvicorn's supervisor and it its workers.
SUPERVISOR = (
    "import multiprocessing as mp, time\n"
    "if __name__ == '__main__':\n"
    "    ctx = mp.get_context('spawn')\n"
    "    workers = [ctx.Process(target=time.sleep, args=(120,)) for _ in range(2)]\n"
    "    for worker in workers: worker.start()\n"
    "    time.sleep(120)\n"
)
LAUNCHER = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {SUPERVISOR!r}])"


def test_the_workers_are_the_spawned_grandchildren_and_a_killed_one_no_longer_counts() -> None:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], start_new_session=True)
    try:
        workers = wait_workers(launcher.pid, 2)
        assert worker_pids(launcher.pid) == workers
        (supervisor,) = _parents(workers)
        assert supervisor != launcher.pid and _parents([supervisor]) == {launcher.pid}
        os.kill(workers[0], signal.SIGKILL)
        # Unreaped, it lingers as a zombie: not a live worker.
        assert wait_workers(launcher.pid, 1, without=[workers[0]]) == workers[1:]
        with pytest.raises(AssertionError, match="2 workers expected"):
            wait_workers(launcher.pid, 2, timeout=0)
    finally:
        # The whole tree: it is a session of its own.
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(30)


def _parents(pids: list[int]) -> set[int]:
    parents = set()
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            parents.add(int(stat.read().rsplit(")", 1)[1].split()[1]))
    return parents


def test_the_serving_pid_holds_the_server_end_of_the_connection() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        try:
            port = client.getsockname()[1]
            assert serving_pid(port, [os.getppid(), os.getpid()]) == os.getpid()
            assert serving_pid(port, [os.getppid()]) is None
            assert serving_pid(free_port(), [os.getpid()]) is None
        finally:
            accepted.close()
            client.close()

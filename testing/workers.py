"""The worker processes of ``history-service serve --workers N``, found through ``/proc`` (Linux).

``serve`` starts uvicorn's supervisor as its child, and the supervisor spawns the workers, so
the workers are the launcher's grandchildren that run ``multiprocessing``'s ``spawn_main`` (the
supervisor's resource tracker is a grandchild too, and is not a worker). A worker that lives
may still be starting (uvicorn's supervisor kills and replaces one that is not serving within
its health check's 5 s): `serving_workers` waits until each has answered a request. Which worker
serves a connection is the kernel's choice (`history_service.cli.worker_sockets`): `serving_pid` finds it from the
connection's server end, so a test can place followers, and kill the worker that serves them.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

__all__ = ["connections_to", "serving_pid", "serving_workers", "wait_workers", "worker_pids"]

PROC = Path("/proc")
_WORKER_MARK = b"spawn_main"
_ESTABLISHED = "01"


def _parent_of(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    # A zombie (state Z) is a worker that has died and is not yet reaped: not one of the live workers.
    return None if fields[0] == "Z" else int(fields[1])


def _children(pids: Collection[int]) -> list[int]:
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and _parent_of(int(entry.name)) in pids:
            found.append(int(entry.name))
    return sorted(found)


def _is_worker(pid: int) -> bool:
    try:
        return _WORKER_MARK in (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def worker_pids(launcher_pid: int) -> list[int]:
    """The live uvicorn workers under ``serve --workers`` started as ``launcher_pid``, in pid order."""
    return [pid for pid in _children(_children([launcher_pid])) if _is_worker(pid)]


def wait_workers(launcher_pid: int, count: int, *, timeout: float = 60, without: Collection[int] = ()) -> list[int]:
    """Wait until ``count`` workers live, none of them in ``without`` (those that were killed), and return them."""
    deadline = time.monotonic() + timeout
    while True:
        pids = worker_pids(launcher_pid)
        if len(pids) == count and not set(pids) & set(without):
            return pids
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} workers expected under {launcher_pid}, found {pids} (killed: {without})")
        time.sleep(0.05)


def _established() -> Iterator[tuple[int, int, str]]:
    """(local port, remote port, socket inode) of each established TCP connection end on this host."""
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == _ESTABLISHED:
                yield int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[9]


def connections_to(server_port: int) -> list[int]:
    """The local ports of the established connections made to ``server_port`` from this host."""
    return sorted(local for local, remote, _ in _established() if remote == server_port)


def serving_pid(client_port: int, pids: Sequence[int]) -> int | None:
    """Which of ``pids`` holds the server end of the connection made from local port ``client_port``."""
    targets = {f"socket:[{inode}]" for _, remote, inode in _established() if remote == client_port}
    if not targets:
        return None
    for pid in pids:
        fds = PROC / str(pid) / "fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue
        for name in names:
            try:
                if os.readlink(fds / name) in targets:
                    return pid
            except OSError:
                continue
    return None


def _probe(port: int, count: int) -> list[socket.socket]:
    """``count`` keep-alive connections to ``port``, each once its ``/healthz`` has been answered."""
    probes = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]
    for probe in probes:
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n")
    for probe in probes:
        probe.recv(4096)
    return probes


def serving_workers(
    port: int, launcher_pid: int, count: int, *, timeout: float = 60, without: Collection[int] = ()
) -> list[int]:
    """`wait_workers`, and then until each of them has answered a request on ``port``: every one serves."""
    deadline = time.monotonic() + timeout
    served: set[int] = set()
    while True:
        pids = wait_workers(launcher_pid, count, timeout=max(deadline - time.monotonic(), 0), without=without)
        probes = _probe(port, 4 * count)
        try:
            served = {pid for pid in served if pid in pids}
            served.update(serving_pid(probe.getsockname()[1], pids) or 0 for probe in probes)
        finally:
            for probe in probes:
                probe.close()
        if served.issuperset(pids):
            return pids
        if time.monotonic() > deadline:
            raise AssertionError(f"workers {pids} under {launcher_pid}: only {sorted(served)} served a request")
        time.sleep(0.1)

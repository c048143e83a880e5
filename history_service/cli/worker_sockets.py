"""One listening socket per worker, so the kernel spreads new connections evenly over ``serve --workers``.

uvicorn's supervisor hands every worker the one socket ``serve`` bound. Each worker's event
loop accepts every connection waiting whenever it wakes, so a burst of connections goes mostly
to whichever worker woke first: 92 of 101 followers on one of two workers in
``bench/test_capacity.py``, the other core idle. With ``SO_REUSEPORT`` each worker listens on
a socket of its own, bound to the same address, and the kernel picks one for each new
connection by a hash of its addresses.

The supervisor keeps every socket open. A worker that dies leaves its socket listening, so
the connections queued on it wait for its successor instead of being reset, and the successor
takes the socket that no live worker has. While a restart overlaps the old worker with its
new one (uvicorn's SIGHUP), the new one listens on every socket, so none is ever left
without a worker; after a SIGHUP the workers therefore share every socket, spread as on one
shared socket, until they are next restarted. A socket that SIGTTOU leaves without a worker
is closed.
"""

from __future__ import annotations

import functools
import socket
import sys
from typing import Any

from uvicorn.supervisors import multiprocess

__all__ = ["OwnSocket", "WorkerSockets", "spreading", "spreads"]


def spreads() -> bool:
    """Whether this system spreads connections over sockets sharing a port: Linux's SO_REUSEPORT does.

    On the BSDs and macOS the option exists, but the last socket bound takes every connection.
    """
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


class WorkerSockets:
    """The listening sockets of ``count`` workers: ``first`` (bound by `serve`, ``SO_REUSEPORT`` set) and its twins."""

    def __init__(self, first: socket.socket, count: int) -> None:
        address = first.getsockname()
        self.sockets = [first]
        try:
            for _ in range(count - 1):
                twin = socket.socket(first.family, socket.SOCK_STREAM)
                self.sockets.append(twin)
                twin.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                twin.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                twin.bind(address)
        except OSError:
            self.close_twins()
            raise
        self._holders: dict[int, list[Any]] = {id(sock): [] for sock in self.sockets}

    def free(self) -> list[socket.socket]:
        """For a worker about to start: the first socket no live worker holds, else every socket."""
        for sock in self.sockets:
            if not any(_alive(holder) for holder in self._holders[id(sock)]):
                return [sock]
        return list(self.sockets)

    def hold(self, worker: Any, sockets: list[socket.socket]) -> None:
        """``worker`` (uvicorn's ``Process``) listens on ``sockets``; the dead holders of those are forgotten."""
        for sock in sockets:
            self._holders[id(sock)] = [holder for holder in self._holders[id(sock)] if _alive(holder)] + [worker]

    def retire(self, worker: Any) -> None:
        """``worker`` stopped for good (SIGTTOU): close each socket it leaves without a live worker."""
        for sock in list(self.sockets):
            holders = self._holders[id(sock)]
            if worker in holders and not any(_alive(h) for h in holders if h is not worker) and len(self.sockets) > 1:
                self.sockets.remove(sock)
                del self._holders[id(sock)]
                sock.close()

    def close_twins(self) -> None:
        for sock in self.sockets[1:]:
            sock.close()


def _alive(worker: Any) -> bool:
    return bool(worker.process.is_alive())


class OwnSocket(multiprocess.Process):
    """uvicorn's worker, started on the socket ``slots`` gives it.

    A class of this module, not of `spreading`, because the spawned worker unpickles it by name;
    ``slots`` stays in the supervisor, never on the instance.
    """

    def __init__(self, slots: WorkerSockets, config: Any, sockets: list[socket.socket]) -> None:
        mine = slots.free()
        super().__init__(config, mine)
        slots.hold(self, mine)


def spreading(slots: WorkerSockets) -> type[Any]:
    """uvicorn's `Multiprocess`, each worker it starts on a socket of ``slots``.

    uvicorn makes a worker in four places (start, a dead worker's restart, SIGHUP, SIGTTIN),
    each through its module's ``Process``; this supervisor process alone swaps that for
    `OwnSocket`, rather than copy those four methods.
    """

    class Spreading(multiprocess.Multiprocess):
        def handle_ttou(self) -> None:
            last = self.processes[-1] if self.processes_num > 1 else None
            super().handle_ttou()
            if last is not None:
                slots.retire(last)

    multiprocess.Process = functools.partial(OwnSocket, slots)  # type: ignore[misc,assignment]
    return Spreading

"""Each worker of ``serve --workers`` on a listening socket of its own (`history_service.cli.worker_sockets`)."""

from __future__ import annotations

import socket

import pytest

from history_service.cli.launcher import listen
from history_service.cli.worker_sockets import WorkerSockets, spreads
from history_service.errors import CommandError
from history_service.settings import ServerSettings, Settings

pytestmark = pytest.mark.skipif(not spreads(), reason="only Linux spreads connections over sockets sharing a port")


class Worker:
    """Stands for uvicorn's ``Process``: what `WorkerSockets` asks of it is ``process.is_alive()``."""

    def __init__(self) -> None:
        self.process = self
        self.alive = True

    def is_alive(self) -> bool:
        return self.alive


def first_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def start(slots: WorkerSockets) -> tuple[Worker, list[socket.socket]]:
    worker = Worker()
    mine = slots.free()
    slots.hold(worker, mine)
    return worker, mine


def test_twins_share_the_first_socket_s_address() -> None:
    with first_socket() as first:
        slots = WorkerSockets(first, 3)
        try:
            assert len(slots.sockets) == 3
            assert {sock.getsockname() for sock in slots.sockets} == {first.getsockname()}
        finally:
            slots.close_twins()


def test_each_worker_gets_a_socket_of_its_own_and_a_dead_one_s_goes_to_its_successor() -> None:
    with first_socket() as first:
        slots = WorkerSockets(first, 2)
        try:
            a, mine_a = start(slots)
            b, mine_b = start(slots)
            assert len(mine_a) == len(mine_b) == 1 and mine_a != mine_b
            b.alive = False
            c, mine_c = start(slots)
            assert mine_c == mine_b
            # A restart's overlap (SIGHUP): every socket has a worker, so the new one listens on all.
            d, mine_d = start(slots)
            assert mine_d == slots.sockets
            a.alive = False
            slots.retire(a)  # d still listens on a's socket: it stays
            assert len(slots.sockets) == 2
        finally:
            slots.close_twins()


def test_a_socket_left_without_a_worker_by_sigttou_is_closed() -> None:
    with first_socket() as first:
        slots = WorkerSockets(first, 2)
        try:
            start(slots)
            b, mine_b = start(slots)
            b.alive = False
            slots.retire(b)
            assert slots.sockets == [first]
            assert mine_b[0].fileno() == -1
        finally:
            slots.close_twins()


def test_a_port_another_server_holds_is_in_use_for_several_workers_too() -> None:
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(CommandError, match=f"port {port} is in use"):
            listen(ServerSettings(app=Settings(), port=port, workers=2))

"""Bounds on PostgreSQL calls: connection options, and a watchdog for a server that answers nothing.

Every PostgreSQL connection a store opens gets `connect_options`: a connect timeout, a
statement timeout, so a live server gives up a statement that waits too long (on a lock),
and TCP keepalives, so an idle connection to a host that vanished is found dead.

A stopped server (``SIGSTOP``, a hung host) answers nothing and closes nothing, and its
kernel may go on acknowledging TCP, so no option bounds a call to it. A `Watchdog`
therefore shuts down the socket of a connection whose call outlives its bound: the blocked
driver sees the connection end and raises, and the store discards that connection.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from persistence.sql.dialect import Deadline

__all__ = ["Watchdog", "connect_options"]

logger = logging.getLogger(__name__)

# libpq waits at least 2 s to connect, and counts in whole seconds.
_LEAST_CONNECT_TIMEOUT: Final = 2
# Idle 10 s, then a probe every 5 s, 3 unanswered: a vanished host is found in about 25 s.
_KEEPALIVES: Final = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}


def connect_options(timeout: float) -> dict[str, Any]:
    """libpq parameters for a connection whose calls are bounded by ``timeout`` seconds."""
    return {
        "connect_timeout": max(_LEAST_CONNECT_TIMEOUT, math.ceil(timeout)),
        "options": f"-c statement_timeout={max(1, round(timeout * 1000))}",
        **_KEEPALIVES,
    }


class Watchdog:
    """Cuts the connection of a call that outlives ``timeout`` seconds, from a thread of its own.

    Every bound has the same length, so deadlines arrive in order and wait in a queue;
    the thread sleeps until the oldest one. It starts with the first bound.
    """

    def __init__(self, timeout: float, *, name: str) -> None:
        self.timeout = timeout
        self._name = name
        self._pending: collections.deque[Deadline] = collections.deque()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextmanager
    def bound(self, connection: Any) -> Iterator[Deadline]:
        """Bound the block's use of a psycopg ``connection`` (sync or async).

        Past the bound the connection's socket is shut down, so the call blocked on it
        raises; a block that ends first is never cut afterwards.
        """
        with self._wake:
            deadline = Deadline(connection, self.timeout, time.monotonic() + self.timeout)
            self._pending.append(deadline)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._watch, name=self._name, daemon=True)
                self._thread.start()
            elif len(self._pending) == 1:
                self._wake.notify()
        try:
            yield deadline
        finally:
            with self._wake:
                deadline.done = True

    def close(self) -> None:
        """Stop the thread; bounds taken afterwards are no longer enforced."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        with self._wake:
            while not self._closed:
                while self._pending and self._pending[0].done:
                    self._pending.popleft()
                if not self._pending:
                    self._wake.wait()
                    continue
                left = self._pending[0].at - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                deadline = self._pending.popleft()
                deadline.expired = True
                # Under the lock: the block has not ended, so the connection is still the one it used.
                _shut_down(deadline.connection)


def _shut_down(connection: Any) -> None:
    try:
        if connection.closed:
            return
        duplicate = os.dup(connection.fileno())
    except Exception as exc:
        logger.debug("no socket to cut: %s", exc)
        return
    with socket.socket(fileno=duplicate) as cut:
        try:
            cut.shutdown(socket.SHUT_RDWR)
        except OSError as exc:
            logger.debug("cutting a connection that outlived its bound: %s", exc)

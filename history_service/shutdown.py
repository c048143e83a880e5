"""How a running app learns that it is being stopped, whichever launcher started it.

A server waits for open responses to finish before it runs the lifespan's shutdown, and a
follow stream never finishes by itself. So the app must hear "stop" before the server
waits: a `Shutdown` is that signal. A launcher that knows when it stops triggers one it
passed to `create_app`; otherwise the app chains onto the process's SIGINT and SIGTERM
handlers (`on_signals`), triggering its own and then calling whatever handler the
launcher (uvicorn, gunicorn, ...) had installed, so the launcher still shuts down as usual.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Final

__all__ = ["STOP_SIGNALS", "Shutdown", "on_signals"]

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


class Shutdown:
    """A one-way switch; `trigger` is safe to call from a signal handler or from any thread.

    `trigger` takes no lock: a signal may arrive while the same thread is inside
    `listening`, and a lock there would deadlock. Listeners are an immutable tuple, replaced
    whole, and a listener that joins while it triggers is called by `listening` itself.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: tuple[tuple[asyncio.AbstractEventLoop, Callable[[], None]], ...] = ()
        self.triggered = False

    def trigger(self) -> None:
        self.triggered = True
        for loop, callback in self._listeners:
            if not loop.is_closed():
                loop.call_soon_threadsafe(callback)

    @contextmanager
    def listening(self, callback: Callable[[], None]) -> Iterator[None]:
        """Call ``callback`` on the running loop when triggered (at once if already triggered), while inside.

        The callback may run twice when a trigger races with joining; it must be idempotent.
        """
        entry = (asyncio.get_running_loop(), callback)
        with self._lock:
            self._listeners = (*self._listeners, entry)
        if self.triggered:
            entry[0].call_soon(callback)
        try:
            yield
        finally:
            with self._lock:
                self._listeners = tuple(listener for listener in self._listeners if listener is not entry)


@contextmanager
def on_signals(shutdown: Shutdown, signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[None]:
    """While inside, ``signals`` trigger ``shutdown`` and then reach the handler installed before.

    Only the main thread can install handlers; elsewhere (a server run in a thread by a
    test, say) this does nothing and the launcher must trigger ``shutdown`` itself.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}

    def handle(signum: int, frame: FrameType | None) -> None:
        shutdown.trigger()
        before = previous.get(signal.Signals(signum))
        if callable(before):
            before(signum, frame)
        elif before == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    for sig in signals:
        previous[sig] = signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig, before in previous.items():
            if signal.getsignal(sig) is handle:
                signal.signal(sig, before)

"""A Shutdown reaches its listeners from any thread or signal handler, and chains onto existing handlers."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from types import FrameType

import pytest

from history_service.shutdown import Shutdown, on_signals

pytestmark = pytest.mark.anyio


async def test_a_trigger_from_another_thread_reaches_the_listener_on_its_loop() -> None:
    shutdown = Shutdown()
    heard = asyncio.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    def listener() -> None:
        loops.append(asyncio.get_running_loop())
        heard.set()

    with shutdown.listening(listener):
        threading.Thread(target=shutdown.trigger).start()
        await asyncio.wait_for(heard.wait(), 30)
    assert loops == [asyncio.get_running_loop()] and shutdown.triggered


async def test_a_listener_that_comes_late_hears_it_at_once() -> None:
    shutdown = Shutdown()
    shutdown.trigger()
    heard = asyncio.Event()
    with shutdown.listening(heard.set):
        await asyncio.wait_for(heard.wait(), 30)


async def test_a_signal_triggers_the_shutdown_then_reaches_the_handler_installed_before() -> None:
    calls: list[str] = []

    def launcher(signum: int, frame: FrameType | None) -> None:
        calls.append("launcher")

    previous = signal.signal(signal.SIGUSR1, launcher)
    try:
        shutdown = Shutdown()
        heard = asyncio.Event()

        def app() -> None:
            calls.append("app")
            heard.set()

        with shutdown.listening(app), on_signals(shutdown, (signal.SIGUSR1,)):
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.wait_for(heard.wait(), 30)
        assert calls == ["launcher", "app"]
        assert signal.getsignal(signal.SIGUSR1) is launcher
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_off_the_main_thread_no_handler_is_installed() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    seen: list[object] = []

    def inside() -> None:
        with on_signals(Shutdown(), (signal.SIGUSR1,)):
            seen.append(signal.getsignal(signal.SIGUSR1))

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join()
    assert seen == [before]

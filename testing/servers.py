"""Real servers for live tests and benchmarks: uvicorn in a thread, the service as a process, a cutting proxy,
and static files on an origin of their own."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn
import uvloop

from history_service.app import create_app
from history_service.settings import Settings
from history_service.shutdown import Shutdown
from persistence import HistoryStore

__all__ = [
    "ChildServer",
    "CuttingProxy",
    "ServerProcess",
    "ThreadServer",
    "ds_reference_server",
    "free_port",
    "serve_directory",
    "serve_in_thread",
    "wait_healthy",
]

T = TypeVar("T")


@dataclass
class ThreadServer:
    url: str
    loop: asyncio.AbstractEventLoop

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run a coroutine on the server's own loop (e.g. a store read) and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)


@contextlib.contextmanager
def serve_in_thread(settings: Settings, *, store: HistoryStore | None = None) -> Iterator[ThreadServer]:
    """Serve the app with uvicorn on 127.0.0.1 in a thread; on exit, end follow streams and stop."""
    shutdown = Shutdown()
    app = create_app(settings, store=store, shutdown=shutdown)
    instance = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # uvloop, as `serve` runs by default: on asyncio's loop a response's second write sat ~40 ms
    # behind the first (a delayed ACK), so every request to a thread server took that long.
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(instance.serve(sockets=[sock]),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not instance.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield ThreadServer(f"http://127.0.0.1:{sock.getsockname()[1]}", loop)
    finally:
        shutdown.trigger()
        instance.should_exit = True
        thread.join(30)
        loop.close()
        sock.close()


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_directory(root: Path) -> Iterator[str]:
    """Serve the files under ``root`` from a thread on 127.0.0.1: a web origin of its own for browser tests."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietFiles, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(30)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, process: subprocess.Popen[Any] | None = None, timeout: float = 60) -> None:
    """Poll ``/healthz`` until the service answers; fail at once if its process has died."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the service exited: {process.stderr.read() if process.stderr else ''!r}")
        assert time.monotonic() < deadline, "the service did not start"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)


class ChildServer:
    """A server that is not ours, started as a child process on a port of its own (the bare app, the DS reference)."""

    def __init__(self, args: list[str], url: str, *, env: dict[str, str] | None = None) -> None:
        self.url = url
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def ds_reference_server(script: str, timeout: float = 30) -> ChildServer:
    """The Durable Streams reference server (``HISTORY_DS_REFERENCE``, from `scripts/with-node`), once it listens."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is missing; run under scripts/with-node")
    port = free_port()
    child = ChildServer([node, script, str(port)], f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + timeout
    while True:
        if child.process.poll() is not None:
            raise RuntimeError(f"the reference server exited with {child.process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return child
        except OSError:
            if time.monotonic() > deadline:
                child.stop()
                raise RuntimeError(f"the reference server did not listen within {timeout:g} s") from None
            time.sleep(0.05)


class ServerProcess:
    """``history-service serve`` as a child process on a fixed port, so it can be killed and restarted.

    ``python`` is the interpreter that runs it: another venv's, to serve what that venv installed.

    Its stderr goes to a file, never an unread pipe that a chatty server could fill and block on.
    """

    def __init__(
        self,
        store_url: str,
        *,
        env: dict[str, str] | None = None,
        port: int | None = None,
        python: str | Path = sys.executable,
    ) -> None:
        self.store_url = store_url
        self.python = str(python)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Idle connections outlive httpx's own 5 s keep-alive, so a client never sends a request on a
        # connection the server is closing.
        self.env = {**os.environ, "HISTORY_PING_INTERVAL": "1", "HISTORY_TIMEOUT_KEEP_ALIVE": "60", **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def start(self, *extra: str) -> None:
        code = "import sys; from history_service.cli.program import main; sys.exit(main())"
        # Another venv's interpreter runs isolated (-I): neither the caller's PYTHONPATH nor the working
        # directory's packages may stand in for what that venv installed.
        isolated = ["-I"] if self.python != sys.executable else []
        args = [
            self.python,
            *isolated,
            "-c",
            code,
            "serve",
            "--store",
            self.store_url,
            "--port",
            str(self.port),
            *extra,
        ]
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(args, env=self.env, stdout=subprocess.DEVNULL, stderr=self._log)
        try:
            wait_healthy(self.url, self.process)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {self.stderr()!r}") from None

    def stderr(self) -> str:
        """What the current process has written to stderr so far."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return str(self._log.read().decode(errors="replace"))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None
        self.process = None

    def restart(self, sig: int = signal.SIGTERM) -> None:
        self.stop(sig)
        self.start()


class CuttingProxy:
    """A TCP proxy on the running loop that can sever every open connection at once, like a flaky network.

    It can also freeze, like a server stopped with ``SIGSTOP``: connections are still accepted
    and bytes still taken, but nothing passes either way until it thaws.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cuts = 0
        self.severed = 0
        self.connections = 0
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.url = ""

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.thaw()
        self.cut()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        # Connections a freeze held before their upstream opened end now, not when the loop closes.
        while self._handlers:
            self.cut()
            await asyncio.wait(set(self._handlers), timeout=1)

    @property
    def open(self) -> int:
        """How many connections pass through the proxy now."""
        return len(self._pairs)

    def cut(self) -> None:
        self.cuts += 1
        self.severed += len(self._pairs)
        for down, up in list(self._pairs):
            down.transport.abort()
            up.transport.abort()
        self._pairs.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            await self._relay(reader, writer)
        finally:
            self._handlers.discard(handler)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        pair = (writer, up_writer)
        self._pairs.add(pair)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._pairs.discard(pair)
        writer.transport.abort()
        up_writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()

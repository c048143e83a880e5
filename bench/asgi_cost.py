"""Our app's own time per small request, in process: no HTTP server, no load generator, so far less noise.

``python -m bench.asgi_cost [--rounds R] [--requests N]`` drives the ASGI apps directly
from one event loop: bare Starlette's ``/healthz`` (`bench.bare`), and our service with
its logging configured as ``serve`` does (to a stream that drops what it is written) and
metrics on, and quiet (access log and metrics off), on the memory store and on SQLite.
The cells run interleaved, ``N`` requests each per round; each cell's figure is the
median of its rounds, and each ratio (bare's time over the cell's, so 1 is the floor) the
median of the ratios of the same round. Every answer is checked (status, and the
append's ``headSeq``).

Prints ``HISTORY_ASGI_COST_RESULT {json}``. It measures what `bench/test_hot_path.py`
cannot separate from the server: the framework's floor and ours, side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import msgspec

from bench.bare import app as bare_app
from bench.machine import emit, machine
from bench.throughput import TIME_ZERO, append_body
from codec import encode
from history_service.app import create_app
from history_service.logs import configure_logging, finish_queued_logs
from history_service.scenarios import multi_turn
from history_service.settings import Settings

__all__ = ["main", "measure"]

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
_JSON: Final = [(b"content-type", b"application/json")]
_SEED: Final = b'{"events":[' + b",".join(encode(e) for e in multi_turn(seed=3, turns=3, max_run=2)) + b"]}"


def _scope(method: str, path: str, query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"bench"), *(headers or [])],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }


async def _call(app: App, scope: dict[str, Any], body: bytes = b"") -> tuple[int, bytes]:
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status, out = 0, bytearray()

    async def receive() -> dict[str, Any]:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            out.extend(message.get("body", b""))

    await app(scope, receive, send)
    return status, bytes(out)


class _Served:
    """An app with its lifespan run, and its state handed to each request as a server would."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": self.state}
        self._task = asyncio.create_task(self.app(scope, self._inbox.get, self._outbox.put))
        await self._inbox.put({"type": "lifespan.startup"})
        started = await self._outbox.get()
        assert started["type"] == "lifespan.startup.complete", started

    async def stop(self) -> None:
        await self._inbox.put({"type": "lifespan.shutdown"})
        await self._outbox.get()
        assert self._task is not None
        await self._task

    async def __call__(self, scope: dict[str, Any], body: bytes = b"") -> tuple[int, bytes]:
        return await _call(self.app, {**scope, "state": dict(self.state)}, body)


class _Appends:
    """One-event appends to one session, each checked."""

    def __init__(self, served: _Served, session: str) -> None:
        self.served, self.session, self.seq = served, session, 0
        self.path = f"/v1/sessions/{session}/events"

    async def create(self) -> None:
        body = msgspec.json.encode({"id": self.session, "createdAt": TIME_ZERO})
        status, _ = await self.served(_scope("POST", "/v1/sessions", headers=_JSON), body)
        assert status == 201, status

    async def __call__(self) -> None:
        status, body = await self.served(_scope("POST", self.path, headers=_JSON), append_body(self.seq))
        assert status == 201 and msgspec.json.decode(body)["headSeq"] == self.seq, (status, body)
        self.seq += 1


async def _cells(root: Path) -> tuple[dict[str, Callable[[], Awaitable[None]]], list[_Served]]:
    async def bare() -> None:
        status, _ = await _call(bare_app, _scope("GET", "/healthz"))
        assert status == 200

    cells: dict[str, Callable[[], Awaitable[None]]] = {"healthz.bare": bare}
    servers = []
    # The log level is the process's: a quiet cell lowers it while it runs (`measure`).
    configure_logging(Settings(log_level="info"), stream=_Null())
    for name, store, quiet in [
        ("shipped", "memory://", False),
        ("quiet", "memory://", True),
        ("sqlite", f"sqlite:///{root / 'cost.db'}", False),
    ]:
        served = _Served(create_app(Settings(store_url=store, auth="none", metrics=not quiet)))
        await served.start()
        servers.append(served)
        appends = _Appends(served, f"a-{name}")
        await appends.create()
        cells[f"append.{name}"] = appends
        if name == "sqlite":
            continue
        cells[f"healthz.{name}"] = _checked(served, _scope("GET", "/healthz"))
        pages = _Appends(served, f"p-{name}")
        await pages.create()
        status, _ = await served(_scope("POST", pages.path, headers=_JSON), _SEED)
        assert status == 201, status
        cells[f"page.{name}"] = _checked(served, _scope("GET", pages.path.replace("events", "page"), b"maxMessages=5"))
    return cells, servers


def _checked(served: _Served, scope: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    async def request() -> None:
        status, body = await served(scope)
        assert status == 200 and body, status

    return request


class _Null(io.StringIO):
    """A stream that keeps nothing: the access lines are made and written, then dropped."""

    def write(self, text: str) -> int:
        return len(text)


async def measure(rounds: int, requests: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        cells, servers = await _cells(Path(root))
        try:
            times: dict[str, list[float]] = {name: [] for name in cells}
            root_logger = logging.getLogger()
            for _ in range(rounds):
                for name, request in cells.items():
                    root_logger.setLevel(logging.WARNING if name.endswith(".quiet") else logging.INFO)
                    started = time.perf_counter()
                    for _ in range(requests):
                        await request()
                    times[name].append((time.perf_counter() - started) / requests * 1e6)
        finally:
            for served in servers:
                await served.stop()
            finish_queued_logs()
    bare = times["healthz.bare"]
    return {
        "machine": machine(rounds=rounds, requests=requests),
        "microseconds": {name: round(statistics.median(values), 1) for name, values in times.items()},
        "bareOver": {
            name: round(statistics.median(b / v for b, v in zip(bare, values, strict=True)), 3)
            for name, values in times.items()
            if name != "healthz.bare"
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asgi_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds of every cell, interleaved (default 15)")
    parser.add_argument("--requests", type=int, default=1000, help="requests per cell and round (default 1000)")
    args = parser.parse_args(argv)
    emit("ASGI_COST", asyncio.run(measure(args.rounds, args.requests)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

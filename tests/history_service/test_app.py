"""The app under both launchers: the history-service CLI and `uvicorn --factory`, stopped by SIGTERM mid-follow."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from history_service.app import create_app
from history_service.logs import ACCESS_LOGGER, LogHandler
from history_service.settings import Settings
from persistence import MemoryStore, SessionSummary
from testing.asgi import serving
from testing.servers import free_port, wait_healthy

LAUNCHERS = {
    "history-service": ["-c", "import sys; from history_service.cli.program import main; sys.exit(main())", "serve"],
    "uvicorn-factory": ["-m", "uvicorn", "--factory", "history_service.app:app_factory"],
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_sigterm_ends_open_follow_streams_and_the_process_exits_cleanly(tmp_path: Path, launcher: str) -> None:
    """Item 10: an open follow stream never stalls shutdown, whichever launcher started the app.

    uvicorn waits for open responses before it runs the lifespan's shutdown, and by default
    waits forever; the app must end its streams when the signal arrives.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HISTORY_STORE": f"sqlite:///{tmp_path / 'h.db'}"}
    argv = [sys.executable, *LAUNCHERS[launcher], "--port", str(port)]
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as process:
        try:
            wait_healthy(base, process)
            assert httpx.post(f"{base}/v1/sessions", json={"id": "s", "createdAt": 0}).status_code == 201
            frames: list[str] = []
            ended = threading.Event()
            opened = threading.Event()

            def follow() -> None:
                with httpx.stream("GET", f"{base}/v1/sessions/s/follow", timeout=60) as response:
                    for line in response.iter_lines():
                        frames.append(line)
                        if line.startswith("event: snapshot"):
                            opened.set()
                ended.set()

            reader = threading.Thread(target=follow, daemon=True)
            reader.start()
            assert opened.wait(30), "no snapshot arrived"
            process.send_signal(signal.SIGTERM)
            # uvicorn shuts down, then re-raises the signal it caught with its default action.
            assert process.wait(60) in (0, -signal.SIGTERM)
            reader.join(30)
            assert ended.is_set(), "the follow stream did not end cleanly"
            assert process.stderr is not None and "Traceback" not in process.stderr.read()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)


class BuggyStore(MemoryStore):
    async def list_sessions(self, owner: str, **listing: Any) -> list[SessionSummary]:
        raise RuntimeError("a bug")


@pytest.mark.anyio
@pytest.mark.parametrize("given", [None, "gateway-7"], ids=["made", "given"])
async def test_a_500_of_the_outer_error_handler_carries_the_request_id_the_access_log_records(
    given: str | None,
) -> None:
    """R11: Starlette's ServerErrorMiddleware answers outside every middleware of ours, yet its 500 has the id.

    (With CORS origins set, a second one inside the access log answers instead, and always did.)
    """
    settings = Settings()
    buffer = io.StringIO()
    handler = LogHandler(Settings(log_format="json"), buffer)
    access_logger = logging.getLogger(ACCESS_LOGGER)
    previous = access_logger.level
    access_logger.addHandler(handler)
    access_logger.setLevel(logging.INFO)
    try:
        async with serving(create_app(settings, store=BuggyStore()), raise_app_exceptions=False) as client:
            response = await client.get("/v1/sessions", headers={"X-Request-ID": given} if given else {})
    finally:
        access_logger.removeHandler(handler)
        access_logger.setLevel(previous)
    assert response.status_code == 500 and response.json()["error"]["code"] == "internal"
    (access,) = [line for line in map(json.loads, buffer.getvalue().splitlines()) if line["level"] == "INFO"]
    assert access["status"] == 500 and access["request_id"] == (given or access["request_id"])
    assert response.headers.get("X-Request-ID") == access["request_id"]

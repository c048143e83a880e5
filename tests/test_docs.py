"""Every example in README.md and docs/api.md runs, in order, against a real server.

Each document gets a fresh ``history-service serve --demo`` on a temporary SQLite store
(what ``make serve`` starts), with ``BASE`` pointing at it. Its ```sh blocks are split into
commands and run with bash; its ```python blocks that use the SDK run with this
interpreter. A curl command must answer the status the docs give (201 for a POST, 200
otherwise), or, where the answer shown right after it is an error, that error's code. An
answer shown as complete JSON must be the answer; a text answer's ``name: value`` lines must
appear in it. A follow command is read up to its first frame (or line), then stopped.

Skipped, because they cannot run against the test's server: ``make`` (it starts a server of
its own, or the whole suite), ``pip install`` (the network), a launch of ``uvicorn``
(another server), and ``history-service`` commands (they work on a local store, not over
HTTP; tests/history_service/test_cli.py covers them). Any other command fails the test
until it is classified here.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testing.servers import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = ["README.md", "docs/api.md"]
DOCS_BASE = "http://127.0.0.1:8000"
STATUS_MARK = "@@status "
# A bound for a command that never stops by itself, not a timing assertion.
COMMAND_DEADLINE = 60.0
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_SKIPPED = {
    "make": "starts a server of its own (or runs the whole suite)",
    "pip": "needs the network",
    "uvicorn": "launches another server",
    "history-service": "works on a local store, not over HTTP",
}

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not on PATH")


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    shown: Block | None = None  # the block right after it: the answer the docs show


def blocks(document: str) -> list[Block]:
    """The document's fenced blocks in order, each with the block that follows it (if any)."""
    text = (ROOT / document).read_text()
    found = [(m.group(1), m.group(2), m.start(), m.end()) for m in _FENCE.finditer(text)]
    out = []
    for i, (language, body, _, end) in enumerate(found):
        shown = None
        if i + 1 < len(found) and not text[end : found[i + 1][2]].strip():
            shown = Block(found[i + 1][0], found[i + 1][1])
        out.append(Block(language, body, shown))
    return out


def commands(script: str) -> Iterator[str]:
    """The shell commands of a block: lines joined across backslashes and open quotes, comments dropped."""
    pending = ""
    for line in script.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line + "\n"
        if line.endswith("\\"):
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        yield pending.strip()
        pending = ""
    assert not pending, f"unfinished command: {pending!r}"


def program(command: str) -> str:
    words = [word for word in shlex.split(command, comments=True) if "=" not in word.partition("/")[0]]
    return Path(words[0]).name if words else ""


def skip_reason(command: str) -> str | None:
    name = program(command)
    if name in _SKIPPED:
        return _SKIPPED[name]
    assert name in {"curl", "history-client"} and "$BASE" in command, f"an unclassified example: {command!r}"
    return None


def streams(command: str) -> bool:
    words = shlex.split(command, comments=True)
    return (words[0] == "curl" and "-N" in words) or (program(command) == "history-client" and "follow" in words)


@dataclass
class Run:
    command: str
    returncode: int
    stdout: str
    stderr: str


def run_command(command: str, env: dict[str, str], cwd: Path) -> Run:
    if program(command) == "curl":
        command = "curl -w '%{stderr}\\n" + STATUS_MARK + "%{http_code}\\n'" + command[len("curl") :]
    done = subprocess.run(
        ["bash", "-c", command], env=env, cwd=cwd, capture_output=True, text=True, timeout=COMMAND_DEADLINE
    )
    return Run(command, done.returncode, done.stdout, done.stderr)


def run_stream(command: str, env: dict[str, str], cwd: Path) -> str:
    """The command's output up to its first SSE frame with an ``event:`` (or, without SSE, its first line)."""
    process = subprocess.Popen(
        ["bash", "-c", command],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    output = b""
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + COMMAND_DEADLINE
    try:
        while not _first_frame(output.decode()):
            assert time.monotonic() < deadline, f"{command!r}: no frame yet: {output!r}"
            if not selector.select(timeout=1):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            assert chunk, f"{command!r} ended without a frame: {output!r} {process.stderr.read()!r}"
            output += chunk
    finally:
        selector.close()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        process.stdout.close()
        process.stderr.close()
    return output.decode()


def _first_frame(output: str) -> bool:
    if "event:" in output:
        return "\n\n" in output[output.index("event:") :]
    return output.startswith("{") and "\n" in output


def shown_json(block: Block | None) -> Any:
    """The answer shown after a command, when it is one complete JSON value; else None."""
    if block is None or block.language != "json" or "…" in block.text:
        return None
    return json.loads(block.text)


def check_curl(run: Run, shown: Block | None) -> None:
    body, status_text = run.stdout, run.stderr.rpartition(STATUS_MARK)[2].strip()
    assert run.returncode == 0 and status_text.isdigit(), f"{run.command!r} failed: {run.stderr!r}"
    status = int(status_text)
    expected = shown_json(shown)
    if type(expected) is dict and "error" in expected:
        assert 400 <= status < 500 and json.loads(body)["error"]["code"] == expected["error"]["code"], run
        return
    # A POST creates (201), except a close, which changes a session that exists (200).
    want = 201 if re.search(r"-X\s+POST", run.command) and not re.search(r"/close\b", run.command) else 200
    if re.search(r"-X\s+DELETE", run.command):
        want = 204
    if "/ds/" in run.command and not re.search(r"-X\s+DELETE", run.command):
        # Durable Streams (§13): a PUT creates, a POST appends with no body in answer.
        want = 201 if re.search(r"-X\s+PUT", run.command) else 204 if re.search(r"-X\s+POST", run.command) else 200
    assert status == want, f"{run.command!r} answered {status}, not {want}: {body!r}"
    if expected is not None:
        assert json.loads(body) == expected, f"{run.command!r}: the docs show {expected}, the service says {body}"
    elif shown is not None:
        check_lines(run.command, body, shown)


def check_lines(command: str, output: str, shown: Block) -> None:
    """Each complete ``name: value`` line (or status line) the docs show is in the output."""
    for line in shown.text.splitlines():
        if line.strip() and "…" not in line and (": " in line or line.startswith("HTTP/")):
            assert line in output.replace("\r\n", "\n"), f"{command!r}: the docs show {line!r}; got {output!r}"


def check_stream(command: str, output: str, shown: Block | None) -> None:
    if "event:" in output:
        frame = output[output.index("event:") :]
        assert not frame.startswith("event: error"), f"{command!r}: {output!r}"
        if shown is not None:
            check_lines(command, output, Block(shown.language, shown.text.partition("\n\nevent: error")[0]))
    else:
        json.loads(output.splitlines()[0])


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_example_runs(document: str, tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path / 'history.db'}")
    server.start("--demo")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {**os.environ, "BASE": server.url}
    ran: list[str] = []
    try:
        for block in blocks(document):
            if block.language == "python" and "history_client" in block.text:
                script = tmp_path / "example.py"
                script.write_text(block.text.replace(DOCS_BASE, server.url))
                done = subprocess.run(
                    [sys.executable, str(script)],
                    cwd=tmp_path,
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_DEADLINE,
                )
                assert done.returncode == 0, f"{document}: a python example failed:\n{block.text}\n{done.stderr}"
                ran.append(block.text)
                continue
            if block.language != "sh":
                continue
            listed = list(commands(block.text))
            for index, command in enumerate(listed):
                if re.fullmatch(r"BASE=\S+", command):
                    assert command == f"BASE={DOCS_BASE}", command
                    continue
                if skip_reason(command) is not None:
                    continue
                shown = block.shown if index == len(listed) - 1 else None
                if streams(command):
                    check_stream(command, run_stream(command, env, tmp_path), shown)
                elif program(command) == "curl":
                    check_curl(run_command(command, env, tmp_path), shown)
                else:
                    run = run_command(command, env, tmp_path)
                    assert run.returncode == 0, f"{command!r} failed: {run.stderr!r}"
                ran.append(command)
    finally:
        server.stop()
    assert ran, f"{document} has no example that ran"


def test_commands_split_across_lines_and_quotes() -> None:
    script = "# a comment\ncurl -s a \\\n  -d '{\"x\":\n 1}'\ncurl b  # trailing\n"
    assert list(commands(script)) == ["curl -s a \\\n  -d '{\"x\":\n 1}'", "curl b  # trailing"]

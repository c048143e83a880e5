"""``history-client`` against a real server: JSON lines out, progress and errors on stderr."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from codec import Event, decode_event, encode
from history_client import cli, read_page
from history_service.settings import Settings
from persistence import MemoryStore
from testing.events import make_events
from testing.servers import ServerProcess, ThreadServer, free_port, serve_in_thread

CLI = "import sys; from history_client.cli import main; sys.exit(main())"
FAST_RETRIES = ("--retry-delay", "0.001", "--max-delay", "0.002")
JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[ThreadServer, list[Event]]]:
    store = MemoryStore()
    with serve_in_thread(Settings(enable_test_seed=True), store=store) as running:
        body = {"scenario": "multi-turn", "seed": 3, "turns": 8, "sessionId": "cli"}
        response = httpx.post(f"{running.url}/v1/test-only/seed", json=body, timeout=60)
        assert response.status_code == 201, response.text
        head = response.json()["sessions"][0]["headSeq"]
        yield running, running.call(store.read_events("cli", 0, head + 1))


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def events_of(text: str) -> list[Event]:
    return [decode_event(line.encode()) for line in text.splitlines()]


def test_page_prints_the_tail_pages_exact_events(server):
    running, events = server
    code, out, _ = run("page", running.url, "cli", "--max-messages", "2")
    assert code == 0
    printed = events_of(out)
    assert printed == events[-len(printed) :] and 0 < len(printed) < len(events)


def test_page_json_prints_the_validated_page_document(server):
    running, events = server
    code, out, _ = run("page", running.url, "cli", "--before", "100", "--json")
    page = read_page(out.encode(), before=100)
    assert code == 0 and list(page.events()) == events[page.from_seq : 100]


def test_export_prints_every_event_oldest_first_with_progress(server, monkeypatch):
    running, events = server
    monkeypatch.setattr(cli, "WRITE_BATCH", 100)
    monkeypatch.setattr(cli, "PROGRESS_EVERY", 500)
    code, out, err = run("export", running.url, "cli")
    assert code == 0 and events_of(out) == events
    assert "history-client: 500 events" in err and f"exported {len(events):,} events" in err
    code, out, err = run("export", running.url, "cli", "--after", "50", "--quiet")
    assert events_of(out) == events[51:] and err == ""


def test_follow_prints_events_as_they_arrive(server):
    running, events = server
    argv = [sys.executable, "-c", CLI, "follow", running.url, "cli", "--after", str(len(events) - 6)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(5)]
        process.terminate()
        process.wait(30)
    assert [decode_event(line) for line in lines] == events[-5:]


def test_errors_are_one_line_on_stderr_with_a_nonzero_exit(
    server: tuple[ThreadServer, list[Event]], tmp_path: Path
) -> None:
    running, _ = server
    code, out, err = run("page", running.url, "nope")
    assert (code, out) == (1, "") and err.startswith("history-client: 404 session_not_found")
    code, _, err = run("page", running.url, "cli", "--token-file", str(tmp_path / "missing"))
    assert code == 2 and "cannot read the token file" in err
    code, _, err = run("page", "http://127.0.0.1:9", "cli", "--timeout", "2")
    assert code == 1 and "ConnectError" in err


def test_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in ("page", "follow", "export", "HISTORY_TOKEN"))


def test_version_prints_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"history-client {version('history-transport')}\n"


def test_follow_help_states_the_retry_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["follow", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--max-retries N give up, with exit status 1" in out and "(default: 10)" in out
    assert "(default: the server's retry field" in out and "between retries (default: 30.0)" in out


def test_follow_reports_each_failed_attempt_and_gives_up_after_max_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = run("follow", url, "s", "--max-retries", "2", *FAST_RETRIES)
    lines = err.splitlines()
    assert (code, out, len(lines)) == (1, "", 3)
    for attempt, line in enumerate(lines[:2], 1):
        pattern = rf"history-client: connection failed \(attempt {attempt}\): ConnectError: .+; retrying in [0-9.e-]+ s"
        assert re.fullmatch(pattern, line), line
    assert lines[2].startswith("history-client: the follow stream gave up after attempt 3 failed: ConnectError: ")


def append(url: str, events: Sequence[Event]) -> None:
    body = encode({"events": events})
    response = httpx.post(f"{url}/v1/sessions/s/events", content=body, headers=JSON, timeout=30)
    assert response.status_code == 201, response.text


def test_follow_reports_losing_its_server_and_reconnecting(tmp_path: Path) -> None:
    events = make_events(20)
    server = ServerProcess(f"sqlite:///{tmp_path / 'cli.db'}")
    argv = [sys.executable, "-c", CLI, "follow", server.url, "s", "--after", "4", "--max-retries", "1000"]
    argv += ["--retry-delay", "0.05", "--max-delay", "0.2"]
    try:
        server.start()
        assert httpx.post(f"{server.url}/v1/sessions", json={"id": "s", "createdAt": 0}).status_code == 201
        append(server.url, events[:10])
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
            # A hang guard, not a timing check: killing a stuck follow makes the reads below fail, not block.
            watchdog = threading.Timer(120, process.kill)
            watchdog.start()
            try:
                assert process.stdout is not None and process.stderr is not None
                before = [decode_event(process.stdout.readline()) for _ in range(5)]
                server.restart(signal.SIGKILL)
                append(server.url, events[10:])
                after = [decode_event(process.stdout.readline()) for _ in range(10)]
                process.terminate()
                lines = process.stderr.read().decode().splitlines()
            finally:
                watchdog.cancel()
    finally:
        server.stop()
    assert before + after == events[5:]
    assert lines[0].startswith("history-client: connection lost (attempt 1): "), lines
    for attempt, line in enumerate(lines[1:-1], 2):
        assert line.startswith(f"history-client: connection failed (attempt {attempt}): ConnectError: "), lines
    failures = len(lines) - 1
    assert lines[-1] == f"history-client: reconnected after {failures} failed attempt{'s' * (failures > 1)}", lines


def test_follow_into_a_pipe_closed_early_exits_quietly() -> None:
    """Issue 23: `history-client follow ... | head` exits 0, with nothing on stderr, once the reader has gone."""
    events = make_events(40)
    with serve_in_thread(Settings(), store=MemoryStore()) as running:
        assert httpx.post(f"{running.url}/v1/sessions", json={"id": "s", "createdAt": 0}).status_code == 201
        append(running.url, events[:10])
        argv = [sys.executable, "-c", CLI, "follow", running.url, "s", "--after", "4"]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
            # A hang guard, not a timing check: a follow that never stops is killed and fails the status check.
            watchdog = threading.Timer(120, process.kill)
            watchdog.start()
            try:
                assert process.stdout is not None and process.stderr is not None
                assert decode_event(process.stdout.readline()) == events[5]
                process.stdout.close()
                # The next event the follower prints meets the closed pipe.
                append(running.url, events[10:])
                status = process.wait(120)
                stderr = process.stderr.read().decode()
            finally:
                watchdog.cancel()
    assert (status, stderr) == (0, "")


def test_an_id_the_service_could_never_accept_is_refused_before_any_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["page", "http://127.0.0.1:9", "a/b"]) == 1
    assert capsys.readouterr().err.startswith("history-client: session id 'a/b' is not a session id")


def test_follow_of_a_session_that_is_deleted_says_so_and_exits_1() -> None:
    events = make_events(20)
    with serve_in_thread(Settings(), store=MemoryStore()) as running:
        assert httpx.post(f"{running.url}/v1/sessions", json={"id": "s", "createdAt": 0}).status_code == 201
        append(running.url, events)
        argv = [sys.executable, "-c", CLI, "follow", running.url, "s", "--after", "14", *FAST_RETRIES]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
            # A hang guard, not a timing check: a follow that never stops is killed and fails the status check.
            watchdog = threading.Timer(120, process.kill)
            watchdog.start()
            try:
                assert process.stdout is not None and process.stderr is not None
                printed = [decode_event(process.stdout.readline()) for _ in range(5)]
                assert httpx.delete(f"{running.url}/v1/sessions/s").status_code == 204
                status = process.wait(120)
                stderr = process.stderr.read().decode()
            finally:
                watchdog.cancel()
    assert printed == events[15:]
    assert status == 1 and re.fullmatch(
        r"history-client: the session \(incarnation [0-9a-z]+\) was deleted.*\n", stderr
    )

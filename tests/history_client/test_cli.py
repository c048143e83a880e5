"""``history-client`` against a real server: JSON lines out, progress and errors on stderr."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from codec import Event, decode_event
from history_client import cli, read_page
from history_service.app import create_app
from history_service.settings import Settings
from persistence import MemoryStore
from tests.servers import ThreadServer, serve_in_thread


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[ThreadServer, list[Event]]]:
    store = MemoryStore()
    with serve_in_thread(create_app(Settings(enable_test_seed=True), store=store)) as running:
        body = {"scenario": "multi-turn", "seed": 3, "turns": 8, "sessionId": "cli"}
        response = httpx.post(f"{running.url}/v1/test-only/seed", json=body, timeout=60)
        assert response.status_code == 201, response.text
        head = response.json()["sessions"][0]["headSeq"]
        yield running, running.call(store.read_events("cli", 0, head + 1))  # type: ignore[misc]


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
    code = "import sys; from history_client.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, "follow", running.url, "cli", "--after", str(len(events) - 6)]
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

"""history-service import/export and serve --demo, and the corpus through every backend."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from codec import SessionHeader, SessionLog, encode, pack_page, read_session_log
from history_client import HistoryClient
from history_service.app import create_app
from history_service.cli.launcher import resolve_workers, usable_cores
from history_service.cli.naming import ImportOptions, plan_names
from history_service.cli.program import main
from history_service.cli.references import References
from history_service.errors import CommandError
from history_service.pages import PageQuery, PageReader
from history_service.settings import Settings, environment_variables
from persistence import DEFAULT_OWNER, open_store
from testing.asgi import serving
from testing.corpus import corpus_dir
from testing.events import make_events
from testing.golden import GOLDEN_DIR
from testing.postgres import PG_URL, empty_postgres
from testing.servers import free_port, wait_healthy
from testing.stores import page_records

GOLDEN = GOLDEN_DIR / "codec"


def backend_urls(tmp_path: Path) -> dict[str, str]:
    urls = {
        "sqlite": f"sqlite:///{tmp_path / 'h.db'}",
        "jsonl": f"jsonl:///{tmp_path / 'plain'}",
        "jsonl-zstd": f"jsonl:///{tmp_path / 'zstd'}?compression=zstd",
    }
    if PG_URL:
        anyio.run(empty_postgres, PG_URL)
        urls["postgresql"] = PG_URL
    return urls


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def run_all(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_import_then_export_round_trips_the_log(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    status, out = run(
        "import", "--store", url, str(GOLDEN / "text-turn.events.jsonl"), str(GOLDEN / "edges.events.jsonl")
    )
    assert status == 0
    assert "imported text-turn (21 events)" in out
    for name in ("text-turn", "edges"):
        log = read_session_log((GOLDEN / f"{name}.events.jsonl").read_bytes())
        status, exported = run("export", "--store", url, name)
        assert status == 0
        assert exported.splitlines()[0] == encode(log.header).decode()
        assert read_session_log(exported.encode()) == log


def test_export_to_a_file(tmp_path: Path) -> None:
    url = f"jsonl:///{tmp_path / 'root'}"
    assert run("import", "--store", url, str(GOLDEN / "tool-calls.events.jsonl"))[0] == 0
    target = tmp_path / "out.jsonl"
    assert run("export", "--store", url, "tool-calls", "-o", str(target))[0] == 0
    assert read_session_log(target.read_bytes()) == read_session_log((GOLDEN / "tool-calls.events.jsonl").read_bytes())


def test_errors_are_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("import", "--store", url, str(tmp_path / "nope.jsonl"))[0] == 1
    assert capsys.readouterr().err.splitlines()[1:] == [
        f"history-service: error: {tmp_path / 'nope.jsonl'}: no such file or directory"
    ]
    assert not (tmp_path / "h.db").exists(), "a failed import must not leave an empty store behind"
    assert run("import", "--store", url, str(GOLDEN / "edges.events.jsonl"))[0] == 0
    assert "warning: " in capsys.readouterr().err  # its parent is not in the store
    assert run("export", "--store", url, "missing")[0] == 1
    assert capsys.readouterr().err.splitlines()[1:] == ["history-service: error: unknown session 'missing'"]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"type":"session","id":"b","createdAt":0}\n{"type":"x"}\n')
    assert run("import", "--store", url, str(bad))[0] == 1
    assert "bad.jsonl: line 2: object missing required field `data`" in capsys.readouterr().err
    headless = tmp_path / "events.jsonl"
    headless.write_bytes(b'{"type":"turn/start","seq":0,"time":0,"data":{}}\n')
    assert run("import", "--store", url, str(headless))[0] == 1
    assert "history-client export writes events only" in capsys.readouterr().err
    unsafe = tmp_path / "unsafe.jsonl"
    unsafe.write_bytes(b'{"type":"session","id":"../up","createdAt":0}\n')
    assert run("import", "--store", url, str(unsafe))[0] == 1
    assert "unsafe.jsonl: the header's id '../up' is not a session id" in capsys.readouterr().err
    assert run("import", "--store", "ftp://x", str(bad))[0] == 1
    assert "unsupported store URL" in capsys.readouterr().err
    assert run("import", "--store", url, str(GOLDEN / "edges.events.jsonl"))[1].startswith("unchanged edges")
    capsys.readouterr()
    assert run("import", "--store", url, "--id", "edges", str(GOLDEN / "text-turn.events.jsonl"))[0] == 1
    assert "session 'edges' already exists and differs from this log" in capsys.readouterr().err
    assert run("import", "--store", "memory://", str(GOLDEN / "edges.events.jsonl"))[0] == 1
    assert "memory:// keeps nothing between commands" in capsys.readouterr().err
    assert run("export", "--store", url, "edges", "-o", str(tmp_path))[0] == 1
    assert "is a directory; give a file, or --with-children" in capsys.readouterr().err
    assert run("export", "--store", url, "edges", "--with-children", "-o", str(tmp_path))[0] == 1
    assert "exists and is not an empty directory" in capsys.readouterr().err


def test_a_token_file_turns_token_auth_on_and_a_missing_one_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("serve", "--token-file", str(tmp_path / "nope"))[0] == 1
    assert f"cannot read the token file {tmp_path / 'nope'}" in capsys.readouterr().err
    (tmp_path / "tokens").write_text("t1\n")
    assert run("serve", "--auth", "none", "--token-file", str(tmp_path / "tokens"))[0] == 1
    assert "--token-file needs --auth token" in capsys.readouterr().err


def test_list_prints_the_owners_sessions_newest_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    logs = [GOLDEN / f"{name}.events.jsonl" for name in ("text-turn", "edges", "tool-calls")]
    assert run("import", "--store", url, *map(str, logs))[0] == 0
    status, out = run("list", "--store", url)
    listed = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and sorted(s["id"] for s in listed) == ["text-turn", "tool-calls"]  # edges is a child
    assert [s["createdAt"] for s in listed] == sorted((s["createdAt"] for s in listed), reverse=True)
    assert len(run("list", "--store", url, "--limit", "1")[1].splitlines()) == 1
    assert run("list", "--store", url, "--owner", "nobody")[1] == ""


def test_close_closes_once_and_says_so_for_an_unknown_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("import", "--store", url, str(GOLDEN / "text-turn.events.jsonl"))[0] == 0
    status, out = run("close", "--store", url, "text-turn")
    closed = json.loads(out)
    assert status == 0 and type(closed["closedAt"]) is int and closed["headSeq"] >= 0
    assert run("close", "--store", url, "text-turn") == (0, out)
    status, _, err = run_all("close", "--store", url, "nope")
    assert status != 0 and "unknown session 'nope'" in err


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
def test_delete_asks_first_unless_yes_and_takes_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}" if store == "sqlite" else f"jsonl:///{tmp_path / 'logs'}"
    assert run("import", "--store", url, "--id", "golden-text-turn", str(GOLDEN / "text-turn.events.jsonl"))[0] == 0
    logs = [GOLDEN / "edges.events.jsonl", GOLDEN / "tool-calls.events.jsonl"]
    assert run("import", "--store", url, *map(str, logs))[0] == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    status, _, err = run_all("delete", "--store", url, "golden-text-turn")
    assert status == 1 and "[y/N]" in err and "not deleted" in err
    assert run("export", "--store", url, "golden-text-turn")[0] == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    status, out = run("delete", "--store", url, "golden-text-turn")
    assert status == 0 and sorted(json.loads(out)["deleted"]) == ["edges", "golden-text-turn"]
    status, out = run("delete", "--store", url, "tool-calls", "--yes")
    assert status == 0 and json.loads(out) == {"deleted": ["tool-calls"]}
    status, _, err = run_all("export", "--store", url, "golden-text-turn")
    assert status != 0 and "unknown session" in err
    assert run_all("delete", "--store", url, "nope", "--yes")[0] != 0


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
def test_purge_deletes_the_expired_sessions_and_a_dry_run_only_names_them(tmp_path: Path, store: str) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}" if store == "sqlite" else f"jsonl:///{tmp_path / 'logs'}"

    async def create() -> None:
        opened = await open_store(url, create=True)
        try:
            # Through the store: the service refuses an expiresAt already past.
            await opened.create_session(SessionHeader(id="gone", createdAt=1, expiresAt=1_000))
            kid = SessionHeader(id="gone.kid", createdAt=2, parentSession="gone", origin="subagent", expiresAt=1)
            await opened.create_session(kid)
            await opened.create_session(SessionHeader(id="kept", createdAt=3))
        finally:
            await opened.close()

    anyio.run(create)
    status, out = run("purge", "--store", url, "--dry-run")
    assert status == 0 and json.loads(out) == {"expired": ["gone", "gone.kid"]}
    status, out = run("purge", "--store", url)
    assert status == 0 and sorted(json.loads(out)["deleted"]) == ["gone", "gone.kid"]
    assert run("purge", "--store", url)[1] == '{"deleted":[]}\n'
    assert json.loads(run("list", "--store", url)[1].splitlines()[0])["id"] == "kept"
    # Written longer ago than --older-than: the retention a cron job gives.
    status, out = run("purge", "--store", url, "--older-than", "90d")
    assert status == 0 and json.loads(out) == {"deleted": []}
    status, out = run("purge", "--store", url, "--older-than", "1ms")
    assert status == 0 and json.loads(out) == {"deleted": ["kept"]}
    with pytest.raises(SystemExit) as refused:
        run("purge", "--store", url, "--older-than", "soon")
    assert refused.value.code == 2


def test_purge_says_what_it_does_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["purge", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--older-than DURATION" in shown and "--dry-run" in shown and "HISTORY_RETENTION" in shown


def test_vacuum_gives_back_what_deletes_freed_in_a_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("import", "--store", url, "--id", "big", str(GOLDEN / "text-turn.events.jsonl"))[0] == 0
    status, out = run("vacuum", "--store", url)
    sizes = json.loads(out)
    assert status == 0 and set(sizes) == {"before", "after"} and sizes["after"] > 0
    assert run("delete", "--store", url, "big", "--yes")[0] == 0
    status, out = run("vacuum", "--store", url)
    assert status == 0 and json.loads(out)["after"] <= sizes["after"]


def test_reindex_rebuilds_the_search_index_and_says_why_a_jsonl_store_has_none(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("import", "--store", url, "--id", "turn", str(GOLDEN / "text-turn.events.jsonl"))[0] == 0
    status, out = run("reindex", "--store", url)
    assert status == 0 and json.loads(out)["passages"] > 0
    # Rebuilt, the index answers as the appends left it.
    status, again = run("reindex", "--store", url)
    assert status == 0 and again == out
    jsonl = f"jsonl:///{tmp_path / 'logs'}"
    assert run("import", "--store", jsonl, "--id", "turn", str(GOLDEN / "text-turn.events.jsonl"))[0] == 0
    status, _, err = run_all("reindex", "--store", jsonl)
    assert status != 0 and "search needs a SQLite or PostgreSQL store" in err


BAD_URLS = {
    "mysql": ("mysql://x", "unsupported store URL mysql://x; use sqlite:///path.db"),
    "sqlite-missing-dir": ("sqlite:///missing/dir/x.db", "missing/dir"),
    "jsonl-missing-dir": ("jsonl:////nonexistent/dir", "/nonexistent"),
    "jsonl-with-host": ("jsonl://host/dir", "a JSONL URL is jsonl:///relative/dir or jsonl:////absolute/dir"),
    "postgresql-down": (
        "postgresql+psycopg://nobody:secret@127.0.0.1:1/x",
        "cannot open postgresql+psycopg://nobody:***@",
    ),
}


@pytest.mark.parametrize("command", ["serve", "import", "export", "page"])
@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_a_bad_store_url_is_one_actionable_line_for_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, case: str
) -> None:
    """Item 1: no traceback, one line that says what to fix, and a non-zero exit."""
    monkeypatch.chdir(tmp_path)
    url, expected = BAD_URLS[case]
    # `serve` binds its port before it opens the store: a free one, so a server on 8000 changes nothing.
    serve = ["--port", str(free_port())]
    args = {"serve": serve, "import": [str(GOLDEN / "edges.events.jsonl")], "export": ["s"], "page": ["s"]}[command]
    status, out, err = run_all(command, "--store", url, *args)
    lines = err.splitlines()
    assert status == 1 and out == ""
    assert len(lines) == 2 and lines[0].startswith("history-service: store ") and "secret" not in err
    assert lines[1].startswith("history-service: error: ") and expected in lines[1], lines[1]
    if case.endswith("missing-dir"):
        creates = command in ("serve", "import")
        assert ("does not exist" if creates else "`serve` or `import` create one") in lines[1]
    assert list(tmp_path.iterdir()) == []


def test_serve_with_a_bad_store_prints_no_traceback(tmp_path: Path) -> None:
    code = "import sys; from history_service.cli.program import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, "serve", "--store", "sqlite:///missing/dir/x.db", "--port", str(free_port())]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"history-service: error: cannot create the SQLite database {tmp_path}/missing/dir/x.db: "
        f"the directory {tmp_path}/missing/dir does not exist"
    )


def test_every_command_reads_history_store_and_says_which_store_it_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 2: import, export and page use HISTORY_STORE, never a ./history.db of their own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HISTORY_STORE", "jsonl:///logs")
    status, _, err = run_all("import", str(GOLDEN / "edges.events.jsonl"))
    assert status == 0 and err.splitlines()[0] == f"history-service: store jsonl:///logs ({tmp_path / 'logs'})"
    status, exported, err = run_all("export", "edges")
    assert status == 0 and "jsonl:///logs" in err
    assert read_session_log(exported.encode()) == read_session_log((GOLDEN / "edges.events.jsonl").read_bytes())
    status, page, _ = run_all("page", "edges", "--max-messages", "1")
    assert status == 0 and json.loads(page)["toSeq"] == len(read_session_log(exported.encode()).events)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


@pytest.mark.parametrize("command", ["export", "page"])
@pytest.mark.parametrize("url", ["sqlite:///history.db", "jsonl:///logs"])
def test_read_only_commands_never_create_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, url: str
) -> None:
    """Item 7."""
    monkeypatch.chdir(tmp_path)
    status, _, err = run_all(command, "--store", url, "s")
    assert status == 1 and "`serve` or `import` create one" in err.splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_store_urls_take_three_slashes_as_relative_and_four_as_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 8: SQLAlchemy's rule, for SQLite and JSONL alike."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    log = str(GOLDEN / "edges.events.jsonl")
    for url, made in [
        ("sqlite:///rel.db", work / "rel.db"),
        (f"sqlite:///{tmp_path / 'abs.db'}", tmp_path / "abs.db"),
        ("jsonl:///rel-logs", work / "rel-logs"),
        (f"jsonl:///{tmp_path / 'abs-logs'}?compression=zstd", tmp_path / "abs-logs"),
    ]:
        assert run_all("import", "--store", url, log)[0] == 0, url
        assert made.exists(), url
        assert run_all("export", "--store", url, "edges")[0] == 0, url
    assert sorted(p.name for p in work.iterdir()) == ["rel-logs", "rel.db"]


def test_the_port_is_validated(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 6."""
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", "99999"])
    assert exited.value.code == 2 and "99999 is not a port: use 1-65535" in capsys.readouterr().err
    monkeypatch.setenv("HISTORY_PORT", "0")
    status, _, err = run_all("serve")
    assert status == 1 and "port must be from 1 to 65535, got 0" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """Item 11."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"history-service {version('history-transport')}\n"


def test_the_console_script_has_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "history_service.cli", "import", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert "session.N.jsonl" in out.stdout and "--store" in out.stdout


def test_serve_help_names_every_variable_the_settings_read(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert [name for name in environment_variables() if name not in text] == []
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    configuration = readme[readme.index("## Configuration") : readme.index("The variables:")]
    flags = set(re.findall(r"(--[a-z][a-z-]+)", text)) - {"--help"}
    assert flags == set(re.findall(r"`(--[a-z][a-z-]+)`", configuration)), "README.md names every flag of serve"


def corpus_scenarios() -> list[object]:
    root = corpus_dir()
    if root is None or not root.is_dir():
        return [
            pytest.param(None, marks=pytest.mark.skip(reason="HISTORY_CORPUS_DIR is not set; corpus tests need it"))
        ]
    return [pytest.param(path, id=path.name) for path in sorted(p for p in root.iterdir() if p.is_dir())]


def as_imported(logs: dict[Path, SessionLog]) -> dict[Path, SessionLog]:
    """The logs of one folder as a plain import stores them: a placeholder id renamed, and what names it."""
    naming = plan_names({path: log.header for path, log in logs.items()}, ImportOptions(owner=DEFAULT_OWNER))
    out = {}
    for path, log in logs.items():
        references = References(naming.renames[path])
        out[path] = SessionLog(references.header(naming.headers[path]), references.events(log.events))
    return out


@pytest.mark.parametrize("scenario", corpus_scenarios())
def test_corpus_imports_exports_and_pages_identically_from_every_backend(tmp_path: Path, scenario: Path) -> None:
    logs = as_imported({path: read_session_log(path.read_bytes()) for path in sorted(scenario.glob("session*.jsonl"))})
    pages: dict[str, list[list[bytes]]] = {}
    for backend, url in backend_urls(tmp_path).items():
        status, _ = run("import", "--store", url, str(scenario))
        assert status == 0, backend
        for log in logs.values():
            status, exported = run("export", "--store", url, log.header.id)
            assert status == 0 and read_session_log(exported.encode()) == log, backend
        pages[backend] = anyio.run(_pages, url, list(logs.values()))
    expected = [
        [encode(r) for r in pack_page(log.events[start:])]
        for log in logs.values()
        for start in range(0, len(log.events), max(1, len(log.events) // 5))
    ]
    for backend, got in pages.items():
        assert got == expected, backend


async def _pages(url: str, logs: list) -> list[list[bytes]]:  # type: ignore[type-arg]
    store = await open_store(url, create=True)
    try:
        out = []
        for log in logs:
            n = len(log.events)
            for start in range(0, n, max(1, n // 5)):
                out.append(await page_records(store, log.header.id, start, n))
        return out
    finally:
        await store.close()


def test_serve_demo_seeds_once_serves_and_stops_quietly_on_ctrl_c(tmp_path: Path) -> None:
    code = "import sys; from history_service.cli.program import main; sys.exit(main())"
    port = free_port()
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    argv = [sys.executable, "-c", code, "serve", "--demo", "--store", store, "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    counts = []
    for _ in range(2):  # the second start finds the demo session already there
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
            assert process.stdout is not None and process.stderr is not None
            banner = [process.stdout.readline() for _ in range(4)]
            assert banner[0].startswith("demo session 'demo' (")
            assert banner[3].split() == [
                "client:",
                str(Path(sys.executable).parent / "history-client"),
                "follow",
                base,
                "demo",
            ]
            wait_healthy(base, process)
            with HistoryClient(base, timeout=30) as client:
                counts.append(len(list(client.iter_history("demo"))))
            assert counts[-1] == int(banner[0].split("(")[1].split()[0])
            process.send_signal(signal.SIGINT)
            assert process.wait(30) == 0
            assert "Traceback" not in process.stderr.read()
    assert counts[0] == counts[1] > 0


def test_serve_on_a_port_in_use_says_so_in_one_line_before_anything_else(tmp_path: Path) -> None:
    """Issue 23: the port is bound first; taken, it is one line naming the ways to pick another, and nothing else."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code = "import sys; from history_service.cli.program import main; sys.exit(main())"
        argv = [sys.executable, "-c", code, "serve", "--demo", "--store", "sqlite:///h.db", "--port", str(port)]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    other = port + 1
    assert done.stderr.splitlines() == [
        f"history-service: error: port {port} is in use on 127.0.0.1 (another server is running?): choose another "
        f"with `make serve PORT={other}`, HISTORY_PORT={other} or --port {other}"
    ]
    # Nothing was seeded: the store was never made.
    assert list(tmp_path.iterdir()) == []


def test_the_demo_banner_prints_absolute_paths(tmp_path: Path) -> None:
    """Issue 23: run from anywhere, the banner's client command and store path work from any directory."""
    code = "import sys; from history_service.cli.program import main; sys.exit(main())"
    port = free_port()
    argv = [sys.executable, "-c", code, "serve", "--demo", "--store", "sqlite:///demo.db", "--port", str(port)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path) as process:
        assert process.stdout is not None and process.stderr is not None
        banner = [process.stdout.readline() for _ in range(4)]
        wait_healthy(f"http://127.0.0.1:{port}", process)
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
        process.stderr.read()
    assert banner[0].rstrip().endswith(f" in sqlite:///demo.db ({tmp_path.resolve() / 'demo.db'})")
    client = Path(banner[3].split()[1])
    assert client.is_absolute() and client.exists() and client.name == "history-client"


def test_export_into_a_pipe_closed_early_exits_quietly(tmp_path: Path) -> None:
    """Issue 23: `history-service export ... | head` ends with status 0 and no error once the reader has gone."""
    url = f"sqlite:///{tmp_path / 'h.db'}"

    async def seed() -> None:
        store = await open_store(url, create=True)
        try:
            await store.create_session(SessionHeader(id="big", createdAt=0), owner="local")
            await store.append("big", make_events(20_000))
        finally:
            await store.close()

    anyio.run(seed)
    code = "import sys; from history_service.cli.program import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, "export", "big", "--store", url]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().startswith(b'{"type":"session"')
        # Far more than a pipe holds is still to come: the next writes meet a closed pipe.
        process.stdout.close()
        status = process.wait(60)
        stderr = process.stderr.read().decode()
    assert status == 0, stderr
    assert stderr.splitlines() == [f"history-service: store {url} ({tmp_path / 'h.db'})"]


def test_serve_applies_connection_limits_from_history_variables(tmp_path: Path) -> None:
    """F6 and item 5: HISTORY_PORT picks the port; the keep-alive timeout, concurrency and header limits take effect.

    uvicorn has no header-read timeout: a client that trickles its headers holds a connection
    until the gateway in front drops it (docs/deploy.md). What it does offer is set here.
    """
    port = free_port()
    env = {
        **os.environ,
        "HISTORY_STORE": f"sqlite:///{tmp_path / 'h.db'}",
        "HISTORY_PORT": str(port),
        "HISTORY_TIMEOUT_KEEP_ALIVE": "1",
        "HISTORY_LIMIT_CONCURRENCY": "3",
        "HISTORY_MAX_HEADER_BYTES": "4096",
    }
    code = "import sys; from history_service.cli.program import main; sys.exit(main())"
    base = f"http://127.0.0.1:{port}"
    with subprocess.Popen([sys.executable, "-c", code, "serve"], env=env, stderr=subprocess.PIPE, text=True) as process:
        try:
            wait_healthy(base, process)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as idle:
                idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                # The server closes the idle keep-alive connection, so reading ends instead of timing out.
                received = b"".join(iter(lambda: idle.recv(4096), b""))
                assert received.startswith(b"HTTP/1.1 200") and received.endswith(b'{"status":"ok"}')
            with socket.create_connection(("127.0.0.1", port), timeout=30) as big:
                # A head that never ends is refused once the server has buffered more of it than allowed.
                big.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 8192 + b"\r\n")
                assert big.recv(4096).startswith(b"HTTP/1.1 400")
            assert httpx.post(f"{base}/v1/sessions", json={"id": "s", "createdAt": 0}).status_code == 201
            with contextlib.ExitStack() as streams:
                # uvicorn counts the connection asking too: with a limit of 3, two others may be open.
                # The follow cap (at most the limit less two) admits one stream and refuses the next.
                client = streams.enter_context(httpx.Client(base_url=base, timeout=30))
                response = streams.enter_context(client.stream("GET", "/v1/sessions/s/follow"))
                assert response.status_code == 200
                other = streams.enter_context(httpx.Client(base_url=base, timeout=30))
                refused = streams.enter_context(other.stream("GET", "/v1/sessions/s/follow"))
                assert refused.status_code == 503 and json.loads(refused.read())["error"]["code"] == "overloaded"
                # A second connection that never finishes its request head fills the limit.
                trickle = streams.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
                trickle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                assert httpx.get(f"{base}/healthz", timeout=30).status_code == 503
            process.send_signal(signal.SIGINT)
            assert process.wait(60) == 0
        finally:
            if process.poll() is None:
                process.kill()


SEEDED_SCENARIOS: list[dict[str, Any]] = [
    {"scenario": "multi-turn", "seed": 3, "turns": 4},
    {"scenario": "compaction", "seed": 4},
    {"scenario": "subagent", "seed": 5},
    {"scenario": "dsh-synthetic"},
    {
        "scenario": "explicit",
        "header": {"id": "edges", "createdAt": 7, "meta": {"k": [1, {"v": None}]}},
        "events": [json.loads(line) for line in (GOLDEN / "edges.packed.jsonl").read_bytes().splitlines()[1:]],
    },
]
QUERIES = [
    PageQuery(through=None, before=None, max_messages=50, max_bytes=16 << 20),
    PageQuery(through=None, before=None, max_messages=1, max_bytes=16 << 20),
    PageQuery(through=None, before=None, max_messages=3, max_bytes=2_000),
]


async def snapshot_pages(url: str, owner: str) -> dict[str, Any]:
    """Every session of ``owner`` with its children: header, owner, head and a set of pages."""
    store = await open_store(url)
    try:
        found: dict[str, Any] = {}
        frontier = [s.id for s in await store.list_sessions(owner, limit=100)]
        while frontier:
            session_id = frontier.pop()
            info = await store.get_session(session_id)
            pages = []
            for query in QUERIES:
                for before in (None, info.head_seq // 2 or None):
                    bounded = msgspec.structs.replace(query, before=before)
                    pages.append((await PageReader(store).page(session_id, bounded)).body.join())
            # The raw expansion of the first thousand events: every event, unpacked.
            raw = PageQuery(
                through=None, before=min(info.head_seq + 1, 1000), max_messages=1000, max_bytes=1 << 30, raw=True
            )
            pages.append((await PageReader(store).page(session_id, raw)).body.join())
            found[session_id] = (encode(info.header), info.owner, info.head_seq, pages)
            frontier.extend(child.id for child in await store.children(session_id))
        return found
    finally:
        await store.close()


async def seed_into(url: str, request: dict[str, Any]) -> str:
    store = await open_store(url, create=True)
    try:
        settings = Settings(enable_test_seed=True, auth="token", tokens=("t",))
        async with serving(create_app(settings, store=store)) as client:
            headers = {"Authorization": "Bearer t", "X-Principal": "alice"}
            response = await client.post("/v1/test-only/seed", json=request, headers=headers)
            assert response.status_code == 201, response.text
            session_id: str = response.json()["sessions"][0]["id"]
            return session_id
    finally:
        await store.close()


@pytest.mark.parametrize("request_body", SEEDED_SCENARIOS, ids=[s["scenario"] for s in SEEDED_SCENARIOS])
def test_export_then_import_is_a_backup_on_every_store(tmp_path: Path, request_body: dict[str, Any]) -> None:
    """Item 3: export --with-children writes logs that import restores to identical pages, on every store."""
    for backend, url in backend_urls(tmp_path / "stores").items():
        if backend != "postgresql":
            Path(url.split("?")[0].replace("sqlite:///", "").replace("jsonl:///", "")).parent.mkdir(
                parents=True, exist_ok=True
            )
        root = anyio.run(seed_into, url, request_body)
        before = anyio.run(snapshot_pages, url, "alice")
        backup = tmp_path / f"backup-{backend}"
        assert run_all("export", "--store", url, root, "--with-children", "-o", str(backup))[0] == 0
        wipe(backend, url)
        status, _, err = run_all("import", "--store", url, "--owner", "alice", str(backup))
        assert status == 0, err
        assert anyio.run(snapshot_pages, url, "alice") == before, backend


def wipe(backend: str, url: str) -> None:
    if backend == "postgresql":
        anyio.run(empty_postgres, url)
        return
    path = Path(url.split("?")[0].split(":///", 1)[1])
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def test_workers_are_a_count_or_auto(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--workers", "0"])
    assert exited.value.code == 2
    assert "expected a whole number, 1 or more, or auto, not '0'" in capsys.readouterr().err


def test_auto_is_one_worker_per_usable_core_capped_by_the_cgroup_quota(tmp_path: Path) -> None:
    mask = len(os.sched_getaffinity(0))
    cpu_max = tmp_path / "cpu.max"
    assert usable_cores(cpu_max) == mask  # no cgroup v2 file
    for text, cores in [("max 100000\n", mask), ("150000 100000\n", min(mask, 2)), ("20000 100000\n", 1)]:
        cpu_max.write_text(text)
        assert usable_cores(cpu_max) == cores, text


def test_a_store_one_process_keeps_runs_one_worker(tmp_path: Path) -> None:
    shared = f"sqlite:///{tmp_path / 'h.db'}"
    assert resolve_workers("auto", shared) == usable_cores()
    assert (resolve_workers(3, shared), resolve_workers(3, f"jsonl:///{tmp_path}")) == (3, 3)
    assert (resolve_workers("auto", "memory://"), resolve_workers(1, "memory://")) == (1, 1)
    with pytest.raises(CommandError, match=r"--workers 3 needs a store several processes can share .* lives in one"):
        resolve_workers(3, "sqlite:///:memory:")


def test_serve_says_how_many_workers_and_why(tmp_path: Path) -> None:
    code = "import sys; from history_service.cli.program import main; sys.exit(main())"
    port = free_port()
    argv = [sys.executable, "-c", code, "serve", "--workers", "auto", "--store", "memory://", "--port", str(port)]
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as process:
        assert process.stderr is not None
        lines = [process.stderr.readline() for _ in range(4)]
        wait_healthy(f"http://127.0.0.1:{port}", process)
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
        process.stderr.read()
    assert "history-service: 1 worker (auto: memory:// lives in one process)\n" in lines, lines

"""history-service import/export and serve --demo, and the corpus through every backend."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from codec import encode, encode_lines, pack_page, read_session_log
from history_client import HistoryClient
from history_service.cli import main
from persistence import open_store
from tests.conftest import GOLDEN_DIR, corpus_dir
from tests.persistence.conftest import PG_URL, fresh_postgres_store
from tests.servers import free_port, wait_healthy

GOLDEN = GOLDEN_DIR / "codec"


def backend_urls(tmp_path: Path) -> dict[str, str]:
    urls = {
        "sqlite": f"sqlite:///{tmp_path / 'h.db'}",
        "jsonl": f"jsonl://{tmp_path / 'plain'}",
        "jsonl-zstd": f"jsonl://{tmp_path / 'zstd'}?compression=zstd",
    }
    if PG_URL:
        anyio.run(_empty_postgres, PG_URL)
        urls["postgresql"] = PG_URL
    return urls


async def _empty_postgres(url: str) -> None:
    await (await fresh_postgres_store(url)).close()


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_import_then_export_is_exact(tmp_path: Path) -> None:
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
        assert exported.encode() == encode_lines(log.events)


def test_export_to_a_file(tmp_path: Path) -> None:
    url = f"jsonl://{tmp_path / 'root'}"
    assert run("import", "--store", url, str(GOLDEN / "tool-calls.events.jsonl"))[0] == 0
    target = tmp_path / "out.jsonl"
    assert run("export", "--store", url, "tool-calls", "-o", str(target))[0] == 0
    assert target.read_bytes() == encode_lines(
        read_session_log((GOLDEN / "tool-calls.events.jsonl").read_bytes()).events
    )


def test_errors_are_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("export", "--store", url, "missing")[0] == 1
    assert capsys.readouterr().err == "history-service: error: unknown session 'missing'\n"
    assert run("import", "--store", url, str(tmp_path / "nope.jsonl"))[0] == 1
    assert "no such file or directory" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"type":"session","id":"b","createdAt":0}\n{"type":"x"}\n')
    assert run("import", "--store", url, str(bad))[0] == 1
    assert "bad.jsonl: line 2: object missing required field `data`" in capsys.readouterr().err
    assert run("import", "--store", "ftp://x", str(bad))[0] == 1
    assert "unsupported store URL" in capsys.readouterr().err
    assert run("import", "--store", url, str(GOLDEN / "edges.events.jsonl"))[0] == 0
    assert run("import", "--store", url, str(GOLDEN / "edges.events.jsonl"))[0] == 1
    assert "session 'edges' already exists" in capsys.readouterr().err


def test_the_console_script_has_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "history_service.cli", "import", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert "session.N.jsonl" in out.stdout and "--store" in out.stdout


def corpus_scenarios() -> list[object]:
    root = corpus_dir()
    if root is None or not root.is_dir():
        return [
            pytest.param(None, marks=pytest.mark.skip(reason="HISTORY_CORPUS_DIR is not set; corpus tests need it"))
        ]
    return [pytest.param(path, id=path.name) for path in sorted(p for p in root.iterdir() if p.is_dir())]


@pytest.mark.parametrize("scenario", corpus_scenarios())
def test_corpus_imports_exports_and_pages_identically_from_every_backend(tmp_path: Path, scenario: Path) -> None:
    logs = {path: read_session_log(path.read_bytes()) for path in sorted(scenario.glob("session*.jsonl"))}
    pages: dict[str, list[list[bytes]]] = {}
    for backend, url in backend_urls(tmp_path).items():
        status, _ = run("import", "--store", url, str(scenario))
        assert status == 0, backend
        for log in logs.values():
            status, exported = run("export", "--store", url, log.header.id)
            assert exported.encode() == encode_lines(log.events), backend
        pages[backend] = anyio.run(_pages, url, list(logs.values()))
    expected = [
        [encode(r) for r in pack_page(log.events[start:])]
        for log in logs.values()
        for start in range(0, len(log.events), max(1, len(log.events) // 5))
    ]
    for backend, got in pages.items():
        assert got == expected, backend


async def _pages(url: str, logs: list) -> list[list[bytes]]:  # type: ignore[type-arg]
    store = await open_store(url)
    try:
        out = []
        for log in logs:
            n = len(log.events)
            for start in range(0, n, max(1, n // 5)):
                out.append(await store.page_records(log.header.id, start, n))
        return out
    finally:
        await store.close()


def test_serve_demo_seeds_once_serves_and_stops_quietly_on_ctrl_c(tmp_path: Path) -> None:
    code = "import sys; from history_service.cli import main; sys.exit(main())"
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
            assert banner[3].split() == ["client:", ".venv/bin/history-client", "follow", base, "demo"]
            wait_healthy(base, process)
            with HistoryClient(base, timeout=30) as client:
                counts.append(len(list(client.iter_history("demo"))))
            assert counts[-1] == int(banner[0].split("(")[1].split()[0])
            process.send_signal(signal.SIGINT)
            assert process.wait(30) == 0
            assert "Traceback" not in process.stderr.read()
    assert counts[0] == counts[1] > 0

"""The repository stands alone and says what it ships: no outside references, a matching LICENSE, make serve's knobs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the tracked files")
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in out.splitlines()]


def test_nothing_cites_a_document_outside_the_repo() -> None:
    """Item 12: the spec is docs/protocol.md; only the Makefile may name the optional corpus path outside."""
    offenders = []
    for path in tracked_files():
        if path.name == "Makefile" or path == Path(__file__).resolve() or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for marker in ("../shared", "DESIGN.md", "DESIGN §"):
            if marker in text:
                offenders.append(f"{path.relative_to(ROOT)}: {marker}")
    assert offenders == []


def test_the_license_file_matches_the_package_metadata() -> None:
    """Item 11."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_serve_passes_port_and_host_through() -> None:
    """Item 5: `make serve PORT=... HOST=...` sets HISTORY_PORT and HISTORY_HOST, and nothing when not given."""

    def dry_run(*args: str) -> str:
        # Run as a fresh make even under `make test`: no inherited flags, no directory banners.
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        command = ["make", "--no-print-directory", "-n", "-o", ".venv/.installed", "serve", *args]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True, env=env)
        return done.stdout.strip().splitlines()[-1]

    assert dry_run("PORT=8123", "HOST=0.0.0.0") == (
        "HISTORY_HOST='0.0.0.0' HISTORY_PORT='8123' .venv/bin/history-service serve --demo"
    )
    assert dry_run() == ".venv/bin/history-service serve --demo"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_serve_installs_the_server_extra_only_and_make_test_adds_dev(tmp_path: Path) -> None:
    """Issue 23: `make serve` installs `[server]` alone; the dev targets add `[dev]` on top, each once."""
    shutil.copy(ROOT / "Makefile", tmp_path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}

    def installs(target: str) -> list[str]:
        command = ["make", "--no-print-directory", "-n", target]
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=True, env=env)
        return [line for line in done.stdout.splitlines() if "pip install -e" in line]

    assert installs("serve") == [".venv/bin/python -m pip install -e '.[server]'"]
    assert installs("unit") == [
        ".venv/bin/python -m pip install -e '.[server]'",
        ".venv/bin/python -m pip install -e '.[dev]'",
    ]
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".installed").touch()
    # After `make serve`: serving installs nothing more, testing adds dev alone.
    assert installs("serve") == []
    assert installs("unit") == installs("lint") == [".venv/bin/python -m pip install -e '.[dev]'"]
    (tmp_path / ".venv" / ".installed-dev").touch()
    # After `make test`: neither reinstalls.
    assert installs("serve") == installs("unit") == installs("lint") == []


def test_the_readme_examples_use_one_base_url() -> None:
    """Item 5: a user changes one line, BASE, to point every example at another port."""
    readme = (ROOT / "README.md").read_text()
    assert "BASE=http://127.0.0.1:8000" in readme
    commands = [
        line
        for line in readme.splitlines()
        if line.lstrip().startswith(("curl ", "history-client", ".venv/bin/history-client"))
    ]
    assert commands and all("$BASE" in line for line in commands), [c for c in commands if "$BASE" not in c]


def test_the_deployment_notes_show_the_gateway_configuration_the_tests_run() -> None:
    """Issue 11: docs/deploy.md holds scripts/nginx.conf.template verbatim."""
    template = (ROOT / "scripts" / "nginx.conf.template").read_text()
    assert template in (ROOT / "docs" / "deploy.md").read_text()


def test_the_gateway_configuration_refuses_metrics() -> None:
    """Issue 23: docs/deploy.md says a gateway must not forward /metrics; the configuration it shows refuses it."""
    template = (ROOT / "scripts" / "nginx.conf.template").read_text()
    assert "location = /metrics {\n            return 404;\n        }" in template
    gateway = os.environ.get("HISTORY_TEST_GATEWAY_URL")
    if gateway:
        # nginx answers itself, whether the upstreams run or not.
        assert httpx.get(f"{gateway}/metrics").status_code == 404

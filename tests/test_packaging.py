"""What a non-editable install gives its user: a client-only install gets the codec and httpx, never
the server stack (pyproject's `server` extra); a server install's wheel carries the viewer and the
JavaScript client it imports (setup.py copies it in), so its viewer renders in Chromium.

This test takes about 5 s (a fresh venv, then a real wheel build and install from pip's cache or
the index; longer on a cold cache). It is worth that because nothing else catches what it guards:
the development venv has the `server` extra installed, so tests/test_layering.py and every other
test pass even when a server dependency slips back into the base `dependencies` or the client
starts importing one. Only a separate, bare environment shows what `pip install history-transport`
gives a client-only user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

from history_service.cli.demo import DEMO_SESSION
from testing.browser import checked_page, launch, missing_reason
from testing.servers import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
JS_CLIENT = ROOT / "clients" / "js" / "src"

# The server extra's distributions, by import name. None of them may be importable after a base install.
SERVER_ONLY = ("sqlalchemy", "starlette", "uvicorn", "psycopg")

PROBE = """
import importlib.resources, importlib.util, json, sys
import codec, history_client
from history_client import AsyncHistoryClient, HistoryClient
print(json.dumps({
    "prefix": sys.prefix,
    "client": history_client.__file__,
    "importable": [name for name in %r if importlib.util.find_spec(name) is not None],
    "viewer": sorted(p.name for p in importlib.resources.files("history_service.viewer").iterdir()),
}))
"""


def run(args: list[str | Path], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH or PYTHONHOME from the caller: the venv must see only what was installed into it.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    return subprocess.run([str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def source_tree(dest: Path) -> Path:
    """Copy what the wheel is built from, so the build's build/ and egg-info stay out of the checkout."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = config["project"]
    dest.mkdir()
    for name in ["pyproject.toml", "setup.py", "MANIFEST.in", project["readme"], *project.get("license-files", [])]:
        shutil.copy2(ROOT / name, dest / name)
    for package in (name for name in config["tool"]["setuptools"]["packages"] if "." not in name):
        shutil.copytree(ROOT / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(JS_CLIENT, dest / JS_CLIENT.relative_to(ROOT))
    return dest


def bare_venv(tmp_path: Path) -> Path:
    """A venv without pip or setuptools, filled by this interpreter's pip through --python; its python."""
    venv = tmp_path / "venv"
    created = run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path, timeout=120)
    if created.returncode != 0:
        pytest.skip(f"cannot create a venv with {sys.executable} -m venv: {created.stderr.strip()}")
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def test_the_base_install_has_the_client_and_no_server_stack(tmp_path):
    python = bare_venv(tmp_path)

    # A non-editable install, so the wheel (its package list, metadata and Requires-Dist) is what is tested.
    installed = run(
        [sys.executable, "-m", "pip", "--python", python, "install", source_tree(tmp_path / "src")], cwd=tmp_path
    )
    assert installed.returncode == 0, f"pip install failed:\n{installed.stdout}\n{installed.stderr}"
    assert "BuildBackendWarning" not in installed.stderr, f"the build warned:\n{installed.stderr}"

    probe = run([python, "-I", "-c", PROBE % (SERVER_ONLY,)], cwd=tmp_path, timeout=120)
    assert probe.returncode == 0, f"history_client does not import in a base install:\n{probe.stderr}"
    found = json.loads(probe.stdout)
    assert Path(found["client"]).is_relative_to(found["prefix"]), f"history_client came from {found['client']}"
    # The wheel carries the viewer's static files (the client package it imports comes from the source tree).
    # So does its vendored Markdown library (vendor/markdown-it.js, package data).
    assert {"index.html", "viewer.js", "timeline.js", "viewer.css", "favicon.svg", "vendor"} <= set(found["viewer"])
    assert found["importable"] == [], (
        f"a base install (no extras) can import {found['importable']}: "
        "server dependencies belong in the `server` extra of pyproject.toml"
    )


def test_a_wheel_install_serves_the_viewer_and_its_javascript_client(tmp_path):
    if missing_reason() is not None:
        pytest.skip(missing_reason() or "")
    from playwright.sync_api import expect

    built = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp_path / "dist", source_tree(tmp_path / "src")],
        cwd=tmp_path,
    )
    assert built.returncode == 0, f"pip wheel failed:\n{built.stdout}\n{built.stderr}"
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {Path(name).name for name in archive.namelist() if name.startswith("history_service/viewer/lib/")}
    assert shipped == {path.name for path in JS_CLIENT.iterdir() if path.is_file()}

    python = bare_venv(tmp_path)
    installed = run([sys.executable, "-m", "pip", "--python", python, "install", f"{wheel}[server]"], cwd=tmp_path)
    assert installed.returncode == 0, f"pip install failed:\n{installed.stdout}\n{installed.stderr}"

    server = ServerProcess(f"sqlite:///{tmp_path / 'wheel.db'}", python=python)
    server.start("--demo")
    try:
        served = httpx.get(f"{server.url}/viewer/lib/index.js")
        assert served.status_code == 200 and served.content == (JS_CLIENT / "index.js").read_bytes()
        with launch() as browser, checked_page(browser, "wheel-install-viewer") as page:
            page.goto(f"{server.url}/viewer/?session={DEMO_SESSION}")
            page.wait_for_selector("html[data-ready='true']", timeout=60_000)
            expect(page.locator("#timeline > .item").first).to_be_visible()
            assert page.locator("#timeline > .item[data-kind='tool-result']").count() > 0
    finally:
        server.stop()

"""Imports point one way (docs/protocol.md §1.3): each package loads only what its layer allows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
before = set(sys.modules)
import {package}
loaded = sorted({{name.split(".")[0] for name in set(sys.modules) - before}})
print(json.dumps([name for name in loaded if name not in sys.stdlib_module_names]))
"""

# The codec is pure: besides the standard library it loads only these (typing_extensions is msgspec's).
CODEC_ALLOWED = {"codec", "msgspec", "typing_extensions", "zstandard", "brotli", "_brotli"}

SERVER_SIDE = {"starlette", "uvicorn", "sqlalchemy", "psycopg", "persistence", "history_service"}

FORBIDDEN = {
    "persistence": {"starlette", "uvicorn", "httpx", "history_service", "history_client"},
    "history_client": SERVER_SIDE,
}


def loaded_by(package: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(package=package)], check=True, capture_output=True, text=True
    )
    return set(json.loads(out.stdout))


def test_codec_loads_only_its_dependencies():
    loaded = loaded_by("codec")
    assert loaded <= CODEC_ALLOWED, f"codec loads {sorted(loaded - CODEC_ALLOWED)}"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_reach_up_the_layers(package):
    loaded = loaded_by(package)
    assert not loaded & FORBIDDEN[package], f"{package} loads {sorted(loaded & FORBIDDEN[package])}"


def test_the_client_loads_only_the_codec_and_httpx_of_our_packages():
    loaded = loaded_by("history_client")
    assert {"codec", "httpx", "history_client"} <= loaded
    assert not loaded & {"persistence", "history_service"}

"""Imports point one way (DESIGN §1): each package loads only what its layer allows."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

# Top-level third-party modules each package may load, besides the standard library.
# typing_extensions is loaded by msgspec itself.
CODEC_DEPENDENCIES = {"msgspec", "typing_extensions", "zstandard", "brotli", "_brotli"}
ALLOWED = {
    "codec": {"codec"} | CODEC_DEPENDENCIES,
}

PROBE = """
import json, sys
before = set(sys.modules)
import {package}
loaded = sorted({{name.split(".")[0] for name in set(sys.modules) - before}})
print(json.dumps([name for name in loaded if name not in sys.stdlib_module_names]))
"""


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_its_layer(package):
    if importlib.util.find_spec(package) is None:
        pytest.fail(f"{package} is not importable")
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(package=package)], check=True, capture_output=True, text=True
    )
    loaded = set(json.loads(out.stdout))
    assert loaded <= ALLOWED[package], f"{package} loads {sorted(loaded - ALLOWED[package])}"

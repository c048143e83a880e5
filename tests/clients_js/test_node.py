"""The JavaScript package's own suite, ``node --test`` in clients/js, as part of the Python run.

The suite starts its own ``history-service`` processes (the executable is passed in
``HISTORY_SERVICE_BIN``) and reads our golden files (``HISTORY_GOLDEN_DIR``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testing.golden import GOLDEN_DIR

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "js"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH (scripts/with-node installs Debian's nodejs)")


def test_the_javascript_suite_passes():
    assert NODE is not None
    service = Path(sys.executable).with_name("history-service")
    env = {**os.environ, "HISTORY_SERVICE_BIN": str(service), "HISTORY_GOLDEN_DIR": str(GOLDEN_DIR)}
    suites = sorted(str(path.relative_to(PACKAGE)) for path in (PACKAGE / "test").glob("*.test.js"))
    assert suites, "no *.test.js files in clients/js/test"
    run = subprocess.run(
        [NODE, "--test", "--test-reporter=spec", *suites],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0, f"node --test failed:\n{report[-20000:]}"
    assert "# fail 0" in report or "ℹ fail 0" in report, report[-5000:]
    assert "skipped 0" in report or "ℹ skipped 0" in report, f"node tests skipped:\n{report[-5000:]}"

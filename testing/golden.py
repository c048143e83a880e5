"""Golden files under tests/golden: compared byte for byte, rewritten with ``HISTORY_WRITE_GOLDEN=1``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import pytest

__all__ = ["GOLDEN_DIR", "GOLDEN_ENV", "check_golden"]

GOLDEN_ENV: Final = "HISTORY_WRITE_GOLDEN"
ROOT: Final = Path(__file__).resolve().parent.parent
GOLDEN_DIR: Final = ROOT / "tests" / "golden"


def check_golden(path: Path, data: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    """Assert that ``data`` is the golden file at ``path``; with ``HISTORY_WRITE_GOLDEN=1``, write it first."""
    if os.environ.get(GOLDEN_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        with capsys.disabled():
            print(f"\n{GOLDEN_ENV}=1: wrote {path.relative_to(ROOT)}")
    assert data == path.read_bytes(), f"{path.relative_to(GOLDEN_DIR)} differs from its golden"

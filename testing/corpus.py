"""The optional corpus of real session logs, found through ``HISTORY_CORPUS_DIR``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import pytest

__all__ = ["CORPUS_ENV", "corpus_dir", "corpus_logs"]

CORPUS_ENV: Final = "HISTORY_CORPUS_DIR"


def corpus_dir() -> Path | None:
    value = os.environ.get(CORPUS_ENV)
    return Path(value) if value else None


def corpus_logs() -> list[object]:
    """One pytest param per corpus log, or a single skipped param that says why."""
    root = corpus_dir()
    if root is None:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS_ENV} is not set; corpus tests need it"))]
    if not root.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS_ENV}={root} is not a directory"))]
    logs = sorted(root.glob("*/session*.jsonl"))
    return [pytest.param(path, id=f"{path.parent.name}/{path.name}") for path in logs]

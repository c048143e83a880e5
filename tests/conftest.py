from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

CORPUS_ENV = "HISTORY_CORPUS_DIR"
GOLDEN_ENV = "HISTORY_WRITE_GOLDEN"
GOLDEN_DIR = Path(__file__).parent / "golden"


class Rand(random.Random):
    """A seeded random source whose repr shows the seed, so a failing test can be rerun."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.seed_value = seed

    def __repr__(self) -> str:
        return f"Rand(seed={self.seed_value})"


@pytest.fixture
def rand() -> Rand:
    return Rand(int(os.environ.get("HISTORY_TEST_SEED", "20261129")))


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


def write_golden() -> bool:
    return os.environ.get(GOLDEN_ENV) == "1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

"""Seeded randomness for tests: the seed comes from ``HISTORY_TEST_SEED`` and shows in the repr."""

from __future__ import annotations

import os
import random
from typing import Final, Self

__all__ = ["DEFAULT_SEED", "SEED_ENV", "Rand"]

SEED_ENV: Final = "HISTORY_TEST_SEED"
DEFAULT_SEED: Final = 20261129


class Rand(random.Random):
    """A seeded random source whose repr shows the seed, so a failing test can be rerun."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.seed_value = seed

    @classmethod
    def from_env(cls) -> Self:
        """Seeded from ``HISTORY_TEST_SEED``, or the fixed default when it is not set."""
        return cls(int(os.environ.get(SEED_ENV, DEFAULT_SEED)))

    def __repr__(self) -> str:
        return f"Rand(seed={self.seed_value})"

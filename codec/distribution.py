"""The installed distribution these packages ship in, for ``--version``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Final

__all__ = ["DISTRIBUTION", "distribution_version"]

DISTRIBUTION: Final = "history-transport"


def distribution_version() -> str:
    """The installed version, or a note that the packages run from a tree that was never installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "(not installed)"

"""Each package's ``__all__`` is sorted, complete, and names only what exists."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = ["codec", "persistence", "history_service", "history_client"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_complete(name):
    package = importlib.import_module(name)
    public = {member for member in vars(package) if not member.startswith("_")}
    modules = {member for member in public if type(getattr(package, member)).__name__ == "module"}
    assert package.__all__ == sorted(package.__all__, key=str.casefold)
    assert set(package.__all__) == public - modules - {"annotations"}

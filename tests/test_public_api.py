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


def test_the_sdk_exports_what_a_write_needs():
    """`create_session` and `append` take codec types; a user imports them from `history_client` alone."""
    codec = importlib.import_module("codec")
    client = importlib.import_module("history_client")
    for name in ["DeltaData", "Event", "ReasoningDelta", "ReplaceOp", "SessionHeader", "TextDelta", "ToolCallDelta"]:
        assert name in client.__all__
        assert getattr(client, name) is getattr(codec, name)
    for method in ["create_session", "append"]:
        assert getattr(client.HistoryClient, method).__doc__
        assert getattr(client.AsyncHistoryClient, method).__doc__

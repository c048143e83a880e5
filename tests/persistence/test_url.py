"""Store URLs: which stores several server processes may share."""

from __future__ import annotations

import pytest

from persistence.url import shareable_across_workers


@pytest.mark.parametrize(
    ("url", "shared"),
    [
        ("postgresql+psycopg://u@h/db", True),
        ("postgresql://u@h/db", True),
        ("POSTGRES://u@h/db", True),
        ("sqlite:///h.db", True),
        ("sqlite:////var/lib/h.db?timeout=5", True),
        ("jsonl:///logs", True),
        ("jsonl:///logs?compression=zstd", True),
        ("sqlite://", False),
        ("sqlite:///:memory:", False),
        ("sqlite:relative.db", False),
        ("memory://", False),
    ],
)
def test_only_a_store_that_tells_every_process_of_writes_is_shared(url: str, shared: bool) -> None:
    assert shareable_across_workers(url) is shared

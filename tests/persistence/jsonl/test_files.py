"""The session lock of `persistence.jsonl.files`: a gate that orders waiting writers before new readers."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from persistence.jsonl.files import GATE_NAME, LOCK_NAME, acquire
from testing.flocks import held, hold


@pytest.mark.parametrize("shared", [False, True])
def test_a_try_fails_at_once_while_someone_waits_at_the_gate(tmp_path: Path, shared: bool) -> None:
    # Another process's writer keeps the gate while it waits for the lock: no one may pass it.
    gate = hold(tmp_path / GATE_NAME, fcntl.LOCK_EX)
    try:
        with pytest.raises(BlockingIOError):
            acquire(tmp_path, "s", shared=shared, wait=False)
        assert not held(tmp_path / LOCK_NAME)
    finally:
        os.close(gate)


def test_an_exclusive_try_fails_at_once_on_a_lock_readers_share_and_keeps_nothing(tmp_path: Path) -> None:
    reader = hold(tmp_path / LOCK_NAME, fcntl.LOCK_SH)
    try:
        with pytest.raises(BlockingIOError):
            acquire(tmp_path, "s", wait=False)
    finally:
        os.close(reader)
    assert not held(tmp_path / GATE_NAME) and not held(tmp_path / LOCK_NAME)


def test_a_try_takes_a_free_lock_and_lets_the_gate_go(tmp_path: Path) -> None:
    lock = acquire(tmp_path, "s", wait=False)
    assert held(tmp_path / LOCK_NAME) and not held(tmp_path / GATE_NAME)
    lock.release()
    assert not held(tmp_path / LOCK_NAME)
    with acquire(tmp_path, "s", shared=True), acquire(tmp_path, "s", shared=True, wait=False):
        assert held(tmp_path / LOCK_NAME)
    assert not held(tmp_path / LOCK_NAME)

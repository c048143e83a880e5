"""The session lock of `persistence.jsonl.files`: a gate that orders waiting writers before new readers."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from persistence.jsonl.files import GATE_NAME, LOCK_NAME, acquire
from testing.flocks import held, hold


def test_an_exclusive_try_takes_a_free_lock_without_the_gate(tmp_path: Path) -> None:
    # Another process's writer keeps the gate on its way to the lock.
    gate = hold(tmp_path / GATE_NAME, fcntl.LOCK_EX)
    try:
        lock = acquire(tmp_path, "s", wait=False)
        assert held(tmp_path / LOCK_NAME)
        lock.release()
        assert not held(tmp_path / LOCK_NAME)
    finally:
        os.close(gate)


def test_an_exclusive_try_fails_at_once_on_a_lock_readers_share(tmp_path: Path) -> None:
    reader = hold(tmp_path / LOCK_NAME, fcntl.LOCK_SH)
    try:
        with pytest.raises(BlockingIOError):
            acquire(tmp_path, "s", wait=False)
    finally:
        os.close(reader)
    assert not held(tmp_path / GATE_NAME) and not held(tmp_path / LOCK_NAME)


def test_readers_still_wait_at_the_gate(tmp_path: Path) -> None:
    gate = hold(tmp_path / GATE_NAME, fcntl.LOCK_EX)
    try:
        with pytest.raises(BlockingIOError):
            acquire(tmp_path, "s", shared=True, wait=False)
    finally:
        os.close(gate)
    with acquire(tmp_path, "s", shared=True), acquire(tmp_path, "s", shared=True, wait=False):
        assert held(tmp_path / LOCK_NAME)
    assert not held(tmp_path / LOCK_NAME)

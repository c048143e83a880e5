from __future__ import annotations

import threading

import anyio
import pytest

from persistence.call_bound import Outstanding, in_thread
from persistence.errors import StoreError

pytestmark = pytest.mark.anyio


async def test_a_call_its_caller_gave_up_on_is_outstanding_until_it_ends() -> None:
    outstanding = Outstanding()
    release = threading.Event()
    with pytest.raises(StoreError, match="no answer within"):
        await in_thread(0.05, release.wait, outstanding=outstanding)
    # The caller is gone; the work is not, and a close waiting for it would wait on.
    assert not outstanding.wait(0.01)
    release.set()
    assert await anyio.to_thread.run_sync(outstanding.wait, 30)


async def test_a_call_that_ends_is_no_longer_outstanding_whatever_it_raised() -> None:
    outstanding = Outstanding()

    def fails() -> None:
        raise ValueError("no")

    assert await in_thread(None, lambda: 7, outstanding=outstanding) == 7
    with pytest.raises(ValueError):
        await in_thread(None, fails, outstanding=outstanding)
    assert outstanding.wait(0)

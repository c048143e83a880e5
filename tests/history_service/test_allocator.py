"""`history_service.allocator`: after a burst has drained, freed memory goes back to the system."""

from __future__ import annotations

import platform

import anyio
import pytest

from history_service.allocator import Trimmer, fix_mmap_threshold

pytestmark = pytest.mark.anyio

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="malloc_trim and mallopt are glibc's")
async def test_a_trim_follows_a_drained_burst_and_never_runs_while_many_bytes_are_held() -> None:
    assert fix_mmap_threshold()
    trimmer = Trimmer(every=100, interval=0.01)
    drained, held = [0], [0]
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(trimmer.run, lambda: drained[0], lambda: held[0])
        await anyio.sleep(0.05)
        assert trimmer.trims == 0  # nothing went through yet
        drained[0], held[0] = 500, 50
        await anyio.sleep(0.05)
        assert trimmer.trims == 0  # half a burst's worth is still held
        held[0] = 10  # a slow reader's few bytes do not keep the memory
        with anyio.fail_after(30):
            while trimmer.trims == 0:
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)
        assert trimmer.trims == 1  # one trim per burst, not one per look
        tasks.cancel_scope.cancel()

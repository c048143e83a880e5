"""A sampling profile of a server process while a cell runs: py-spy's raw stacks, folded into shares.

py-spy is not a dependency: ``HISTORY_PY_SPY`` names its binary (``pip install py-spy`` in a
venv of your own). `Profile` records the event loop's thread (``MainThread``) and says, for
the frames seen most, which share of its samples were in them (inclusive) and which share
ended there (self).
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["Profile", "shares"]


def _frame(text: str) -> str:
    """``function (file.py:line)`` as ``function (file.py)``: lines apart are one frame."""
    name, _, where = text.partition(" (")
    return f"{name} ({where.split(':')[0]})" if where else name


def shares(raw: str, *, thread: str = "MainThread", top: int = 30) -> dict[str, Any]:
    """The folded stacks of ``thread`` in py-spy's raw output: samples, and the ``top`` frames by both shares."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or thread not in frames[0]:
            continue
        samples = int(count)
        total += samples
        for frame in {_frame(frame) for frame in frames[1:]}:
            inclusive[frame] += samples
        own[_frame(frames[-1])] += samples
    if not total:
        return {"samples": 0, "inclusive": [], "self": []}
    return {
        "samples": total,
        "inclusive": [[round(n / total, 3), frame] for frame, n in inclusive.most_common(top)],
        "self": [[round(n / total, 3), frame] for frame, n in own.most_common(top)],
    }


class Profile:
    """py-spy recording ``pid`` for ``seconds`` at ``rate`` Hz into ``out``; `result` once it has stopped."""

    def __init__(self, py_spy: str, pid: int, out: Path, *, seconds: float, rate: int = 250) -> None:
        self.out = out
        args = [py_spy, "record", "-p", str(pid), "-r", str(rate), "-d", str(max(1, round(seconds)))]
        args += ["-f", "raw", "-o", str(out), "--threads", "--nonblocking"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def result(self) -> dict[str, Any]:
        self.process.wait(120)
        return shares(self.out.read_text() if self.out.exists() else "")

"""The Durable Streams conformance suite, run against a server: every test's outcome, from vitest's JSON report.

The suite (``@durable-streams/server-conformance-tests``) is pinned in ``scripts/tools`` and
run by ``scripts/tools/ds-conformance.test.mjs``, which ``scripts/with-node`` installs and
names in ``HISTORY_DS_CONFORMANCE``. A test that did not pass, skipped ones included, is
listed with its message, so a caller can fail on any of them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

import msgspec

__all__ = ["RUNNER", "Outcome", "Report", "parse_report", "run_suite"]

RUNNER: Final = os.environ.get("HISTORY_DS_CONFORMANCE")


class Outcome(msgspec.Struct, frozen=True):
    """One conformance test: its full name (its groups, then its title), vitest's status, and why it failed."""

    name: str
    status: str
    message: str = ""


class Report(msgspec.Struct, frozen=True):
    outcomes: tuple[Outcome, ...]

    @property
    def passed(self) -> int:
        return sum(outcome.status == "passed" for outcome in self.outcomes)

    @property
    def missed(self) -> tuple[Outcome, ...]:
        """Every test that did not pass: failed, skipped, pending or todo."""
        return tuple(outcome for outcome in self.outcomes if outcome.status != "passed")


class _Assertion(msgspec.Struct):
    ancestorTitles: list[str]
    title: str
    status: str
    failureMessages: list[str] = []


class _File(msgspec.Struct):
    assertionResults: list[_Assertion]
    message: str = ""


class _Vitest(msgspec.Struct):
    numTotalTests: int
    testResults: list[_File]


def parse_report(data: bytes) -> Report:
    """The outcomes in vitest's ``--reporter=json`` output; raises when a file failed to load or a count is off."""
    report = msgspec.json.decode(data, type=_Vitest)
    outcomes = []
    for file in report.testResults:
        if file.message and not file.assertionResults:
            raise RuntimeError(f"the conformance suite did not load: {file.message[:500]}")
        for test in file.assertionResults:
            name = " > ".join([*test.ancestorTitles, test.title])
            message = test.failureMessages[0].split("\n", 1)[0][:300] if test.failureMessages else ""
            outcomes.append(Outcome(name, test.status, message))
    if len(outcomes) != report.numTotalTests:
        raise RuntimeError(f"vitest counted {report.numTotalTests} tests but reported {len(outcomes)}")
    return Report(tuple(outcomes))


def run_suite(
    base_url: str,
    *,
    subscriptions: bool = True,
    long_poll_ms: int | None = None,
    runner: str | None = RUNNER,
    timeout: float = 900,
) -> Report:
    """Run the whole suite against ``base_url`` (a stream server's root, such as ``http://127.0.0.1:8080/ds``).

    ``long_poll_ms`` is the server's long-poll timeout when it is not the suite's default of
    20 s: the suite waits that long, and a second more, for a long-poll to time out.
    """
    if runner is None:
        raise RuntimeError("HISTORY_DS_CONFORMANCE is not set; run under scripts/with-node")
    folder = Path(runner).parent
    vitest = folder / "node_modules" / ".bin" / "vitest"
    if shutil.which("node") is None or not vitest.exists():
        raise RuntimeError(f"node or {vitest} is missing; run under scripts/with-node")
    env = {**os.environ, "DS_BASE_URL": base_url, "DS_SUBSCRIPTIONS": "1" if subscriptions else "0"}
    if long_poll_ms is not None:
        env["DS_LONG_POLL_MS"] = str(long_poll_ms)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "report.json"
        done = subprocess.run(
            [str(vitest), "run", Path(runner).name, "--reporter=json", f"--outputFile={out}"],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
        if not out.exists():
            raise RuntimeError(f"vitest exited {done.returncode} without a report: {done.stderr[-2000:]!r}")
        return parse_report(out.read_bytes())

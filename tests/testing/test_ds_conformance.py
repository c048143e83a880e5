"""The conformance harness finds and reports every test of the pinned Durable Streams suite."""

from __future__ import annotations

import os

import msgspec
import pytest

from testing.ds_conformance import RUNNER, Outcome, parse_report, run_suite
from testing.servers import ds_reference_server

REFERENCE = os.environ.get("HISTORY_DS_REFERENCE")
# The size of the pinned suite, 0.3.6 (scripts/tools/package.json), with its subscription tests.
SUITE_TESTS = 338


def vitest_json(*tests: tuple[list[str], str, str, list[str]], total: int | None = None, message: str = "") -> bytes:
    results = [
        {"ancestorTitles": groups, "title": title, "status": status, "failureMessages": failures}
        for groups, title, status, failures in tests
    ]
    body = {"numTotalTests": len(results) if total is None else total, "testResults": [{"assertionResults": results}]}
    if message:
        body["testResults"] = [{"assertionResults": [], "message": message}]
    return msgspec.json.encode(body)


def test_a_report_names_each_test_by_its_groups_and_lists_what_did_not_pass() -> None:
    report = parse_report(
        vitest_json(
            (["Basic"], "creates a stream", "passed", []),
            (["TTL", "sliding"], "extends on read", "failed", ["AssertionError: expected 404 to be 200\n  at x.js:1"]),
            ([], "opt-in", "skipped", []),
        )
    )
    assert report.passed == 1
    assert report.missed == (
        Outcome("TTL > sliding > extends on read", "failed", "AssertionError: expected 404 to be 200"),
        Outcome("opt-in", "skipped"),
    )


def test_a_suite_that_did_not_load_or_lost_tests_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="did not load"):
        parse_report(vitest_json(message="Cannot find package"))
    with pytest.raises(RuntimeError, match="counted 2"):
        parse_report(vitest_json(([], "one", "passed", []), total=2))


@pytest.mark.skipif(
    RUNNER is None or REFERENCE is None, reason="the pinned suite and reference server need scripts/with-node"
)
def test_the_harness_runs_every_test_of_the_pinned_suite() -> None:
    peer = ds_reference_server(REFERENCE or "")
    try:
        report = run_suite(peer.url, subscriptions=True)
    finally:
        peer.stop()
    assert len(report.outcomes) == SUITE_TESTS
    assert len({outcome.name for outcome in report.outcomes}) == SUITE_TESTS
    assert {outcome.status for outcome in report.outcomes} <= {"passed", "failed"}
    assert Outcome("Basic Stream Operations > should create a stream", "passed") in report.outcomes

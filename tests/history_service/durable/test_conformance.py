"""The pinned Durable Streams conformance suite against our own server, as a process, on SQLite and on PostgreSQL.

Every test of the suite must pass, the subscription tests included (their webhooks go to a
receiver the suite runs on 127.0.0.1): a failed or skipped one fails here, named.
"""

from __future__ import annotations

import anyio
import pytest

from testing.ds_conformance import RUNNER, run_suite
from testing.postgres import PG_URL, empty_postgres
from testing.servers import ServerProcess

# The size of the pinned suite, 0.3.6 (scripts/tools/package.json), with its subscription tests.
SUITE_TESTS = 338
# The server's long-poll timeout for the run: the suite's own default (20 s) would make its
# long-poll timeout tests take that long each.
LONG_POLL_S = 3

needs_suite = pytest.mark.skipif(RUNNER is None, reason="the pinned suite needs scripts/with-node")


def conformance(store_url: str) -> None:
    # The suite's webhook receiver listens on 127.0.0.1, which a webhook reaches only where allowed.
    env = {"HISTORY_DS_LONG_POLL": str(LONG_POLL_S), "HISTORY_DS_WEBHOOK_LOOPBACK": "1"}
    server = ServerProcess(store_url, env=env)
    server.start()
    try:
        report = run_suite(f"{server.url}/ds", subscriptions=True, long_poll_ms=LONG_POLL_S * 1000)
    finally:
        server.stop()
    assert len(report.outcomes) == SUITE_TESTS
    assert [f"{o.status}: {o.name}: {o.message}" for o in report.missed] == []


@needs_suite
def test_every_conformance_test_passes_on_sqlite(tmp_path):
    conformance(f"sqlite:///{tmp_path / 'ds.db'}")


@needs_suite
@pytest.mark.skipif(PG_URL is None, reason="HISTORY_TEST_PG_URL is not set (scripts/with-postgres sets it)")
def test_every_conformance_test_passes_on_postgresql():
    assert PG_URL is not None
    anyio.run(empty_postgres, PG_URL)
    conformance(PG_URL)

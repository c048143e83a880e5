"""What each pytest-xdist worker has of its own, for tests/ and bench/ alike: a PostgreSQL database.

Ports, files (tmp_path) and browsers are already per test; the database server is shared, so each
worker works in a database made for it here and dropped when it ends (testing/postgres.py).
"""

from __future__ import annotations

import pytest

from testing.postgres import create_worker_database, drop_worker_database


def pytest_configure(config: pytest.Config) -> None:
    create_worker_database()


def pytest_unconfigure(config: pytest.Config) -> None:
    drop_worker_database()

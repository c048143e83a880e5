from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from persistence.base import HistoryStore
from testing.rand import Rand
from testing.stores import BACKENDS, open_backend

DEFAULT_PORT = 8000

# The suite's longest tests, each a minute or near it on CI where most take well under a second. They run
# first, so that pytest-xdist gives them to different workers while the short tests fill the gaps; last in
# collection order (tests/testing/ is), one of them kept one worker busy after the other had finished.
LONGEST_FIRST = (
    "tests/history_service/durable/test_conformance.py",
    "tests/clients_js/test_node.py",
    "tests/testing/test_ds_conformance.py",
    "tests/history_service/test_write_lives.py",
    "tests/test_packaging.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session", autouse=True)
def default_port_taken() -> Iterator[None]:
    """127.0.0.1:8000, the service's default port, is in use for the whole run.

    A test that reaches for the default port, instead of one it chose free, then fails on every
    machine, and not only on one where something else happens to listen there. When something
    already does (another server, another xdist worker), it stays as it is.
    """
    holder = socket.socket()
    with contextlib.closing(holder):
        with contextlib.suppress(OSError):
            holder.bind(("127.0.0.1", DEFAULT_PORT))
            holder.listen()
        yield


@pytest.fixture
def rand() -> Rand:
    return Rand.from_env()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HistoryStore]:
    """An empty store of each backend in turn (PostgreSQL only with ``HISTORY_TEST_PG_URL``)."""
    opened = await open_backend(request.param, tmp_path)
    try:
        yield opened
    finally:
        await opened.close()

"""The SQL store's kept readers (persistence/sql/reads.py): a reader that died while kept costs no read."""

from __future__ import annotations

from pathlib import Path

import pytest

from codec import SessionHeader
from persistence import SessionNotFoundError
from persistence.sql import SqlStore

pytestmark = pytest.mark.anyio


async def test_a_kept_reader_that_died_is_replaced_and_the_read_still_answers(tmp_path: Path) -> None:
    store = await SqlStore.open(f"sqlite:///{tmp_path / 'reads.db'}")
    try:
        await store.create_session(SessionHeader(id="s", createdAt=1))
        assert (await store.get_session("s")).head_seq == -1
        kept = [connection for connection, _ in store._backend.readers.connections]
        assert kept
        for connection in kept:
            connection.close()  # as a server restart leaves them: unusable, and not yet known to be
        assert (await store.get_session("s")).head_seq == -1
        assert all(connection not in kept for connection, _ in store._backend.readers.connections)
    finally:
        await store.close()


async def test_a_refusal_on_a_sound_reader_is_the_stores_own(tmp_path: Path) -> None:
    store = await SqlStore.open(f"sqlite:///{tmp_path / 'reads.db'}")
    try:
        await store.create_session(SessionHeader(id="s", createdAt=1))
        await store.get_session("s")
        with pytest.raises(SessionNotFoundError):
            await store.get_session("nope")
        assert store._backend.readers.connections  # the reader that answered it is kept
    finally:
        await store.close()


class _Connection:
    closed = False

    def close(self) -> None:
        self.closed = True


async def test_a_read_that_ends_after_the_store_closed_closes_its_connection(tmp_path: Path) -> None:
    """A read its caller gave up on may end after the store closed: its connection is not kept, unclosed, for ever."""
    store = await SqlStore.open(f"sqlite:///{tmp_path / 'h.db'}")
    await store.close()
    late = _Connection()
    store._backend.readers.keep(late, 0)
    assert late.closed and store._backend.readers.connections == []

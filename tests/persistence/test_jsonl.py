"""JSONL store: crash recovery, the sidecar index, the log format and path safety."""

from __future__ import annotations

from pathlib import Path

import pytest

from codec import SessionHeader, encode, pack_page, read_session_log
from history_service.scenarios import multi_turn
from persistence.errors import InvalidSessionIdError, SchemaVersionError, StoreError
from persistence.jsonl import INDEX_NAME, JsonlStore, encode_segment
from tests.codec.helpers import plain
from tests.conftest import corpus_logs

pytestmark = pytest.mark.anyio

HEADER = SessionHeader(id="s1", createdAt=1_700_000_000_000)


def log_name(compression: str) -> str:
    return "session.jsonl.zst" if compression == "zstd" else "session.jsonl"


@pytest.fixture(params=["none", "zstd"])
def compression(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_log_is_the_deepseek_harness_line_format(tmp_path: Path) -> None:
    events = multi_turn(seed=1, turns=2)
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    await store.append("s1", events[:30])
    await store.append("s1", events[30:])
    data = (tmp_path / "s1" / "session.jsonl").read_bytes()
    assert data.startswith(b'{"type":"session","version":0,"id":"s1",')
    assert b'"type":"text-chunks","seq0":' in data or b'"type":"reasoning-chunks","seq0":' in data
    log = read_session_log(data)
    assert log.header == HEADER and log.events == events


async def test_truncation_anywhere_in_the_last_batch_cuts_it_whole(tmp_path: Path, compression: str) -> None:
    events = multi_turn(seed=2, turns=2, max_run=8)
    first, last = events[:-6], events[-6:]
    root = tmp_path / "root"
    store = await JsonlStore.open(root, compression=compression)
    await store.create_session(HEADER)
    await store.append("s1", first[:40])
    await store.append("s1", first[40:])
    log = root / "s1" / log_name(compression)
    committed = log.stat().st_size
    await store.append("s1", last)
    full_log, full_index = log.read_bytes(), (root / "s1" / INDEX_NAME).read_bytes()
    assert len(full_log) > committed
    for cut in range(committed, len(full_log)):
        log.write_bytes(full_log[:cut])
        (root / "s1" / INDEX_NAME).write_bytes(full_index)
        reopened = await JsonlStore.open(root, compression=compression)
        assert await reopened.head_seq("s1") == len(first) - 1, cut
        assert await reopened.read_events("s1", 0, len(events)) == first, cut
        assert log.stat().st_size == committed, cut
        await reopened.append("s1", last)
        assert await reopened.read_events("s1", 0, len(events)) == events, cut


async def test_torn_index_line_is_dropped_with_its_batch(tmp_path: Path, compression: str) -> None:
    store = await JsonlStore.open(tmp_path, compression=compression)
    await store.create_session(HEADER)
    await store.append("s1", [plain(0), plain(1)])
    index = tmp_path / "s1" / INDEX_NAME
    log = tmp_path / "s1" / log_name(compression)
    before_index, before_log = index.read_bytes(), log.read_bytes()
    await store.append("s1", [plain(2)])
    after_index = index.read_bytes()
    # Crash while writing the index entry: the log was not yet touched.
    for cut in range(len(before_index), len(after_index) - 1):
        index.write_bytes(after_index[:cut])
        log.write_bytes(before_log)
        reopened = await JsonlStore.open(tmp_path, compression=compression)
        assert await reopened.read_events("s1", 0, 5) == [plain(0), plain(1)]
        assert index.read_bytes() == before_index


async def test_missing_index_is_rebuilt_from_the_log(tmp_path: Path, compression: str) -> None:
    events = multi_turn(seed=3, turns=3)
    store = await JsonlStore.open(tmp_path, compression=compression)
    await store.create_session(HEADER)
    for start in range(0, len(events), 50):
        await store.append("s1", events[start : start + 50])
    expected_cuts = await store.page_cuts("s1", to_seq=len(events), max_messages=3)
    (tmp_path / "s1" / INDEX_NAME).unlink()
    reopened = await JsonlStore.open(tmp_path, compression=compression)
    assert await reopened.read_events("s1", 0, len(events)) == events
    assert await reopened.page_cuts("s1", to_seq=len(events), max_messages=3) == expected_cuts
    assert (tmp_path / "s1" / INDEX_NAME).exists()
    await reopened.append("s1", [plain(len(events))])
    assert await reopened.head_seq("s1") == len(events)


async def test_unreadable_index_is_rebuilt_and_the_log_wins(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    await store.append("s1", [plain(0), plain(1)])
    (tmp_path / "s1" / INDEX_NAME).write_bytes(b'{"version":1,"compression":"none","headerEnd":3}\n[oops\n')
    reopened = await JsonlStore.open(tmp_path)
    assert await reopened.read_events("s1", 0, 2) == [plain(0), plain(1)]


async def test_lines_after_the_index_are_kept_and_a_torn_line_is_cut(tmp_path: Path) -> None:
    store = await JsonlStore.open(tmp_path)
    await store.create_session(HEADER)
    await store.append("s1", [plain(0)])
    log = tmp_path / "s1" / "session.jsonl"
    with open(log, "ab") as handle:
        handle.write(encode(plain(1)) + b"\n" + encode(plain(2))[:10])
    reopened = await JsonlStore.open(tmp_path)
    assert await reopened.read_events("s1", 0, 3) == [plain(0), plain(1)]
    assert log.read_bytes().endswith(encode(plain(1)) + b"\n")


async def test_a_second_store_sees_appends_from_the_first(tmp_path: Path) -> None:
    writer = await JsonlStore.open(tmp_path)
    reader = await JsonlStore.open(tmp_path)
    await writer.create_session(HEADER)
    await writer.append("s1", [plain(0)])
    assert await reader.read_events("s1", 0, 1) == [plain(0)]
    await writer.append("s1", [plain(1)])
    assert await reader.head_seq("s1") == 1
    await reader.append("s1", [plain(2)])
    assert await writer.read_events("s1", 0, 3) == [plain(0), plain(1), plain(2)]


def test_segments_never_escape_the_root() -> None:
    for session_id in ["..", ".", "a/../../etc", "/abs", "a\\b", "\x00", "~", "é", "😀"]:
        name = encode_segment(session_id)
        assert "/" not in name and "\\" not in name and not name.startswith(".") and "\x00" not in name
    assert encode_segment("..") == "~002E~002E"
    assert encode_segment("😀") == "~D83D~DE00"
    assert encode_segment("abc-DEF_09") == "abc-DEF_09"
    with pytest.raises(InvalidSessionIdError):
        encode_segment("é" * 60)


async def test_root_keeps_its_compression_and_format(tmp_path: Path) -> None:
    await JsonlStore.open(tmp_path, compression="zstd")
    with pytest.raises(StoreError, match="holds compression=zstd logs"):
        await JsonlStore.open(tmp_path)
    (tmp_path / ".history-store.json").write_bytes(b'{"format":9,"compression":"zstd"}')
    with pytest.raises(SchemaVersionError, match="format 9"):
        await JsonlStore.open(tmp_path, compression="zstd")
    with pytest.raises(StoreError, match="unknown JSONL compression"):
        await JsonlStore.open(tmp_path / "other", compression="lz4")


FOREIGN = (
    b'{"type":"session","id":"fx","createdAt":5,"cwd":"{{cwd}}"}\n'
    b'{"type":"turn/start","data":{"turn":1}}\n'
    b'{"type":"user/message","data":{"id":"u","content":[]},"surfaceOp":"append"}\n'
    b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[4,-1],"texts":["a","b","c"]}}\n'
    b'{"type":"assistant/message","data":{"m":1},"sourceEventSeqs":[2,3,4],"surfaceOp":"append"}\n'
)


async def test_a_log_placed_in_the_root_is_served_as_is(tmp_path: Path) -> None:
    (tmp_path / "fx").mkdir()
    (tmp_path / "fx" / "session.jsonl").write_bytes(FOREIGN)
    store = await JsonlStore.open(tmp_path)
    events = read_session_log(FOREIGN).events
    info = await store.get_session("fx")
    assert info.head_seq == len(events) - 1 and info.owner == "local"
    assert await store.read_events("fx", 0, len(events)) == events
    assert await store.page_records("fx", 0, len(events)) == [encode(r) for r in pack_page(events)]
    assert await store.page_cuts("fx", to_seq=len(events), max_messages=1) == [2]
    assert (tmp_path / "fx" / "session.jsonl").read_bytes() == FOREIGN


@pytest.mark.parametrize("path", corpus_logs())
async def test_corpus_log_in_a_store_root_is_served_exactly(tmp_path: Path, path: Path) -> None:
    data = path.read_bytes()
    log = read_session_log(data)
    directory = tmp_path / encode_segment(log.header.id)
    directory.mkdir()
    (directory / "session.jsonl").write_bytes(data)
    store = await JsonlStore.open(tmp_path)
    n = len(log.events)
    assert await store.read_events(log.header.id, 0, n) == log.events
    for start in range(0, n, max(1, n // 7)):
        expected = [encode(r) for r in pack_page(log.events[start:n])]
        assert await store.page_records(log.header.id, start, n) == expected

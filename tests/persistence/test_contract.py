"""The store contract, run against every backend (see testing.stores.BACKENDS)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from codec import (
    Event,
    ReplaceOp,
    SessionHeader,
    decode_event,
    encode,
    expand_records,
    pack,
    pack_page,
    splice,
    stored_record,
)
from history_service.pages import choose_body
from history_service.scenarios import compaction, multi_turn
from persistence.base import DEFAULT_OWNER, TOUCH_MS, HistoryStore, PageRead, SessionKey, SessionSummary
from persistence.clock import now_ms
from persistence.errors import SeqConflictError, SessionClosedError, SessionExistsError, SessionNotFoundError
from persistence.rules import Life
from persistence.sealing import SINGLES
from persistence.synopsis import MAX_TITLE, Synopsis, synopsis_of
from persistence.url import open_store
from testing.events import chunk_event, plain, text
from testing.stores import backend_url, page_records

pytestmark = pytest.mark.anyio


def header(session_id: str = "s1", **extra: object) -> SessionHeader:
    return SessionHeader(id=session_id, createdAt=1_700_000_000_000, **extra)  # type: ignore[arg-type]


async def write(store: HistoryStore, events: Sequence[Event], sizes: Sequence[int], session_id: str = "s1") -> None:
    await store.create_session(header(session_id))
    start = 0
    for size in sizes:
        if start >= len(events):
            break
        await store.append(session_id, events[start : start + size])
        start += size
    if start < len(events):
        await store.append(session_id, events[start:])


def random_sizes(rand: random.Random, total: int) -> list[int]:
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(rand.choice([1, 2, 3, 5, 17, 64, 300]))
    return sizes


# Sessions and headers.


async def test_create_and_get_session(store: HistoryStore) -> None:
    info = await store.create_session(header(cwd="/w"), owner="alice")
    assert (info.owner, info.head_seq) == ("alice", -1)
    got = await store.get_session("s1")
    assert got.header == info.header and got.owner == "alice" and got.head_seq == -1
    assert msgspec.structs.replace(got.header, incarnation=msgspec.UNSET) == header(cwd="/w")


async def test_duplicate_session_is_refused(store: HistoryStore) -> None:
    await store.create_session(header())
    with pytest.raises(SessionExistsError):
        await store.create_session(header())


async def test_unknown_session_raises_not_found_everywhere(store: HistoryStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.get_session("nope")
    with pytest.raises(SessionNotFoundError):
        await store.append("nope", [plain(0)])
    with pytest.raises(SessionNotFoundError):
        await store.read_events("nope", 0, 1)
    with pytest.raises(SessionNotFoundError):
        await store.read_stored("nope", 0, 1)
    with pytest.raises(SessionNotFoundError):
        await store.page_cuts("nope", to_seq=0, max_messages=50)
    with pytest.raises(SessionNotFoundError):
        await store.head_seq("nope")


async def test_empty_session(store: HistoryStore) -> None:
    await store.create_session(header())
    assert await store.head_seq("s1") == -1
    assert await store.read_events("s1", 0, 0) == []
    assert await store.read_stored("s1", 0, 0) == []
    assert await store.page_cuts("s1", to_seq=0, max_messages=50) == [0]
    result = await store.append("s1", [])
    assert result.head_seq == -1


async def test_ids_with_unusual_characters_are_kept_apart(store: HistoryStore) -> None:
    ids = ["a/b", "a~b", "..", ".", "A", "a", "ü", "x" * 200, "sp ace"]
    for i, session_id in enumerate(ids):
        await store.create_session(header(session_id))
        await store.append(session_id, [plain(0, data={"n": i})])
    for i, session_id in enumerate(ids):
        assert (await store.read_events(session_id, 0, 1))[0].data == {"n": i}


# Appends.


async def test_append_returns_the_new_head(store: HistoryStore) -> None:
    await store.create_session(header())
    result = await store.append("s1", [plain(0), plain(1)])
    assert (result.first_seq, result.head_seq, result.idempotent) == (0, 1, False)
    assert (await store.append("s1", [plain(2)])).head_seq == 2


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ([plain(3)], "batch starts at seq 3 but the session head is 1; expected 2"),
        ([plain(2), plain(4)], r"events\[1\]\.seq is 4, expected 3"),
        ([plain(1), plain(2)], "batch starts at seq 1 but the session head is 1"),
        ([plain(1, data={"other": True})], "differs from the stored events"),
        ([plain(0), plain(1, data={"other": True})], "differs from the stored events"),
    ],
    ids=["gap", "not-dense", "partial-overlap", "changed-content", "changed-tail"],
)
async def test_append_conflicts_carry_the_head(store: HistoryStore, batch: list[Event], message: str) -> None:
    await store.create_session(header())
    await store.append("s1", [plain(0), plain(1)])
    with pytest.raises(SeqConflictError, match=message) as caught:
        await store.append("s1", batch)
    assert caught.value.head_seq == 1
    assert await store.head_seq("s1") == 1


async def test_exact_resend_is_idempotent(store: HistoryStore) -> None:
    events = multi_turn(seed=3, turns=2)
    await store.create_session(header())
    await store.append("s1", events[:40])
    await store.append("s1", events[40:90])
    again = await store.append("s1", events[40:90])
    assert again.idempotent and again.head_seq == 89
    older = await store.append("s1", events[10:20])
    assert older.idempotent and older.head_seq == 89
    assert await store.read_events("s1", 0, 90) == events[:90]


# Expiry (docs/protocol.md §6.5): the store says which sessions have expired at a time it is given.

HOUR = 3_600_000


async def later_than(at: int) -> None:
    """Wait until the store's clock (and a file system's coarser one) has passed ``at``."""
    while now_ms() <= at + 20:
        await anyio.sleep(0.005)


async def test_expired_sessions_are_those_past_their_expires_at_or_the_retention(store: HistoryStore) -> None:
    created = [
        await store.create_session(header("soon", expiresAt=2_000_000_000_000)),
        await store.create_session(header("late", expiresAt=2_000_000_500_000)),
        await store.create_session(header("kept")),
    ]
    touched = [info.touched_at for info in created]
    assert all(at > 0 for at in touched)
    assert [(await store.get_session(info.header.id)).touched_at for info in created] == touched
    assert await store.expired(now=1_999_999_999_999, retention_ms=None, limit=None) == []
    assert await store.expired(now=2_000_000_000_000, retention_ms=None, limit=None) == ["soon"]
    assert sorted(await store.expired(now=2_000_000_500_000, retention_ms=None, limit=None)) == ["late", "soon"]
    # The retention counts from each session's last write; a session's own expiresAt wins when sooner.
    assert await store.expired(now=min(touched) + HOUR - 1, retention_ms=HOUR, limit=None) == []
    now = max(touched) + HOUR
    assert sorted(await store.expired(now=now, retention_ms=HOUR, limit=None)) == ["kept", "late", "soon"]
    assert len(await store.expired(now=now, retention_ms=HOUR, limit=2)) == 2
    assert await store.expired(now=now, retention_ms=HOUR, limit=0) == []


async def test_appends_and_closes_are_writes_that_the_retention_counts_from(store: HistoryStore) -> None:
    created = await store.create_session(header("s1"))
    # A store may leave the time of a session written less than TOUCH_MS ago as it was.
    await later_than(created.touched_at + TOUCH_MS)
    await store.append("s1", [plain(0)])
    appended = (await store.get_session("s1")).touched_at
    assert appended > created.touched_at
    assert await store.expired(now=appended + HOUR - 1, retention_ms=HOUR, limit=None) == []
    assert await store.expired(now=appended + HOUR, retention_ms=HOUR, limit=None) == ["s1"]
    await later_than(appended)
    closed = await store.close_session("s1", closed_at=now_ms())
    assert closed.touched_at > appended and (await store.get_session("s1")).touched_at == closed.touched_at
    assert await store.expired(now=appended + HOUR, retention_ms=HOUR, limit=None) == []
    # A repeated close writes nothing.
    assert (await store.close_session("s1", closed_at=now_ms() + 5)).touched_at == closed.touched_at
    assert await store.expired(now=appended + HOUR, retention_ms=None, limit=None) == []


async def test_an_expired_session_is_found_until_it_is_deleted_with_its_tree(store: HistoryStore) -> None:
    await store.create_session(header("p", expiresAt=2_000_000_000_000))
    await store.create_session(header("p.kid", parentSession="p", origin="subagent", expiresAt=2_000_000_000_000))
    await store.create_session(header("other"))
    listed = await store.list_sessions(DEFAULT_OWNER, limit=10)
    assert [(s.id, s.expires_at) for s in listed] == [("p", 2_000_000_000_000), ("other", None)]
    assert all(s.touched_at > 0 for s in listed)
    now = 2_000_000_000_000
    assert sorted(await store.expired(now=now, retention_ms=None, limit=None)) == ["p", "p.kid"]
    assert await store.delete_session("p") == ["p", "p.kid"]
    assert await store.expired(now=now, retention_ms=None, limit=None) == []
    assert [s.id for s in await store.list_sessions(DEFAULT_OWNER, limit=10)] == ["other"]


# Incarnations and deletes (docs/protocol.md §2.5, §6.4).


async def test_every_creation_gets_its_own_incarnation_and_an_imported_one_is_kept(store: HistoryStore) -> None:
    first = await store.create_session(header("a"))
    second = await store.create_session(header("b"))
    kept = await store.create_session(header("c", incarnation="0123456789ab"))
    incarnations = [info.header.incarnation for info in (first, second, kept)]
    assert all(isinstance(one, str) for one in incarnations) and len(set(incarnations)) == 3
    assert [(await store.get_session(s)).header.incarnation for s in "abc"] == incarnations
    assert incarnations[2] == "0123456789ab"


async def test_delete_removes_the_session_and_its_whole_tree(store: HistoryStore) -> None:
    await write(store, multi_turn(seed=1, turns=2), [7, 30, 1, 100])
    await store.create_session(header("s1.a", parentSession="s1", origin="subagent"))
    await store.create_session(header("s1.a.x", parentSession="s1.a", origin="subagent"))
    await store.create_session(header("s1.b", parentSession="s1", origin="subagent"))
    await store.append("s1.a.x", [plain(0), plain(1)])
    await write(store, multi_turn(seed=2, turns=1), [5], session_id="other")
    await store.create_session(header("other.kid", parentSession="other", origin="subagent"))
    before = await store.read_events("other", 0, 10_000)

    deleted = await store.delete_session("s1")
    assert deleted[0] == "s1" and sorted(deleted) == ["s1", "s1.a", "s1.a.x", "s1.b"]
    for gone in deleted:
        with pytest.raises(SessionNotFoundError):
            await store.get_session(gone)
        with pytest.raises(SessionNotFoundError):
            await store.read_stored(gone, 0, 10)
        with pytest.raises(SessionNotFoundError):
            await store.append(gone, [plain(0)])
        with pytest.raises(SessionNotFoundError):
            await store.read_page(gone, through=None, before=None, max_messages=5)
    assert await store.children("s1") == []
    assert [s.id for s in await store.list_sessions(DEFAULT_OWNER, limit=10)] == ["other"]
    assert await store.read_events("other", 0, 10_000) == before
    assert [c.id for c in await store.children("other")] == ["other.kid"]
    with pytest.raises(SessionNotFoundError):
        await store.delete_session("s1")


async def test_a_child_is_deleted_with_its_own_children_and_the_parent_stays(store: HistoryStore) -> None:
    await store.create_session(header("p"))
    await store.create_session(header("p.a", parentSession="p", origin="subagent"))
    await store.create_session(header("p.a.x", parentSession="p.a", origin="subagent"))
    assert await store.delete_session("p.a") == ["p.a", "p.a.x"]
    assert (await store.get_session("p")).head_seq == -1 and await store.children("p") == []


async def test_an_id_created_again_after_a_delete_is_a_new_incarnation(store: HistoryStore) -> None:
    old_events = multi_turn(seed=4, turns=2)
    await write(store, old_events, [9, 50])
    old = await store.get_session("s1")
    await store.close_session("s1", closed_at=5)
    await store.delete_session("s1")
    new = await store.create_session(header(), owner="bob")
    assert new.header.incarnation != old.header.incarnation and not new.closed
    assert (new.owner, new.head_seq) == ("bob", -1)
    assert await store.read_stored("s1", 0, 10_000) == []
    fresh = multi_turn(seed=5, turns=1)
    await store.append("s1", fresh[:3])
    assert await store.read_events("s1", 0, 10_000) == fresh[:3]
    read = await store.read_page("s1", through=None, before=None, max_messages=50)
    assert read.to_seq == 3 and read.info.header.incarnation == new.header.incarnation


async def test_appends_racing_a_delete_land_before_it_or_find_no_session(store: HistoryStore) -> None:
    await store.create_session(header())
    outcomes: list[str] = []

    async def append(seq: int) -> None:
        try:
            await store.append("s1", [plain(seq)])
            outcomes.append("stored")
        except (SessionNotFoundError, SeqConflictError) as exc:
            outcomes.append(type(exc).__name__)

    async with anyio.create_task_group() as tasks:
        for seq in range(6):
            tasks.start_soon(append, seq)
        tasks.start_soon(lambda: store.delete_session("s1"))
    with pytest.raises(SessionNotFoundError):
        await store.get_session("s1")
    await store.create_session(header())
    assert await store.read_stored("s1", 0, 100) == []


async def test_a_second_delete_of_a_life_never_deletes_the_next(store: HistoryStore) -> None:
    old = await store.create_session(header(), owner="alice")
    assert await store.delete_session("s1", life=old.life) == ["s1"]
    new = await store.create_session(header(), owner="bob")
    with pytest.raises(SessionNotFoundError):
        await store.delete_session("s1", life=old.life)
    assert (await store.get_session("s1")).header == new.header


@pytest.mark.parametrize("next_owner", ["alice", "bob"])
async def test_a_write_given_an_ended_life_raises_not_found_and_changes_nothing(
    store: HistoryStore, next_owner: str
) -> None:
    """Issue 41 F1: an append, close or delete checked against one life never lands in the id's next one."""
    events = multi_turn(seed=6, turns=1)
    old = await store.create_session(header(), owner="alice")
    await store.append("s1", events[:2], life=old.life)
    await store.delete_session("s1", life=old.life)
    new = await store.create_session(header(), owner=next_owner)
    await store.append("s1", events[:3], life=new.life)
    await store.append("s1", events[3:5], life=new.life)  # the writer now knows the head: its fastest path
    wrong_owner = Life(new.incarnation, "mallory")
    for life in (old.life, wrong_owner):
        for batch in (events[:3], events[5:8], events[:1]):
            with pytest.raises(SessionNotFoundError):
                await store.append("s1", batch, life=life)
        with pytest.raises(SessionNotFoundError):
            await store.close_session("s1", closed_at=7, life=life)
        with pytest.raises(SessionNotFoundError):
            await store.delete_session("s1", life=life)
    got = await store.get_session("s1")
    assert (got.header, got.owner, got.head_seq, got.closed) == (new.header, next_owner, 4, False)
    assert await store.read_events("s1", 0, 100) == events[:5]
    assert (await store.append("s1", events[5:8], life=new.life)).head_seq == 7
    assert (await store.close_session("s1", closed_at=7, life=new.life)).closed
    assert await store.delete_session("s1", life=new.life) == ["s1"]


async def test_a_write_given_a_life_another_process_ended_changes_nothing(
    store: HistoryStore, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Issue 41 F1, across processes: what this store keeps of the old life does not let its write through."""
    name = request.node.callspec.params["store"]
    if name == "memory":
        pytest.skip("one process holds a memory store")
    events = multi_turn(seed=7, turns=1)
    old = await store.create_session(header(), owner="alice")
    await store.append("s1", events[:2], life=old.life)
    other = await open_store(backend_url(name, tmp_path), timeout=10)
    try:
        await other.delete_session("s1")
        new = await other.create_session(header(), owner="bob")
        await other.append("s1", events[:2], life=new.life)
        with pytest.raises(SessionNotFoundError):
            await store.append("s1", events[2:4], life=old.life)
        with pytest.raises(SessionNotFoundError):
            await store.append("s1", events[:2], life=old.life)
        with pytest.raises(SessionNotFoundError):
            await store.close_session("s1", closed_at=7, life=old.life)
        with pytest.raises(SessionNotFoundError):
            await store.delete_session("s1", life=old.life)
        got = await other.get_session("s1")
        assert (got.header, got.owner, got.head_seq, got.closed) == (new.header, "bob", 1, False)
        assert await other.read_events("s1", 0, 100) == events[:2]
    finally:
        await other.close()


async def test_what_a_process_kept_of_a_life_is_not_used_for_the_next_one(
    store: HistoryStore, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A run another process sealed in the id's next life is sealed from that life's own lines."""
    name = request.node.callspec.params["store"]
    if name == "memory":
        pytest.skip("one process holds a memory store")
    old = await store.create_session(header(), owner="alice")
    for seq in range(20):  # single deltas: an open run this store keeps, with its lines
        await store.append("s1", [text(seq, seq, "a")], life=old.life)
    other = await open_store(backend_url(name, tmp_path), timeout=10)
    try:
        await other.delete_session("s1")
        new = await other.create_session(header(), owner="bob")
        mine = [text(seq, seq, f"b{seq}") for seq in range(20)]
        for event in mine:
            await other.append("s1", [event], life=new.life)
        # Through the first store, which last wrote the old life at the same head: the run is sealed now.
        await store.append("s1", [plain(20)], life=new.life)
        assert await other.read_events("s1", 0, 100) == [*mine, plain(20)]
        assert await store.read_events("s1", 0, 100) == [*mine, plain(20)]
    finally:
        await other.close()


# Closing (docs/protocol.md §6.3).


async def test_close_ends_appends_but_keeps_resends_and_reads(store: HistoryStore) -> None:
    events = multi_turn(seed=5, turns=2)
    await store.create_session(header())
    await store.append("s1", events[:30])
    closed = await store.close_session("s1", closed_at=1_700_000_000_500)
    assert (closed.head_seq, closed.header.closedAt, closed.closed) == (29, 1_700_000_000_500, True)
    assert (await store.get_session("s1")).header.closedAt == 1_700_000_000_500
    for batch in (events[30:31], events[30:40], []):
        with pytest.raises(SessionClosedError) as refused:
            await store.append("s1", batch)
        assert refused.value.head_seq == 29
    again = await store.append("s1", events[10:20])
    assert again.idempotent and again.head_seq == 29
    differs = [msgspec.structs.replace(events[12], time=events[12].time + 1)]
    for batch in (events[11:12] + events[13:14], events[31:32], differs):
        # Not an exact re-send: refused as closed, not as a seq conflict (§6.3).
        with pytest.raises(SessionClosedError):
            await store.append("s1", batch)
    assert await store.read_events("s1", 0, 30) == events[:30]
    read = await store.read_page("s1", through=None, before=None, max_messages=5)
    assert read.info.header.closedAt == 1_700_000_000_500 and read.to_seq == 30


async def test_close_is_idempotent_and_keeps_the_first_time(store: HistoryStore) -> None:
    await store.create_session(header())
    first = await store.close_session("s1", closed_at=10)
    second = await store.close_session("s1", closed_at=20)
    assert first == second and second.header.closedAt == 10 and second.head_seq == -1
    with pytest.raises(SessionNotFoundError):
        await store.close_session("nope", closed_at=10)


async def test_a_child_closes_on_its_own(store: HistoryStore) -> None:
    await store.create_session(header("parent"))
    await store.create_session(header("child", parentSession="parent", origin="subagent"))
    await store.close_session("parent", closed_at=5)
    assert (await store.get_session("child")).closed is False
    await store.append("child", [plain(0)])
    await store.close_session("child", closed_at=6)
    assert [(await store.get_session(s)).header.closedAt for s in ("parent", "child")] == [5, 6]
    assert [c.closedAt for c in await store.children("parent")] == [6]


async def test_listings_show_closed_at_and_filter_on_it(store: HistoryStore) -> None:
    for k in range(6):
        await store.create_session(SessionHeader(id=f"s{k}", createdAt=k))
    await store.create_session(SessionHeader(id="kid", createdAt=9, parentSession="s1", origin="subagent"))
    for k in (1, 4):
        await store.close_session(f"s{k}", closed_at=100 + k)
    everyone = await store.list_sessions(DEFAULT_OWNER, limit=10)
    assert [(s.id, s.closed_at) for s in everyone] == [
        ("s5", None),
        ("s4", 104),
        ("s3", None),
        ("s2", None),
        ("s1", 101),
        ("s0", None),
    ]
    closed = await store.list_sessions(DEFAULT_OWNER, limit=10, closed=True)
    assert [s.id for s in closed] == ["s4", "s1"] and closed[1].child_count == 1
    open_ones = await store.list_sessions(DEFAULT_OWNER, limit=2, closed=False)
    assert [s.id for s in open_ones] == ["s5", "s3"]
    after = await store.list_sessions(DEFAULT_OWNER, limit=10, before=open_ones[-1].key, closed=False)
    assert [s.id for s in after] == ["s2", "s0"]


async def test_appends_racing_a_close_land_before_it_or_are_refused(store: HistoryStore) -> None:
    await store.create_session(header())
    outcomes: dict[int, str] = {}

    async def append(seq: int) -> None:
        try:
            await store.append("s1", [plain(seq)])
            outcomes[seq] = "stored"
        except SessionClosedError:
            outcomes[seq] = "closed"
        except SeqConflictError:
            outcomes[seq] = "conflict"

    async with anyio.create_task_group() as tasks:
        for seq in range(6):
            tasks.start_soon(append, seq)
        tasks.start_soon(lambda: store.close_session("s1", closed_at=1))
    info = await store.get_session("s1")
    stored = [seq for seq, outcome in sorted(outcomes.items()) if outcome == "stored"]
    assert info.closed and stored == list(range(info.head_seq + 1))
    assert await store.read_events("s1", 0, info.head_seq + 1) == [plain(seq) for seq in stored]


# Interval reads and page records.


def layered_session() -> list[Event]:
    """Runs longer than one stored row, runs split across batches, and short runs."""
    events = [plain(0, "turn/start")]
    events += [text(len(events) + k, 1000 + k, f"t{k}", index=0) for k in range(1100)]
    events.append(plain(len(events), "step/end"))
    events += [text(len(events) + k, 5000 - k, f"u{k}", index=1) for k in range(7)]
    events += [text(len(events) + k, 6000, "v", index=2) for k in range(2)]
    events.append(plain(len(events), "turn/end"))
    return events


async def test_interval_reads_at_every_boundary(store: HistoryStore) -> None:
    events = multi_turn(seed=5, turns=2, max_run=12)
    await write(store, events, random_sizes(random.Random(5), len(events)))
    n = len(events)
    for from_seq in range(n + 1):
        for to_seq in range(from_seq, min(n, from_seq + 25) + 1):
            assert await store.read_events("s1", from_seq, to_seq) == events[from_seq:to_seq]
            records = await page_records(store, "s1", from_seq, to_seq)
            assert records == [encode(r) for r in pack_page(events[from_seq:to_seq])], (from_seq, to_seq)


async def test_reads_starting_inside_long_packed_rows(store: HistoryStore) -> None:
    events = layered_session()
    await write(store, events, [600, 400, 5, 200])
    n = len(events)
    for from_seq in [
        0,
        1,
        2,
        3,
        500,
        599,
        600,
        601,
        1000,
        1023,
        1024,
        1025,
        1099,
        1100,
        1101,
        1102,
        1105,
        n - 2,
        n - 1,
    ]:
        for to_seq in sorted({from_seq, from_seq + 1, from_seq + 3, min(n, from_seq + 1500), n}):
            if to_seq > n:
                continue
            assert await store.read_events("s1", from_seq, to_seq) == events[from_seq:to_seq]
            expected = [encode(r) for r in pack_page(events[from_seq:to_seq])]
            assert await page_records(store, "s1", from_seq, to_seq) == expected, (from_seq, to_seq)


async def test_reads_past_the_head_are_clipped(store: HistoryStore) -> None:
    await write(store, [plain(0), plain(1)], [2])
    assert await store.read_events("s1", 1, 10) == [plain(1)]


@pytest.mark.parametrize("layout", ["one-batch", "single-events", "random"])
async def test_layout_blind_reads(store: HistoryStore, layout: str) -> None:
    events = layered_session() + [
        Event(e.type, e.seq + 1112, e.time, e.data, e.ignorable, e.sourceEventSeqs, e.surfaceOp, e.conversationOp)
        for e in multi_turn(seed=9, turns=2)
    ]
    sizes = {
        "one-batch": [len(events)],
        "single-events": [1] * len(events),
        "random": random_sizes(random.Random(1), len(events)),
    }
    await write(store, events, sizes[layout])
    rand = random.Random(2)
    intervals = [(0, len(events)), (0, 0), (len(events), len(events))]
    for _ in range(60):
        low, high = sorted((rand.randint(0, len(events)), rand.randint(0, len(events))))
        intervals.append((low, high))
    for from_seq, to_seq in intervals:
        assert await store.read_events("s1", from_seq, to_seq) == events[from_seq:to_seq]
        expected = [encode(r) for r in pack_page(events[from_seq:to_seq])]
        assert await page_records(store, "s1", from_seq, to_seq) == expected


# Sealing.


@pytest.mark.parametrize("layout", ["one-batch", "single-events", "random"])
async def test_a_closed_run_is_stored_as_the_one_row_pack_builds(store: HistoryStore, layout: str) -> None:
    events = layered_session()
    sizes = {"one-batch": [len(events)], "single-events": [1] * len(events)}
    await write(store, events, sizes.get(layout) or random_sizes(random.Random(7), len(events)))
    # The session ends with a plain event, so no run is open: every run is sealed.
    assert await store.read_stored("s1", 0, len(events)) == [stored_record(record) for record in pack(events)]


async def test_an_open_run_stays_a_few_records_however_it_is_appended(store: HistoryStore) -> None:
    events = [plain(0)] + [text(1 + k, 10 + k, f"t{k}") for k in range(1500)]
    await write(store, events, [1] * len(events))
    tail = await store.read_stored("s1", 1, len(events))
    # Rows of at least SINGLES members, as a binary counter keeps them, then fewer than SINGLES single deltas.
    assert len(tail) <= (1500 // SINGLES).bit_length() + SINGLES - 1
    assert await page_records(store, "s1", 0, len(events)) == [encode(r) for r in pack_page(events)]
    await store.append("s1", [plain(len(events))])
    assert [r.members for r in await store.read_stored("s1", 0, len(events) + 1)] == [1, 1500, 1]


@pytest.mark.parametrize("shape", ["chunk-first", "data-first"])
async def test_a_delta_sent_in_another_key_order_joins_its_run_exactly(store: HistoryStore, shape: str) -> None:
    """Its line keeps the order it was sent in (§2.2) until a later batch seals it into a row."""
    chunk = {"text": 'a \u00e9 "q" %', "type": "text-delta", "index": 1}
    data = (
        {"turn": 1, "step": 1, "chunk": chunk}
        if shape == "chunk-first"
        else {"chunk": {"type": "text-delta", "index": 1, "text": "b"}, "turn": 1, "step": 1}
    )
    odd = decode_event(encode(Event("assistant/chunk", 1, 11, data)))
    events = [plain(0), odd, text(2, 12, "x"), text(3, 13, "y"), text(4, 14, "z"), plain(5)]
    await write(store, events, [2, 1, 1, 1, 1])
    assert await page_records(store, "s1", 0, 6) == [encode(r) for r in pack_page(events)]
    # Sealed into a row, the delta reads back in canonical form, whatever the interval.
    stored = expand_records(pack(events))
    assert await store.read_events("s1", 0, 6) == stored
    for from_seq, to_seq in [(1, 5), (1, 2), (2, 6), (0, 4)]:
        expected = [encode(r) for r in pack_page(stored[from_seq:to_seq])]
        assert await page_records(store, "s1", from_seq, to_seq) == expected, (from_seq, to_seq)


async def test_reads_racing_seals_always_cover_their_interval(store: HistoryStore) -> None:
    """Every append seals or compacts the open run, which moves the record a read starts from."""
    events = [plain(0)] + [text(1 + k, 10 + k, f"t{k}") for k in range(400)] + [plain(401)]
    await write(store, events[:1], [1])
    done = anyio.Event()
    checked = 0

    async def reader() -> None:
        nonlocal checked
        rand = random.Random(5)
        while not done.is_set():
            head = await store.head_seq("s1")
            low = rand.randint(0, head)
            stored = await store.read_stored("s1", low, head + 1)
            assert stored and stored[0].seq <= low and stored[-1].end > head, (low, head)
            assert all(a.end == b.seq for a, b in pairwise(stored)), (low, head)
            read = await store.read_page("s1", through=None, before=None, max_messages=1 + low % 3)
            # A store whose statements read their own snapshots may find the head's record sealed meanwhile.
            assert read.stored[0].seq <= read.cuts[-1] and read.stored[-1].end >= read.to_seq, (low, read.to_seq)
            assert all(a.end == b.seq for a, b in pairwise(read.stored)), read.to_seq
            checked += 1
            await anyio.sleep(0)

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        for event in events[1:]:
            await store.append("s1", [event])
            await anyio.sleep(0)  # the memory store never yields by itself, nor lets others run
        done.set()
    assert checked > 0
    assert await page_records(store, "s1", 0, len(events)) == [encode(r) for r in pack_page(events)]


# One read per page.


async def reference_read(store: HistoryStore, through: int | None, before: int | None, max_messages: int) -> PageRead:
    """The page read composed of the store's own primitives, one call each."""
    return await HistoryStore.read_page(store, "s1", through=through, before=before, max_messages=max_messages)


@pytest.mark.parametrize("scenario", ["multi-turn", "compaction", "large", "many-messages"])
async def test_read_page_is_the_primitives_read_at_once(store: HistoryStore, scenario: str) -> None:
    if scenario == "many-messages":
        # More messages than a store reads in one go (256), so a page's cut needs the next ones.
        events = [plain(k, "user/message", {"text": f"m{k}"}, surfaceOp="append") for k in range(300)]
    elif scenario == "large":
        # Tool outputs that pass the stores' inline-read budget, so the rest is read in a worker thread.
        big = "x" * 200_000
        events = [plain(0, "user/message", {"text": "q"}, surfaceOp="append")]
        events += [plain(1 + k, "tool/result", {"output": big + str(k)}) for k in range(4)]
        events += [plain(5, "assistant/message", {"text": "a"}, surfaceOp="append")]
    else:
        events = multi_turn(seed=21, turns=5) if scenario == "multi-turn" else compaction(seed=22)
    await write(store, events, random_sizes(random.Random(4), len(events)))
    head = len(events) - 1
    bounds = [(None, None), (head, None), (head // 2, None), (None, head // 3 + 1), (-1, None), (None, 0)]
    for through, before in bounds:
        for max_messages in (1, 3, 50, 280):
            read = await store.read_page("s1", through=through, before=before, max_messages=max_messages)
            expected = await reference_read(store, through, before, max_messages)
            assert (read.info, read.to_seq, read.cuts) == (expected.info, expected.to_seq, expected.cuts)
            if read.cuts:
                assert list(splice(read.stored, read.cuts[-1], read.to_seq)) == list(
                    splice(expected.stored, expected.cuts[-1], expected.to_seq)
                ), (through, before, max_messages)
            else:
                assert read.stored == []


async def test_read_page_reads_no_further_back_than_the_byte_target_allows(store: HistoryStore) -> None:
    events: list[Event] = []
    for k in range(40):
        events.append(plain(len(events), "user/message", {"text": f"q{k}"}, surfaceOp="append"))
        events.append(plain(len(events), "tool/result", {"output": "x" * 10_000 + str(k)}))
        for i in range(20):
            events.append(text(len(events), 2000 + len(events), f"t{k}.{i}"))
    await write(store, events, random_sizes(random.Random(8), len(events)))
    head = len(events) - 1
    for through in (None, head // 2):
        full = await store.read_page("s1", through=through, before=None, max_messages=1000)
        for max_bytes in (1, 25_000, 100_000, 10**9):
            read = await store.read_page("s1", through=through, before=None, max_messages=1000, max_bytes=max_bytes)
            assert read.cuts == full.cuts[: len(read.cuts)] and read.to_seq == full.to_seq
            expected = choose_body(full.stored, full.cuts, full.to_seq, max_bytes, False)
            bounded = choose_body(read.stored, read.cuts, read.to_seq, max_bytes, False)
            assert (bounded[0].join(), bounded[1]) == (expected[0].join(), expected[1]), (through, max_bytes)
            # Only the starts that may fit are read: at most one message more than the page.
            assert sum(len(r.line) for r in read.stored) <= max(max_bytes, 11_000) + 11_000, (through, max_bytes)
        small = await store.read_page("s1", through=through, before=None, max_messages=1000, max_bytes=1)
        assert small.cuts == full.cuts[:1] and small.stored[0].seq >= full.cuts[1]


async def test_read_page_of_an_unknown_session_or_beyond_the_head(store: HistoryStore) -> None:
    with pytest.raises(SessionNotFoundError):
        await store.read_page("nope", through=None, before=None, max_messages=5)
    await write(store, [plain(0), plain(1)], [2])
    read = await store.read_page("s1", through=5, before=None, max_messages=5)
    assert (read.info.head_seq, read.to_seq, read.cuts, read.stored) == (1, 6, [], [])
    empty = await store.read_page("s1", through=None, before=0, max_messages=5)
    assert (empty.to_seq, empty.cuts, empty.stored) == (0, [], [])


# Cut selection.


def reference_cuts(events: Sequence[Event], to_seq: int, max_messages: int) -> list[int]:
    """docs/protocol.md §4, written directly over the logical events."""
    hidden: set[int] = set()
    for event in events[:to_seq]:
        if isinstance(event.conversationOp, ReplaceOp):
            hidden.update(range(event.conversationOp.start, event.conversationOp.end + 1))
    cuts: list[int] = []
    running, count = to_seq, 0
    for event in reversed(events[:to_seq]):
        if event.seq in hidden or event.type not in ("user/message", "assistant/message"):
            continue
        if isinstance(event.conversationOp, ReplaceOp):
            group = event.seq
        elif event.surfaceOp == "append":
            group = min([event.seq, *(event.sourceEventSeqs or ())])
        else:
            continue
        count += 1
        running = min(running, group)
        if not cuts or cuts[-1] != running:
            cuts.append(running)
        if count >= max_messages:
            return cuts
    return cuts + [0] if not cuts or cuts[-1] != 0 else cuts


@pytest.mark.parametrize("scenario", ["multi-turn", "compaction"])
async def test_cut_selection_matches_the_reference(store: HistoryStore, scenario: str) -> None:
    events = multi_turn(seed=11, turns=6) if scenario == "multi-turn" else compaction(seed=12)
    await write(store, events, random_sizes(random.Random(3), len(events)))
    for to_seq in range(0, len(events) + 1, 7):
        for max_messages in (1, 2, 3, 5, 50):
            cuts = await store.page_cuts("s1", to_seq=to_seq, max_messages=max_messages)
            assert cuts == reference_cuts(events, to_seq, max_messages), (to_seq, max_messages)


async def test_conversation_op_hides_earlier_messages(store: HistoryStore) -> None:
    events = [
        plain(0, "user/message", {"text": "a"}, surfaceOp="append"),
        plain(1, "assistant/message", {"text": "b"}, surfaceOp="append"),
        plain(2, "user/message", {"text": "c"}, surfaceOp="append"),
        plain(
            3,
            "user/message",
            {"text": "edit"},
            surfaceOp=ReplaceOp("replace", 1, 2),
            conversationOp=ReplaceOp("replace", 1, 2),
        ),
        plain(4, "assistant/message", {"text": "d"}, surfaceOp="append", sourceEventSeqs=(4,)),
    ]
    await write(store, events, [5])
    assert await store.page_cuts("s1", to_seq=5, max_messages=2) == [4, 3]
    assert await store.page_cuts("s1", to_seq=5, max_messages=3) == [4, 3, 0]
    # Only events before to_seq count: before the edit, nothing is hidden.
    assert await store.page_cuts("s1", to_seq=3, max_messages=2) == [2, 1]


async def test_a_message_with_many_sources_pulls_its_chunks_into_one_page(store: HistoryStore) -> None:
    events = [plain(0, "user/message", {"text": "q"}, surfaceOp="append")]
    events += [text(1 + k, 10 + k, "x") for k in range(200)]
    events.append(
        plain(201, "assistant/message", {"text": "a"}, surfaceOp="append", sourceEventSeqs=tuple(range(1, 201)))
    )
    await write(store, events, [50, 151])
    cuts = await store.page_cuts("s1", to_seq=202, max_messages=1)
    assert cuts == [1]
    records = await page_records(store, "s1", cuts[-1], 202)
    assert [r[:10] for r in records] == [b'{"chunks":', b'{"event":{']


async def test_compaction_replacement_consumes_no_quota(store: HistoryStore) -> None:
    events = [
        plain(0, "user/message", {"text": "q"}, surfaceOp="append"),
        plain(1, "compaction/summary", {"s": 1}),
        plain(2, "user/message", {"text": "copy"}, surfaceOp=ReplaceOp("replace", 0, 0), sourceEventSeqs=(0,)),
        plain(3, "assistant/message", {"text": "a"}, surfaceOp="append"),
    ]
    await write(store, events, [4])
    assert await store.page_cuts("s1", to_seq=4, max_messages=2) == [3, 0]


# Subagent children.


async def test_children_are_direct_subagent_children_only(store: HistoryStore) -> None:
    await store.create_session(header("parent"))
    await store.create_session(header("child-b", parentSession="parent", origin="subagent"))
    await store.create_session(header("child-a", parentSession="parent", origin="subagent"))
    await store.create_session(header("grandchild", parentSession="child-a", origin="subagent"))
    await store.create_session(header("fork", parentSession="parent"))
    assert [h.id for h in await store.children("parent")] == ["child-a", "child-b"]
    assert [h.id for h in await store.children("child-a")] == ["grandchild"]
    assert await store.children("grandchild") == []
    assert await store.children("unknown") == []


# Listing a principal's sessions.


EPOCH = 1_700_000_000_000  # createdAt is in milliseconds: keys must hold more than 32 bits


def created_at(session_id: str, at: int, **extra: object) -> SessionHeader:
    return SessionHeader(id=session_id, createdAt=EPOCH + at, **extra)  # type: ignore[arg-type]


async def all_pages(store: HistoryStore, owner: str, limit: int) -> list[list[SessionSummary]]:
    pages: list[list[SessionSummary]] = []
    before: SessionKey | None = None
    while page := await store.list_sessions(owner, limit=limit, before=before):
        assert len(page) <= limit
        pages.append(page)
        before = page[-1].key
    return pages


async def test_listing_an_empty_store_gives_nothing(store: HistoryStore) -> None:
    assert await store.list_sessions("alice", limit=10) == []
    assert await store.list_sessions("alice", limit=10, before=SessionKey(EPOCH, "x")) == []


async def test_listing_is_newest_first_with_ties_broken_by_id(store: HistoryStore) -> None:
    # Code point order: "B" < "a" < "b" < "é", whatever a database's locale says.
    sessions = [("b", 200), ("old", 100), ("a", 200), ("B", 200), ("é", 200), ("new", 300), ("a2", 199)]
    for session_id, at in sessions:
        await store.create_session(created_at(session_id, at), owner="alice")
    listed = await store.list_sessions("alice", limit=100)
    assert [(s.id, s.created_at - EPOCH) for s in listed] == [
        ("new", 300),
        ("é", 200),
        ("b", 200),
        ("a", 200),
        ("B", 200),
        ("a2", 199),
        ("old", 100),
    ]
    assert msgspec.structs.replace(listed[0], touched_at=0) == SessionSummary("new", EPOCH + 300, -1, 0)


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 50])
async def test_pages_cover_every_session_exactly_once(store: HistoryStore, limit: int) -> None:
    rand = random.Random(limit)
    expected = []
    for i in range(23):
        at = rand.choice([10, 20, 20, 20, 30, 40, 40])
        session_id = f"s{rand.randrange(1000):03d}-{i}"
        await store.create_session(created_at(session_id, at), owner="alice")
        expected.append((EPOCH + at, session_id))
    expected.sort(reverse=True)
    pages = await all_pages(store, "alice", limit)
    assert [(s.created_at, s.id) for page in pages for s in page] == expected
    assert all(len(page) == limit for page in pages[:-1])


async def test_before_is_exclusive_and_need_not_name_a_session(store: HistoryStore) -> None:
    for session_id, at in [("a", 1), ("b", 2), ("c", 2), ("d", 3)]:
        await store.create_session(created_at(session_id, at), owner="alice")
    listed = await store.list_sessions("alice", limit=10, before=SessionKey(EPOCH + 2, "c"))
    assert [s.id for s in listed] == ["b", "a"]
    listed = await store.list_sessions("alice", limit=10, before=SessionKey(EPOCH + 2, "bb"))
    assert [s.id for s in listed] == ["b", "a"]
    assert await store.list_sessions("alice", limit=10, before=SessionKey(EPOCH + 1, "a")) == []


async def test_listing_shows_only_the_owners_sessions(store: HistoryStore) -> None:
    await store.create_session(created_at("a1", 1), owner="alice")
    await store.create_session(created_at("b1", 2), owner="bob")
    await store.create_session(created_at("a2", 3), owner="alice")
    await store.create_session(created_at("l1", 4))
    assert [s.id for s in await store.list_sessions("alice", limit=10)] == ["a2", "a1"]
    assert [s.id for s in await store.list_sessions("bob", limit=10)] == ["b1"]
    assert [s.id for s in await store.list_sessions("local", limit=10)] == ["l1"]
    assert await store.list_sessions("carol", limit=10) == []


async def test_children_are_counted_in_their_parent_not_listed(store: HistoryStore) -> None:
    await store.create_session(created_at("parent", 10), owner="alice")
    await store.create_session(created_at("child-a", 11, parentSession="parent", origin="subagent"), owner="alice")
    await store.create_session(created_at("child-b", 12, parentSession="parent", origin="subagent"), owner="bob")
    await store.create_session(created_at("grandchild", 13, parentSession="child-a", origin="subagent"), owner="alice")
    # Not subagent children: a fork names a parent without the origin, and an origin without a parent.
    await store.create_session(created_at("fork", 14, parentSession="parent"), owner="alice")
    await store.create_session(created_at("orphan", 15, origin="subagent"), owner="alice")
    listed = await store.list_sessions("alice", limit=10)
    assert [(s.id, s.child_count) for s in listed] == [("orphan", 0), ("fork", 0), ("parent", 2)]
    assert await store.list_sessions("bob", limit=10) == []


async def test_listed_head_seq_follows_appends(store: HistoryStore) -> None:
    await store.create_session(created_at("s1", 1), owner="alice")
    await store.create_session(created_at("s2", 2), owner="alice")
    assert [s.head_seq for s in await store.list_sessions("alice", limit=10)] == [-1, -1]
    await store.append("s1", [plain(0), plain(1), plain(2)])
    assert [s.head_seq for s in await store.list_sessions("alice", limit=10)] == [-1, 2]
    events = multi_turn(seed=4, turns=2)
    await store.append("s2", events[:30])
    await store.append("s2", events[30:])
    await store.append("s1", [plain(3)])
    listed = await store.list_sessions("alice", limit=10)
    assert [(s.id, s.head_seq) for s in listed] == [("s2", len(events) - 1), ("s1", 3)]
    for summary in listed:
        assert summary.head_seq == await store.head_seq(summary.id)


async def test_listing_returns_at_most_limit_sessions(store: HistoryStore) -> None:
    for i in range(5):
        await store.create_session(created_at(f"s{i}", i), owner="alice")
    assert [s.id for s in await store.list_sessions("alice", limit=2)] == ["s4", "s3"]
    assert [s.id for s in await store.list_sessions("alice", limit=5)] == ["s4", "s3", "s2", "s1", "s0"]
    assert await store.list_sessions("alice", limit=0) == []


# The listing's synopsis, filter and count (docs/protocol.md §12.1, `persistence.synopsis`).


def said(seq: int, words: str, *, kind: str = "user", time: int = 0) -> Event:
    data = {"role": "user", "content": [{"type": "text", "text": words}], "source": {"kind": kind}}
    return Event("user/message", seq, time or EPOCH + seq, data, surfaceOp="append")


def titled(seq: int, title: str) -> Event:
    return Event("session/title", seq, EPOCH + seq, {"title": title, "source": {"kind": "fallback"}})


def usage(seq: int, tokens_in: int, tokens_out: int) -> Event:
    counts = {"inputTokens": tokens_in, "outputTokens": tokens_out}
    return chunk_event(seq, EPOCH + seq, {"type": "usage", "usage": counts})


async def listed_synopsis(store: HistoryStore, session_id: str, owner: str = "alice") -> Synopsis:
    """The synopsis the listing gives, checked against `HistoryStore.synopsis`."""
    (found,) = [s for s in await store.list_sessions(owner, limit=1000) if s.id == session_id]
    assert found.synopsis == await store.synopsis(session_id)
    return found.synopsis


async def test_a_title_is_the_last_session_title_else_the_first_user_message(store: HistoryStore) -> None:
    await store.create_session(created_at("s1", 1), owner="alice")
    assert await listed_synopsis(store, "s1") == Synopsis()
    # Injected context is not the user: it names nothing.
    await store.append("s1", [plain(0), said(1, "Runtime context.", kind="plugin")])
    assert (await listed_synopsis(store, "s1")).title is None
    await store.append("s1", [said(2, "  Fix the\nfailing   test  "), said(3, "and then another")])
    assert (await listed_synopsis(store, "s1")).title == "Fix the failing test"
    await store.append("s1", [titled(4, "Failing test")])
    assert (await listed_synopsis(store, "s1")).title == "Failing test"
    # A later user message keeps the title; a later session/title replaces it.
    await store.append("s1", [said(5, "one more thing")])
    assert (await listed_synopsis(store, "s1")).title == "Failing test"
    await store.append("s1", [titled(6, "Renamed"), text(7, EPOCH + 7, "ok")])
    assert (await listed_synopsis(store, "s1")).title == "Renamed"
    # A long message is cut, on one line, at MAX_TITLE characters.
    await store.create_session(created_at("s2", 2), owner="alice")
    await store.append("s2", [said(0, "word " * 500)])
    title = (await listed_synopsis(store, "s2")).title
    assert title is not None and len(title) == MAX_TITLE and title.endswith("…") and "\n" not in title


async def test_the_last_event_time_is_the_heads_and_an_empty_session_has_none(store: HistoryStore) -> None:
    await store.create_session(created_at("s1", 1), owner="alice")
    assert (await listed_synopsis(store, "s1")).last_event_at is None
    await store.append("s1", [plain(0, time=5), plain(1, time=9)])
    assert (await listed_synopsis(store, "s1")).last_event_at == 9
    # Deltas alone (a token stream), and a time that goes backwards: the last event's, not the greatest.
    for seq in range(2, 6):
        await store.append("s1", [text(seq, 20 + seq, "x")])
    assert (await listed_synopsis(store, "s1")).last_event_at == 25
    await store.append("s1", [plain(6, time=3)])
    assert (await listed_synopsis(store, "s1")).last_event_at == 3


async def test_tokens_sum_usage_chunks_and_messages_no_deltas_built(store: HistoryStore) -> None:
    built = {"message": {"role": "assistant", "content": [], "usage": {"inputTokens": 100, "outputTokens": 100}}}
    alone = {"message": {"role": "assistant", "content": [], "usage": {"inputTokens": 5, "outputTokens": 6}}}
    await store.create_session(created_at("s1", 1), owner="alice")
    await store.append("s1", [usage(0, 10, 2), text(1, 1, "a")])
    # A message built from deltas repeats its step's usage chunk: it is not counted again.
    await store.append("s1", [Event("assistant/message", 2, 2, built, sourceEventSeqs=(1,))])
    await store.append("s1", [Event("assistant/message", 3, 3, alone), usage(4, 1, 1)])
    # Nonsense is no count: a negative, a float, a string.
    await store.append("s1", [chunk_event(5, 5, {"type": "usage", "usage": {"inputTokens": -4, "outputTokens": 1.5}})])
    found = await listed_synopsis(store, "s1")
    assert (found.input_tokens, found.output_tokens) == (16, 9)


async def test_the_synopsis_is_the_same_however_the_events_are_batched(store: HistoryStore) -> None:
    events = [said(0, "Start"), *multi_turn(seed=3, turns=1)[1:], titled(0, "Done")]
    events = [msgspec.structs.replace(event, seq=seq) for seq, event in enumerate(events)]
    expected = synopsis_of([events])
    assert expected.title == "Done" and expected.input_tokens > 0
    for k, sizes in enumerate([[len(events)], random_sizes(random.Random(5), len(events)), [1, 2, 3] * 3]):
        await write(store, events, sizes, session_id=f"s{k}")
        assert await store.synopsis(f"s{k}") == expected


# Each filter, and the sessions it keeps: a substring of the id or the title, case-folded, wildcards literal.
FILTERS = {"FIX": ["s3", "s1"], "fix the": ["s1"], "s2": ["s2"], "STRASSE": ["s3"], "100%": ["s4"], "1_0": [], "no": []}


async def test_the_filter_keeps_ids_or_titles_that_hold_it_in_any_case(store: HistoryStore) -> None:
    titles = {"s1": "Fix the tests", "s2": None, "s3": "Straße fixes", "s4": "100% done"}
    for k, (session_id, title) in enumerate(titles.items()):
        await store.create_session(created_at(session_id, k), owner="alice")
        if title is not None:
            await store.append(session_id, [titled(0, title)])
    for needle, expected in FILTERS.items():
        listed = await store.list_sessions("alice", limit=10, match=needle)
        assert [s.id for s in listed] == expected, needle
        counted = await store.count_sessions("alice", now=now_ms(), retention_ms=None, match=needle)
        assert counted == len(expected), needle


async def test_the_count_is_the_owners_listing_under_its_state_and_filter(store: HistoryStore) -> None:
    for i in range(7):
        await store.create_session(created_at(f"a{i}", i), owner="alice")
        await store.append(f"a{i}", [titled(0, "even" if i % 2 == 0 else "odd")])
    await store.create_session(created_at("b0", 9), owner="bob")
    await store.append("b0", [titled(0, "even")])
    await store.create_session(created_at("a0.c", 10, parentSession="a0", origin="subagent"), owner="alice")
    await store.close_session("a1", closed_at=EPOCH)
    now = now_ms()

    async def count(owner: str = "alice", **kwargs: Any) -> int:
        return await store.count_sessions(owner, now=now, retention_ms=None, **kwargs)

    # The children are not in the listing, and another owner's sessions are not the caller's.
    assert await count() == 7 == len(await store.list_sessions("alice", limit=100))
    assert await count(match="even") == 4 and await count("bob", match="even") == 1
    assert await count(closed=True) == 1 and await count(closed=False, match="odd") == 2
    assert await count("carol") == 0
    # The filter holds across pages.
    first = await store.list_sessions("alice", limit=2, match="even")
    rest = await store.list_sessions("alice", limit=10, before=first[-1].key, match="even")
    assert [s.id for s in first + rest] == ["a6", "a4", "a2", "a0"]


async def test_the_count_leaves_out_sessions_expired_by_their_own_time(store: HistoryStore) -> None:
    await store.create_session(created_at("kept", 1), owner="alice")
    await store.create_session(created_at("going", 2, expiresAt=EPOCH + 5_000), owner="alice")
    assert await store.count_sessions("alice", now=EPOCH, retention_ms=None) == 2
    assert await store.count_sessions("alice", now=EPOCH + 5_000, retention_ms=None) == 1
    # The retention counts from the last write.
    touched = (await store.get_session("kept")).touched_at
    assert await store.count_sessions("alice", now=touched + 999, retention_ms=1_000) == 1
    assert await store.count_sessions("alice", now=touched + 10**9, retention_ms=1_000) == 0


async def test_a_deleted_session_leaves_the_listing_its_count_and_its_synopsis(store: HistoryStore) -> None:
    await store.create_session(created_at("s1", 1), owner="alice")
    await store.append("s1", [titled(0, "Gone soon")])
    assert await store.count_sessions("alice", now=now_ms(), retention_ms=None, match="gone") == 1
    await store.delete_session("s1")
    assert await store.list_sessions("alice", limit=10, match="gone") == []
    assert await store.count_sessions("alice", now=now_ms(), retention_ms=None, match="gone") == 0
    with pytest.raises(SessionNotFoundError):
        await store.synopsis("s1")
    # The id made again starts with no title.
    await store.create_session(created_at("s1", 1), owner="alice")
    assert await listed_synopsis(store, "s1") == Synopsis()


async def test_another_process_sees_the_synopsis_appends_kept(
    store: HistoryStore, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    name = request.node.callspec.params["store"]
    if name == "memory":
        pytest.skip("one process holds a memory store")
    events = [said(0, "Hello there"), usage(1, 3, 4), *(text(seq, EPOCH + seq, "t") for seq in range(2, 9))]
    await store.create_session(created_at("s1", 1), owner="alice")
    for event in events:
        await store.append("s1", [event])
    other = await open_store(backend_url(name, tmp_path), timeout=10)
    try:
        assert await listed_synopsis(other, "s1") == synopsis_of([events]) == Synopsis("Hello there", EPOCH + 8, 3, 4)
        await other.append("s1", [titled(9, "Named elsewhere")])
        assert await listed_synopsis(store, "s1") == Synopsis("Named elsewhere", EPOCH + 9, 3, 4)
    finally:
        await other.close()


# Readiness.


async def test_an_open_store_is_ready_before_and_after_it_is_used(store: HistoryStore) -> None:
    await store.check_ready()
    await write(store, multi_turn(seed=6, turns=2), [5, 100])
    await store.read_page("s1", through=None, before=None, max_messages=2)
    await store.check_ready()

"""The Durable Streams store contract (persistence/streams/), run against every backend that keeps streams."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import accumulate, cycle
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from codec import PIECE_BYTES, json_array
from persistence.errors import (
    ProducerFencedError,
    ProducerGapError,
    StreamBodyTooLargeError,
    StreamClosedError,
    StreamConflictError,
    StreamGoneError,
    StreamNotFoundError,
    StreamRequestError,
    StreamValueTooLargeError,
)
from persistence.streams import (
    AppendOutcome,
    AppendRequest,
    Chunk,
    CreateRequest,
    MemoryStreams,
    ProducerClaim,
    StreamMeta,
    StreamStore,
    SubscriptionRecord,
    rules,
    subscribed,
)
from persistence.streams.rules import MAX_FORK_DEPTH, MAX_SUB_PREFIX, PRODUCER_TTL_MS
from testing.stores import BACKENDS, open_backend
from tests.persistence.streams.conftest import STREAM_BACKEND_NAMES, Clock

pytestmark = pytest.mark.anyio

OWNER = "alice"
BYTES = "application/octet-stream"
JSON = "application/json"
PAST_AT, PAST_MS = "2001-09-09T01:46:40Z", 1_000_000_000_000
FUTURE_AT, FUTURE_MS = "2999-01-01T00:00:00Z", 32_472_144_000_000
# Examples share one store (a fresh name each), and each write on SQL is a commit: keep them few.
EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
BUDGETS = st.lists(st.integers(1, 700), min_size=1, max_size=6)


def budgets(sizes: list[int]) -> Callable[[], int]:
    """A client whose reads ask for these budgets in turn, again and again."""
    return cycle(sizes).__next__


LARGE_READS = budgets([1 << 20])


async def create(
    streams: StreamStore, name: str, body: bytes = b"", *, content_type: str | None = BYTES, **fields: object
) -> tuple[StreamMeta, bool]:
    request = CreateRequest(name=name, owner=OWNER, content_type=content_type, body=body, **fields)  # type: ignore[arg-type]
    return await streams.create(request)


async def append(
    streams: StreamStore,
    name: str,
    body: bytes = b"",
    *,
    content_type: str | None = None,
    producer: tuple[str, int, int] | None = None,
    **fields: object,
) -> AppendOutcome:
    claim = None if producer is None else ProducerClaim(*producer)
    request = AppendRequest(name=name, owner=OWNER, content_type=content_type, body=body, producer=claim, **fields)  # type: ignore[arg-type]
    return await streams.append(request)


async def read_chunks(
    streams: StreamStore, name: str, budget: Callable[[], int] = LARGE_READS, *, after: int = 0
) -> list[Chunk]:
    """Every chunk past ``after``, read as a client reads: again from the last end until the read is complete.

    Each read is checked: positions count bytes, and it stays within the budget unless it is one piece.
    """
    found: list[Chunk] = []
    for _ in range(10_000):
        asked = budget()
        result = await streams.read(name, OWNER, after, asked)
        chunks = result.chunks
        # A read holds no more than it was asked for, unless one piece alone is more.
        assert len(chunks) == 1 or sum(len(chunk.data) for chunk in chunks) <= asked
        end = after
        for chunk in chunks:
            assert chunk.data and chunk.end - end == len(chunk.data)
            end = chunk.end
        found += chunks
        if result.complete:
            assert end == max(after, result.meta.tail)
            return found
        assert chunks, "an incomplete read must make progress"
        after = end
    raise AssertionError("the reads never completed")


async def read_all(streams: StreamStore, name: str, budget: Callable[[], int] = LARGE_READS) -> bytes:
    return b"".join(chunk.data for chunk in await read_chunks(streams, name, budget))


async def assert_gone(streams: StreamStore, name: str) -> None:
    with pytest.raises(StreamGoneError):
        await streams.head(name, OWNER)
    with pytest.raises(StreamGoneError):
        await streams.read(name, OWNER, 0, 100)
    with pytest.raises(StreamGoneError):
        await append(streams, name, b"x")
    with pytest.raises(StreamConflictError):
        await create(streams, name)


async def assert_not_found(streams: StreamStore, name: str, owner: str = OWNER) -> None:
    with pytest.raises(StreamNotFoundError):
        await streams.head(name, owner)
    with pytest.raises(StreamNotFoundError):
        await streams.read(name, owner, 0, 100)
    with pytest.raises(StreamNotFoundError):
        await streams.append(AppendRequest(name=name, owner=owner, content_type=None, body=b"x"))
    with pytest.raises(StreamNotFoundError):
        await streams.delete(name, owner)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_contract_runs_on_every_store_that_keeps_streams(backend: str, tmp_path: Path) -> None:
    """The JSONL store keeps none (its ``streams`` is None); every store with streams is in the contract's matrix."""
    store = await open_backend(backend, tmp_path)
    try:
        assert (store.streams is not None) == (backend in STREAM_BACKEND_NAMES)
        assert (store.streams is None) == backend.startswith("jsonl")
    finally:
        await store.close()


# Create.


async def test_create_then_an_alike_create_is_idempotent(streams: StreamStore) -> None:
    meta, created = await create(streams, "s", b"hello", content_type="text/plain; charset=utf-8", ttl_seconds=60)
    assert created and (meta.name, meta.owner, meta.tail, meta.ttl_seconds) == ("s", OWNER, 5, 60)
    again, created = await create(streams, "s", b"other body", content_type="TEXT/PLAIN", ttl_seconds=60)
    assert not created and again.tail == 5 and again.content_type == "text/plain; charset=utf-8"
    assert await read_all(streams, "s") == b"hello"


async def test_a_create_without_a_content_type_makes_a_byte_stream(streams: StreamStore) -> None:
    meta, created = await create(streams, "s", content_type=None)
    assert created and meta.content_type == BYTES and meta.tail == 0
    assert (await create(streams, "s", content_type=None))[1] is False
    assert (await create(streams, "s", content_type=BYTES))[1] is False


@pytest.mark.parametrize(
    "fields",
    [
        {"content_type": "text/plain"},
        {"ttl_seconds": 60},
        {"expires_at": FUTURE_AT, "expires_ms": FUTURE_MS},
        {"closed": True},
    ],
    ids=["content-type", "ttl", "expires-at", "closed"],
)
async def test_a_create_that_disagrees_is_a_conflict(streams: StreamStore, fields: dict[str, object]) -> None:
    await create(streams, "s", b"abc")
    with pytest.raises(StreamConflictError):
        await create(streams, "s", **fields)  # type: ignore[arg-type]
    assert await read_all(streams, "s") == b"abc"


async def test_a_stream_created_closed_refuses_appends(streams: StreamStore) -> None:
    meta, _ = await create(streams, "s", b"final", closed=True)
    assert meta.closed and meta.tail == 5
    with pytest.raises(StreamClosedError) as refused:
        await append(streams, "s", b"more")
    assert refused.value.tail == 5
    assert (await create(streams, "s", b"final", closed=True))[1] is False


# Appends and reads.


async def test_appends_return_the_tail_and_read_back_in_order(streams: StreamStore) -> None:
    await create(streams, "s", b"ab")
    assert (await append(streams, "s", b"cde", content_type=BYTES)).tail == 5
    outcome = await append(streams, "s", b"\x00\xff\n")
    assert (outcome.status, outcome.tail, outcome.closed, outcome.producer_seq) == ("appended", 8, False, None)
    assert [(c.end, c.data) for c in (await streams.read("s", OWNER, 0, 1 << 20)).chunks] == [
        (2, b"ab"),
        (5, b"cde"),
        (8, b"\x00\xff\n"),
    ]
    assert [c.data for c in (await streams.read("s", OWNER, 2, 1 << 20)).chunks] == [b"cde", b"\x00\xff\n"]
    assert (await streams.head("s", OWNER)).tail == 8


async def test_a_read_at_the_tail_is_empty_and_complete_and_one_past_it_is_refused(streams: StreamStore) -> None:
    await create(streams, "s", b"abc")
    result = await streams.read("s", OWNER, 3, 100)
    assert result.chunks == [] and result.complete and result.meta.tail == 3
    for after in (4, 2**62):
        with pytest.raises(StreamRequestError):
            await streams.read("s", OWNER, after, 100)


async def test_an_append_of_another_content_type_is_a_conflict(streams: StreamStore) -> None:
    await create(streams, "s", content_type="text/plain")
    with pytest.raises(StreamConflictError):
        await append(streams, "s", b"x", content_type="application/json")
    assert (await append(streams, "s", b"x", content_type="Text/Plain; charset=utf-8")).tail == 1


@EXAMPLES
@given(st.binary(max_size=100), st.lists(st.binary(min_size=1, max_size=300), max_size=15), BUDGETS)
async def test_appends_read_back_byte_for_byte_under_any_budget(
    streams: StreamStore, names: Iterator[str], initial: bytes, bodies: list[bytes], sizes: list[int]
) -> None:
    name = next(names)
    meta, _ = await create(streams, name, initial)
    tails = [(await append(streams, name, body)).tail for body in bodies]
    assert [meta.tail, *tails] == list(accumulate([len(initial), *map(len, bodies)]))
    assert await read_all(streams, name, budgets(sizes)) == initial + b"".join(bodies)


# JSON mode.


async def test_a_json_stream_stores_fragments_and_reads_as_one_array(streams: StreamStore) -> None:
    meta, _ = await create(streams, "j", b"[]", content_type=JSON)
    assert meta.tail == 0 and await read_all(streams, "j") == b""
    for body in (b' {"a" :  1} ', b'[2, "x", [3]]', b"true"):
        await append(streams, "j", body, content_type="application/json; charset=utf-8")
    chunks = await read_chunks(streams, "j")
    assert [chunk.data for chunk in chunks] == [b'{"a" :  1},', b'2,"x",[3],', b"true,"]
    assert json_array(chunk.data for chunk in chunks) == b'[{"a" :  1},2,"x",[3],true]'
    assert (await streams.head("j", OWNER)).tail == len(b'{"a" :  1},2,"x",[3],true,')


async def test_a_json_create_with_values_stores_them(streams: StreamStore) -> None:
    meta, _ = await create(streams, "j", b"[1, 2]", content_type=JSON)
    assert meta.tail == 4 and await read_all(streams, "j") == b"1,2,"


@pytest.mark.parametrize("body", [b"{", b"[]", b'"\xff"', b"1 2"], ids=["invalid", "empty-array", "utf8", "two"])
async def test_a_json_append_that_is_not_one_value_is_refused(streams: StreamStore, body: bytes) -> None:
    await create(streams, "j", b"1", content_type=JSON)
    with pytest.raises(StreamRequestError):
        await append(streams, "j", body, content_type=JSON)
    assert await read_all(streams, "j") == b"1,"


async def test_a_json_create_with_invalid_json_creates_nothing(streams: StreamStore) -> None:
    with pytest.raises(StreamRequestError):
        await create(streams, "j", b"[1,", content_type=JSON)
    await assert_not_found(streams, "j")


async def test_a_json_body_past_its_value_limit_writes_nothing_and_a_byte_body_is_not_counted(
    streams: StreamStore,
) -> None:
    # Values are counted as every JSON body of the API is: commas, arrays and objects (codec.values_within).
    within, past = b"[" + b"{}," * 2 + b"{}]", b"[" + b"{}," * 3 + b"{}]"
    await create(streams, "j", within, content_type=JSON, max_values=8)
    with pytest.raises(StreamBodyTooLargeError):
        await append(streams, "j", past, content_type=JSON, max_values=8)
    with pytest.raises(StreamBodyTooLargeError):
        await create(streams, "k", past, content_type=JSON, max_values=8)
    with pytest.raises(StreamBodyTooLargeError):
        # A fork without a Content-Type is its source's JSON: counted too.
        await create(streams, "fork", past, content_type=None, forked_from="j", max_values=8)
    assert await read_all(streams, "j") == b"{},{},{},"
    await assert_not_found(streams, "k")
    await assert_not_found(streams, "fork")
    await create(streams, "b", past, max_values=8)
    assert await read_all(streams, "b") == past


# Idempotent producers.


async def test_a_producer_appends_in_seq_order_and_a_resend_is_a_duplicate(streams: StreamStore) -> None:
    await create(streams, "s")
    for seq in range(3):
        outcome = await append(streams, "s", b"%d" % seq, producer=("p", 0, seq))
        assert (outcome.status, outcome.producer_seq, outcome.tail) == ("appended", seq, seq + 1)
    for seq in (0, 1, 2):
        duplicate = await append(streams, "s", b"%d" % seq, producer=("p", 0, seq))
        assert (duplicate.status, duplicate.producer_seq, duplicate.tail) == ("duplicate", 2, 3)
    assert await read_all(streams, "s") == b"012"


async def test_a_new_producer_must_start_at_seq_zero(streams: StreamStore) -> None:
    await create(streams, "s")
    with pytest.raises(ProducerGapError) as refused:
        await append(streams, "s", b"x", producer=("p", 0, 1))
    assert (refused.value.expected, refused.value.received) == (0, 1)
    assert (await append(streams, "s", b"x", producer=("p", 0, 0))).status == "appended"


async def test_a_producer_seq_that_skips_ahead_is_a_gap(streams: StreamStore) -> None:
    await create(streams, "s")
    await append(streams, "s", b"a", producer=("p", 0, 0))
    with pytest.raises(ProducerGapError) as refused:
        await append(streams, "s", b"c", producer=("p", 0, 2))
    assert (refused.value.expected, refused.value.received) == (1, 2)
    assert (await append(streams, "s", b"b", producer=("p", 0, 1))).tail == 2
    assert await read_all(streams, "s") == b"ab"


async def test_a_new_epoch_fences_the_old_one_and_must_start_at_zero(streams: StreamStore) -> None:
    await create(streams, "s")
    await append(streams, "s", b"a", producer=("p", 0, 0))
    await append(streams, "s", b"b", producer=("p", 0, 1))
    with pytest.raises(StreamRequestError):
        await append(streams, "s", b"c", producer=("p", 1, 1))
    assert (await append(streams, "s", b"c", producer=("p", 1, 0))).status == "appended"
    with pytest.raises(ProducerFencedError) as fenced:
        await append(streams, "s", b"d", producer=("p", 0, 2))
    assert fenced.value.epoch == 1
    assert (await append(streams, "s", b"d", producer=("p", 1, 1))).producer_seq == 1
    assert await read_all(streams, "s") == b"abcd"


async def test_producers_are_independent_of_each_other_and_of_streams(streams: StreamStore) -> None:
    await create(streams, "s")
    await create(streams, "t")
    await append(streams, "s", b"a", producer=("p", 0, 0))
    assert (await append(streams, "s", b"b", producer=("q", 0, 0))).status == "appended"
    assert (await append(streams, "t", b"c", producer=("p", 0, 0))).status == "appended"
    assert await read_all(streams, "s") == b"ab"


async def test_a_refused_append_does_not_advance_its_producer(streams: StreamStore) -> None:
    await create(streams, "j", content_type=JSON)
    await append(streams, "j", b"1", content_type=JSON, producer=("p", 0, 0))
    with pytest.raises(StreamRequestError):
        await append(streams, "j", b"[2,", content_type=JSON, producer=("p", 0, 1))
    with pytest.raises(StreamConflictError):
        await append(streams, "j", b"2", content_type="text/plain", producer=("p", 0, 1))
    await append(streams, "j", b"2", content_type=JSON, stream_seq="b")
    with pytest.raises(StreamConflictError):
        await append(streams, "j", b"2", content_type=JSON, producer=("p", 0, 1), stream_seq="a")
    with pytest.raises(ProducerGapError) as refused:
        await append(streams, "j", b"3", content_type=JSON, producer=("p", 0, 2))
    assert refused.value.expected == 1
    outcome = await append(streams, "j", b"[3]", content_type=JSON, producer=("p", 0, 1))
    assert (outcome.status, outcome.producer_seq) == ("appended", 1)
    assert await read_all(streams, "j") == b"1,2,3,"


async def test_a_producer_not_heard_from_for_its_ttl_is_forgotten(streams: StreamStore, clock: Clock) -> None:
    await create(streams, "s")
    await append(streams, "s", b"a", producer=("p", 3, 0))
    await append(streams, "s", b"b", producer=("p", 3, 1))
    clock.now += PRODUCER_TTL_MS
    assert (await append(streams, "s", b"b", producer=("p", 3, 1))).status == "duplicate"
    clock.now += PRODUCER_TTL_MS + 1
    with pytest.raises(ProducerGapError):
        await append(streams, "s", b"c", producer=("p", 3, 2))
    assert (await append(streams, "s", b"c", producer=("p", 0, 0))).status == "appended"


# Stream-Seq.


async def test_stream_seq_must_sort_after_the_last_one_bytewise(streams: StreamStore) -> None:
    await create(streams, "s")
    await append(streams, "s", b"a", stream_seq="9")
    for stale in ("9", "10", "8"):
        with pytest.raises(StreamConflictError):
            await append(streams, "s", b"x", stream_seq=stale)
    await append(streams, "s", b"b")
    await append(streams, "s", b"c", stream_seq="90")
    assert (await streams.head("s", OWNER)).stream_seq == "90"
    assert await read_all(streams, "s") == b"abc"


# Close.


async def test_an_append_after_close_is_refused_with_the_tail(streams: StreamStore) -> None:
    await create(streams, "s", b"ab")
    outcome = await append(streams, "s", b"c", close=True)
    assert (outcome.status, outcome.tail, outcome.closed) == ("appended", 3, True)
    with pytest.raises(StreamClosedError) as refused:
        await append(streams, "s", b"d")
    assert refused.value.tail == 3
    with pytest.raises(StreamClosedError):
        await append(streams, "s", b"d", producer=("p", 0, 0))
    result = await streams.read("s", OWNER, 0, 100)
    assert result.meta.closed and result.complete and b"".join(c.data for c in result.chunks) == b"abc"


async def test_a_close_without_a_body_is_idempotent(streams: StreamStore) -> None:
    await create(streams, "s", b"ab")
    for _ in range(2):
        outcome = await append(streams, "s", close=True)
        assert (outcome.status, outcome.tail, outcome.closed) == ("appended", 2, True)
    assert (await streams.head("s", OWNER)).closed


async def test_the_closing_producer_retried_is_a_duplicate(streams: StreamStore) -> None:
    await create(streams, "s")
    await append(streams, "s", b"a", producer=("p", 0, 0))
    closing = await append(streams, "s", b"b", close=True, producer=("p", 0, 1))
    assert (closing.status, closing.tail, closing.closed, closing.producer_seq) == ("appended", 2, True, 1)
    retried = await append(streams, "s", b"b", close=True, producer=("p", 0, 1))
    assert (retried.status, retried.tail, retried.closed, retried.producer_seq) == ("duplicate", 2, True, 1)
    with pytest.raises(StreamClosedError):
        await append(streams, "s", b"c", producer=("p", 0, 2))
    assert await read_all(streams, "s") == b"ab"


async def test_a_close_only_producer_retried_is_a_duplicate(streams: StreamStore) -> None:
    await create(streams, "s", b"a")
    assert (await append(streams, "s", close=True, producer=("p", 0, 0))).status == "appended"
    retried = await append(streams, "s", close=True, producer=("p", 0, 0))
    assert (retried.status, retried.closed, retried.producer_seq, retried.tail) == ("duplicate", True, 0, 1)


# Forks.


async def test_a_fork_reads_its_source_up_to_the_fork_then_its_own(streams: StreamStore) -> None:
    await create(streams, "src", b"abc")
    await append(streams, "src", b"de")
    fork, created = await create(streams, "fork", content_type=None, forked_from="src", fork_at=3)
    assert created and (fork.tail, fork.forked_from, fork.fork_at, fork.content_type) == (3, "src", 3, BYTES)
    await append(streams, "fork", b"XY")
    await append(streams, "src", b"fg")
    assert await read_all(streams, "fork") == b"abcXY"
    assert await read_all(streams, "src") == b"abcdefg"
    assert [c.data for c in await read_chunks(streams, "fork", after=3)] == [b"XY"]
    with pytest.raises(StreamRequestError):
        await read_chunks(streams, "fork", after=1 << 40)


async def test_a_fork_without_an_offset_forks_at_the_tail_and_is_recreated_alike(streams: StreamStore) -> None:
    await create(streams, "src", b"abc", content_type="text/plain")
    fork, _ = await create(streams, "fork", content_type=None, forked_from="src")
    assert (fork.fork_at, fork.tail, fork.content_type) == (3, 3, "text/plain")
    await append(streams, "src", b"d")
    assert (await create(streams, "fork", content_type=None, forked_from="src"))[1] is False
    assert (await create(streams, "fork", content_type="text/plain", forked_from="src", fork_at=3))[1] is False
    with pytest.raises(StreamConflictError):
        await create(streams, "fork", content_type=None, forked_from="src", fork_at=0)
    assert await read_all(streams, "fork") == b"abc"


async def test_a_fork_that_cannot_be_made_is_refused(streams: StreamStore) -> None:
    await create(streams, "src", b"abc", content_type="text/plain")
    with pytest.raises(StreamNotFoundError):
        await create(streams, "fork", content_type=None, forked_from="missing")
    with pytest.raises(StreamConflictError):
        await create(streams, "fork", content_type=JSON, forked_from="src")
    with pytest.raises(StreamRequestError):
        await create(streams, "fork", content_type=None, forked_from="src", fork_at=4)
    await assert_not_found(streams, "fork")
    await streams.delete("src", OWNER)
    await assert_not_found(streams, "src")


async def test_a_fork_with_its_own_body_starts_with_it(streams: StreamStore) -> None:
    await create(streams, "src", b"a")
    await append(streams, "src", b"b")
    fork, _ = await create(streams, "fork", b"cd", content_type=None, forked_from="src", fork_at=1)
    assert fork.tail == 3
    assert await read_all(streams, "fork") == b"acd"


async def test_a_binary_sub_offset_takes_the_first_bytes_of_the_next_append(streams: StreamStore) -> None:
    await create(streams, "src", b"abc")
    await append(streams, "src", b"defgh")
    fork, _ = await create(streams, "fork", content_type=None, forked_from="src", fork_at=3, fork_sub=2)
    assert (fork.tail, fork.fork_at, fork.fork_sub) == (5, 3, 2)
    await append(streams, "fork", b"X")
    assert [(c.end, c.data) for c in await read_chunks(streams, "fork")] == [(3, b"abc"), (5, b"de"), (6, b"X")]
    assert (await create(streams, "fork", content_type=None, forked_from="src", fork_at=3, fork_sub=2))[1] is False
    with pytest.raises(StreamRequestError):
        await create(streams, "past", content_type=None, forked_from="src", fork_at=3, fork_sub=6)
    with pytest.raises(StreamRequestError):
        await create(streams, "end", content_type=None, forked_from="src", fork_at=8, fork_sub=1)


async def test_a_json_sub_offset_takes_the_first_values_of_the_next_append(streams: StreamStore) -> None:
    await create(streams, "src", b"[1]", content_type=JSON)
    await append(streams, "src", b'[{"a": 2}, 3, "x"]', content_type=JSON)
    fork, _ = await create(streams, "fork", content_type=None, forked_from="src", fork_at=2, fork_sub=2)
    assert fork.tail == 2 + len(b'{"a": 2},3,') and fork.content_type == JSON
    await append(streams, "fork", b"4", content_type=JSON)
    assert json_array(c.data for c in await read_chunks(streams, "fork")) == b'[1,{"a": 2},3,4]'
    with pytest.raises(StreamRequestError):
        await create(streams, "past", content_type=None, forked_from="src", fork_at=2, fork_sub=4)


async def test_a_three_level_chain_reads_through_every_level(streams: StreamStore) -> None:
    await create(streams, "a", b"a1")
    await append(streams, "a", b"a2")
    await create(streams, "b", content_type=None, forked_from="a", fork_at=2)
    await append(streams, "b", b"b1")
    await append(streams, "a", b"a3")
    await create(streams, "c", content_type=None, forked_from="b", fork_at=4)
    await append(streams, "c", b"c1")
    await append(streams, "b", b"b2")
    for budget in (1, 2, 3, 5, 100):
        assert await read_all(streams, "a", budgets([budget])) == b"a1a2a3"
        assert await read_all(streams, "b", budgets([budget])) == b"a1b1b2"
        assert await read_all(streams, "c", budgets([budget])) == b"a1b1c1"
    assert [c.data for c in await read_chunks(streams, "c", after=2)] == [b"b1", b"c1"]


async def test_a_deleted_source_is_gone_to_all_but_its_forks_until_the_last_goes(streams: StreamStore) -> None:
    await create(streams, "src", b"ab")
    await create(streams, "f1", content_type=None, forked_from="src")
    await create(streams, "f2", b"2", content_type=None, forked_from="src")
    await streams.delete("src", OWNER)
    await assert_gone(streams, "src")
    with pytest.raises(StreamGoneError):
        await streams.delete("src", OWNER)
    with pytest.raises(StreamConflictError):
        await create(streams, "f3", content_type=None, forked_from="src")
    await streams.delete("f1", OWNER)
    await assert_not_found(streams, "f1")
    await assert_gone(streams, "src")
    assert await read_all(streams, "f2") == b"ab2"
    await streams.delete("f2", OWNER)
    await assert_not_found(streams, "src")
    meta, created = await create(streams, "src", b"new")
    assert created and await read_all(streams, "src") == b"new"


async def test_deleting_the_last_fork_of_a_chain_removes_every_gone_source(streams: StreamStore) -> None:
    await create(streams, "a", b"a")
    await create(streams, "b", b"b", content_type=None, forked_from="a")
    await create(streams, "c", b"c", content_type=None, forked_from="b")
    await streams.delete("a", OWNER)
    await streams.delete("b", OWNER)
    await assert_gone(streams, "a")
    await assert_gone(streams, "b")
    assert await read_all(streams, "c", lambda: 1) == b"abc"
    await streams.delete("c", OWNER)
    for name in "abc":
        await assert_not_found(streams, name)
        assert (await create(streams, name))[1]


async def test_deleting_a_fork_keeps_a_source_that_was_not_deleted(streams: StreamStore) -> None:
    await create(streams, "src", b"ab")
    await create(streams, "fork", content_type=None, forked_from="src")
    await streams.delete("fork", OWNER)
    assert await read_all(streams, "src") == b"ab"
    await streams.delete("src", OWNER)
    await assert_not_found(streams, "src")


async def test_a_refused_fork_leaves_its_source_without_a_reference(streams: StreamStore) -> None:
    await create(streams, "src", b"[1]", content_type=JSON)
    with pytest.raises(StreamRequestError):
        await create(streams, "fork", b"[2,", content_type=None, forked_from="src")
    with pytest.raises(StreamRequestError):
        await create(streams, "fork", content_type=None, forked_from="src", fork_at=2, fork_sub=1)
    await assert_not_found(streams, "fork")
    assert (await streams.head("src", OWNER)).refs == 0
    await streams.delete("src", OWNER)
    await assert_not_found(streams, "src")


@st.composite
def chains(draw: st.DrawFn) -> list[tuple[list[bytes], list[bytes], int]]:
    """Up to three levels, each a fork of the one before: its own appends, then the previous level's later
    appends (which it must not see), and which of the previous level's append ends it forks at."""
    appends = st.lists(st.binary(min_size=1, max_size=40), max_size=6)
    levels = draw(st.integers(1, 3))
    return [(draw(appends), draw(appends), draw(st.integers(0, 20))) for _ in range(levels)]


@EXAMPLES
@given(chains(), BUDGETS)
async def test_a_fork_chain_reads_its_prefixes_and_its_own_under_any_budget(
    streams: StreamStore, names: Iterator[str], chain: list[tuple[list[bytes], list[bytes], int]], sizes: list[int]
) -> None:
    contents: list[bytes] = []
    ends: list[list[int]] = []
    levels: list[str] = []
    for own, later, pick in chain:
        name = next(names)
        if not levels:
            await create(streams, name)
            content, boundaries = b"", [0]
        else:
            at = ends[-1][pick % len(ends[-1])]
            meta, _ = await create(streams, name, content_type=None, forked_from=levels[-1], fork_at=at)
            assert meta.tail == at
            content, boundaries = contents[-1][:at], [end for end in ends[-1] if end <= at]
        for body in own:
            content += body
            boundaries.append((await append(streams, name, body)).tail)
            assert boundaries[-1] == len(content)
        if levels:
            for body in later:
                contents[-1] += body
                ends[-1].append((await append(streams, levels[-1], body)).tail)
        levels.append(name)
        contents.append(content)
        ends.append(boundaries)
    for name, content in zip(levels, contents, strict=True):
        assert await read_all(streams, name, budgets(sizes)) == content
        assert await read_all(streams, name, budgets([size % 50 + 1 for size in sizes])) == content


# Expiry.


def test_a_stream_expires_at_its_time_or_its_ttl_past_its_last_use() -> None:
    meta = StreamMeta(name="s", owner=OWNER, content_type=BYTES, created_ms=1_000, accessed_ms=5_000, ttl_seconds=1)
    assert not meta.expired(5_999) and meta.expired(6_000) and meta.expired(10**15)
    absolute = msgspec.structs.replace(meta, ttl_seconds=None, expires_ms=5_500)
    assert not absolute.expired(5_499) and absolute.expired(5_500)
    both = msgspec.structs.replace(meta, expires_ms=5_500)
    assert not both.expired(5_499) and both.expired(5_500)
    assert not msgspec.structs.replace(meta, ttl_seconds=None).expired(10**15)


async def test_an_expired_stream_reads_as_unknown_until_swept(streams: StreamStore) -> None:
    await create(streams, "old", b"x", expires_at=PAST_AT, expires_ms=PAST_MS)
    await create(streams, "older", b"x", expires_at=PAST_AT, expires_ms=PAST_MS)
    await create(streams, "later", b"x", expires_at=FUTURE_AT, expires_ms=FUTURE_MS)
    await create(streams, "plain", b"x")
    await assert_not_found(streams, "old")
    now = FUTURE_MS - 1
    assert sorted(await streams.expired(now, 10)) == ["old", "older"]
    assert len(await streams.expired(now, 1)) == 1
    assert await streams.expired(PAST_MS - 1, 10) == []
    assert await streams.sweep("old")
    assert await streams.expired(now, 10) == ["older"]
    assert not await streams.sweep("old")
    assert not await streams.sweep("later")
    assert not await streams.sweep("plain")
    assert not await streams.sweep("missing")
    assert await read_all(streams, "later") == b"x"
    meta, created = await create(streams, "old", b"y")
    assert created and await read_all(streams, "old") == b"y"


async def test_a_create_over_an_expired_stream_starts_it_anew(streams: StreamStore) -> None:
    await create(streams, "s", b"old", expires_at=PAST_AT, expires_ms=PAST_MS)
    meta, created = await create(streams, "s", b"new", expires_at=PAST_AT, expires_ms=PAST_MS)
    assert created and meta.tail == 3
    meta, created = await create(streams, "s", b"newer", content_type="text/plain")
    assert created and await read_all(streams, "s") == b"newer"


async def test_the_store_lists_a_ttl_stream_as_expired_at_its_ttl_past_its_last_use(streams: StreamStore) -> None:
    meta, _ = await create(streams, "t", ttl_seconds=1)
    assert await streams.expired(meta.accessed_ms + 999, 10) == []
    assert await streams.expired(meta.accessed_ms + 1_000, 10) == ["t"]


async def test_a_touch_or_a_write_restarts_the_ttl(streams: StreamStore, clock: Clock) -> None:
    await create(streams, "t", ttl_seconds=10)
    clock.now += 9_000
    await streams.touch("t")
    clock.now += 9_999
    assert (await streams.head("t", OWNER)).accessed_ms == clock.now - 9_999
    await append(streams, "t", b"x")
    clock.now += 9_999
    assert await read_all(streams, "t") == b"x"
    clock.now += 1
    await assert_not_found(streams, "t")
    await streams.touch("t")
    await streams.touch("missing")
    await assert_not_found(streams, "t")


async def test_an_expired_source_with_forks_is_gone_and_a_sweep_only_marks_it(
    streams: StreamStore, clock: Clock
) -> None:
    await create(streams, "src", b"ab", ttl_seconds=60)
    inherited, _ = await create(streams, "heir", content_type=None, forked_from="src")
    assert inherited.ttl_seconds == 60
    await streams.delete("heir", OWNER)
    await create(streams, "fork", b"c", content_type=None, forked_from="src", ttl_seconds=3600)
    clock.now += 60_000
    with pytest.raises(StreamGoneError):
        await streams.head("src", OWNER)
    with pytest.raises(StreamGoneError):
        await streams.read("src", OWNER, 0, 100)
    assert await streams.expired(clock.now, 10) == ["src"]
    assert await streams.sweep("src")
    assert await streams.expired(clock.now, 10) == []
    assert not await streams.sweep("src")
    await assert_gone(streams, "src")
    assert await read_all(streams, "fork") == b"abc"
    await streams.delete("fork", OWNER)
    await assert_not_found(streams, "src")
    assert (await create(streams, "src"))[1]


async def test_an_expired_source_with_forks_refuses_a_create_and_is_then_swept_as_gone(
    streams: StreamStore, clock: Clock
) -> None:
    await create(streams, "src", b"ab", ttl_seconds=60)
    await create(streams, "fork", content_type=None, forked_from="src", ttl_seconds=3600)
    clock.now += 60_000
    with pytest.raises(StreamConflictError):
        await create(streams, "src", ttl_seconds=60)
    await assert_gone(streams, "src")
    for name in await streams.expired(clock.now, 10):
        await streams.sweep(name)
    assert await streams.expired(clock.now, 10) == []
    await assert_gone(streams, "src")
    assert await read_all(streams, "fork") == b"ab"


# Owners.


async def test_another_owner_finds_no_stream(streams: StreamStore) -> None:
    await create(streams, "s", b"mine")
    await assert_not_found(streams, "s", owner="bob")
    with pytest.raises(StreamNotFoundError):
        await streams.create(CreateRequest(name="theirs", owner="bob", content_type=None, forked_from="s"))
    with pytest.raises(StreamConflictError):
        await streams.create(CreateRequest(name="s", owner="bob", content_type=BYTES))
    assert await read_all(streams, "s") == b"mine"
    assert (await streams.head("s", OWNER)).owner == OWNER


async def test_a_fork_chain_is_bounded_so_no_read_walks_without_end(streams: StreamStore) -> None:
    await create(streams, "level-0", b"x")
    for level in range(1, MAX_FORK_DEPTH + 1):
        meta, _ = await create(streams, f"level-{level}", forked_from=f"level-{level - 1}")
        assert meta.depth == level
    with pytest.raises(StreamRequestError, match="at most 32 forks deep"):
        await create(streams, "too-deep", forked_from=f"level-{MAX_FORK_DEPTH}")
    assert [chunk.data for chunk in await read_chunks(streams, f"level-{MAX_FORK_DEPTH}")] == [b"x"]


async def test_a_sub_offset_copies_a_bounded_prefix(streams: StreamStore) -> None:
    await create(streams, "big", b"y" * (MAX_SUB_PREFIX + 10))
    with pytest.raises(StreamRequestError, match="at most"):
        await create(streams, "copy", forked_from="big", fork_at=0, fork_sub=MAX_SUB_PREFIX + 1)
    meta, _ = await create(streams, "copy", forked_from="big", fork_at=0, fork_sub=MAX_SUB_PREFIX)
    assert meta.tail == MAX_SUB_PREFIX


def test_a_read_never_answers_past_the_tail_its_metadata_gave() -> None:
    # A reader that sees each statement's own snapshot (PostgreSQL autocommit) may read the
    # stream's metadata before an append and its chunks after it: the read must stop at that tail.
    store = MemoryStreams()
    tx = store._tx
    owner_meta = StreamMeta(name="s", owner=OWNER, content_type=BYTES, created_ms=0, accessed_ms=0)
    tx.save(owner_meta)
    tx.add("s", Chunk(3, b"abc"))
    tx.save(msgspec.structs.replace(owner_meta, tail=3))
    stale = tx.meta("s")

    class Racing:
        def meta(self, name: str) -> StreamMeta | None:
            return stale

        def __getattr__(self, attribute: str) -> object:
            return getattr(tx, attribute)

    tx.add("s", Chunk(5, b"de"))  # committed between the two statements
    meta, chunks, complete = rules.read(Racing(), "s", OWNER, 0, 1 << 20, 1)  # type: ignore[arg-type]
    assert meta.tail == 3 and [chunk.end for chunk in chunks] == [3] and complete


async def test_an_append_past_a_piece_is_stored_and_read_in_pieces_within_the_budget(streams: StreamStore) -> None:
    body = bytes(range(256)) * (PIECE_BYTES * 5 // 2 // 256)
    await create(streams, "big")
    tail = (await append(streams, "big", body)).tail
    first = await streams.read("big", OWNER, 0, PIECE_BYTES)
    assert [(c.end, len(c.data)) for c in first.chunks] == [(PIECE_BYTES, PIECE_BYTES)] and not first.complete
    assert (await streams.read("big", OWNER, 0, 10)).chunks == first.chunks  # at least one piece, never more
    rest = await read_chunks(streams, "big", after=PIECE_BYTES)
    assert [c.end for c in rest] == [2 * PIECE_BYTES, tail]
    assert first.chunks[0].data + b"".join(c.data for c in rest) == body


async def test_a_text_append_is_cut_between_characters_and_json_between_values(streams: StreamStore) -> None:
    text = "aé€😀" * (PIECE_BYTES // 5)
    await create(streams, "text", content_type="text/plain")
    await append(streams, "text", text.encode())
    pieces = await read_chunks(streams, "text", budgets([1]))
    assert len(pieces) > 1 and all(len(c.data) <= PIECE_BYTES for c in pieces)
    assert "".join(c.data.decode() for c in pieces) == text
    values = [f'"{n:0{PIECE_BYTES // 8}d}"'.encode() for n in range(20)]
    await create(streams, "json", content_type=JSON)
    await append(streams, "json", b"[" + b",".join(values) + b"]")
    fragments = await read_chunks(streams, "json", budgets([1]))
    assert len(fragments) > 1 and all(len(c.data) <= PIECE_BYTES for c in fragments)
    assert msgspec.json.decode(json_array(c.data for c in fragments)) == [msgspec.json.decode(v) for v in values]


async def test_a_json_value_larger_than_a_piece_is_refused_and_leaves_no_trace(streams: StreamStore) -> None:
    await create(streams, "json", content_type=JSON)
    huge = b'"' + b"x" * PIECE_BYTES + b'"'
    with pytest.raises(StreamValueTooLargeError):
        await append(streams, "json", b"[1," + huge + b"]")
    with pytest.raises(StreamValueTooLargeError):
        await create(streams, "other", huge, content_type=JSON)
    assert (await streams.head("json", OWNER)).tail == 0
    assert await read_all(streams, "json") == b""


async def test_an_offset_must_lie_between_two_pieces(streams: StreamStore) -> None:
    await create(streams, "s", b"abc")
    await append(streams, "s", b"def")
    assert [c.data for c in await read_chunks(streams, "s", after=3)] == [b"def"]
    for inside in (1, 2, 4, 5, 7):
        with pytest.raises(StreamRequestError):
            await streams.read("s", OWNER, inside, 100)
    fork, _ = await create(streams, "fork", content_type=None, forked_from="s", fork_at=3)
    await append(streams, "fork", b"XY")
    assert [c.data for c in await read_chunks(streams, "fork", after=3)] == [b"XY"]
    assert [c.data for c in await read_chunks(streams, "fork", after=5)] == []
    for inside in (1, 4):
        with pytest.raises(StreamRequestError):
            await streams.read("fork", OWNER, inside, 100)


async def test_each_life_of_a_name_has_its_own_offsets(streams: StreamStore) -> None:
    first, _ = await create(streams, "s", b"old")
    await streams.delete("s", OWNER)
    second, _ = await create(streams, "s", b"new!")
    assert first.life != second.life and 0 not in (first.life, second.life)
    assert (await append(streams, "s", b"x")).life == second.life
    with pytest.raises(StreamGoneError):
        await streams.read("s", OWNER, 0, 100, first.life)
    assert [c.data for c in (await streams.read("s", OWNER, 0, 100, second.life)).chunks] == [b"new!", b"x"]
    # A fork offset names its source's life too.
    with pytest.raises(StreamRequestError):
        await create(streams, "fork", content_type=None, forked_from="s", fork_at=4, fork_life=first.life)
    assert (await create(streams, "fork", content_type=None, forked_from="s", fork_at=4, fork_life=second.life))[1]


def record(owner: str, id: str, state: bytes = b"s", version: int = 0) -> SubscriptionRecord:
    return SubscriptionRecord(owner=owner, id=id, config=b"c", state=state, version=version)


async def test_a_subscription_record_is_created_once_and_changed_only_over_its_version(streams: StreamStore) -> None:
    created = await streams.create_subscription(record(OWNER, "s1"), 2, 10)
    assert created == (record(OWNER, "s1", version=1), True)
    assert await streams.create_subscription(record(OWNER, "s1", b"other"), 2, 10) == (created[0], False)
    first = await streams.change_subscription(record(OWNER, "s1", b"first", version=1))
    assert first == record(OWNER, "s1", b"first", version=2)
    # A copy read before that change is refused, and leaves the record as it was.
    assert await streams.change_subscription(record(OWNER, "s1", b"stale", version=1)) is None
    assert await streams.subscription(OWNER, "s1") == first
    assert await streams.change_subscription(record(OWNER, "missing", version=1)) is None
    assert await streams.remove_subscription(OWNER, "s1") is True
    assert await streams.remove_subscription(OWNER, "s1") is False
    assert await streams.subscription(OWNER, "s1") is None
    assert await streams.change_subscription(first) is None


async def test_subscription_records_are_bounded_per_owner_and_in_all(streams: StreamStore) -> None:
    assert await streams.create_subscription(record(OWNER, "a"), 2, 3) is not None
    assert await streams.create_subscription(record(OWNER, "b"), 2, 3) is not None
    assert await streams.create_subscription(record(OWNER, "c"), 2, 3) is None
    assert await streams.create_subscription(record("bob", "a"), 2, 3) is not None
    assert await streams.create_subscription(record("carol", "a"), 2, 3) is None
    # The shared record counts against no limit.
    assert await streams.create_subscription(record(subscribed.SHARED_OWNER, "keys"), 2, 3) is not None
    assert sorted((r.owner, r.id) for r in await streams.subscriptions()) == [
        ("", "keys"),
        (OWNER, "a"),
        (OWNER, "b"),
        ("bob", "a"),
    ]

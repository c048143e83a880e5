"""Appends under load through the real service, then SIGKILL: nothing acknowledged is lost, nothing refused is stored.

Group commit (appends arriving together share one transaction and one fsync) must keep
every append's own guarantees (docs/protocol.md §6.2): each is validated and
conflict-checked on its own, is atomic, and is acknowledged only once it is durable. This
test holds for any implementation: it drives ``history-service serve`` as a process with
50 writers on sessions of their own and 8 writers racing on one shared session, kills it
with SIGKILL once enough appends were acknowledged, reopens the store and accounts for
every batch that was sent.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import anyio
import anyio.to_thread
import httpx
import pytest
import sqlalchemy as sa

from codec import Event, SessionHeader, encode
from persistence.errors import SeqConflictError, StoreError
from persistence.group_commit import GroupCommit
from persistence.sql.groups import SqlGroups
from persistence.url import open_store
from testing.events import plain, text
from testing.postgres import PG_URL, PG_URL_ENV
from testing.rand import Rand
from testing.servers import ServerProcess
from testing.stores import emptied_backend_url

pytestmark = pytest.mark.anyio

OWN_WRITERS: Final = 50
RACERS: Final = 8
SHARED: Final = "shared"
# Acknowledged appends to wait for before the kill: a count, never a duration.
ACKS_BEFORE_KILL: Final = 400
# Hang guards only: nothing asserts how long anything takes.
HANG_GUARD: Final = 120.0
T0: Final = 1_700_000_000_000
JSON: Final = {"Content-Type": "application/json"}

Outcome = Literal["pending", "acknowledged", "conflict", "unsent", "unknown", "failed"]


@dataclass
class Batch:
    """One append a writer sent, and what it learnt of its fate."""

    session: str
    writer: str
    number: int
    events: list[Event]
    outcome: Outcome = "pending"
    reply: Any = None

    @property
    def first(self) -> int:
        return self.events[0].seq

    @property
    def seqs(self) -> list[int]:
        return [event.seq for event in self.events]


@dataclass
class Run:
    """What every writer sent, and the count of acknowledgements the kill waits for."""

    batches: list[Batch] = field(default_factory=list)
    acks: int = 0
    acks_at_kill: int = -1
    running: int = 0
    stopping: bool = False


def batch_events(writer: str, number: int, first: int, size: int) -> list[Event]:
    """Events whose content names writer, batch and position: text deltas, and notes that close (seal) their run."""
    events = []
    for k in range(size):
        seq, tag = first + k, f"{writer}/{number}/{k}"
        if (number + k) % 5 == 0:
            events.append(plain(seq, "note", {"tag": tag}, time=T0 + seq))
        else:
            events.append(text(seq, T0 + seq, f" {tag}"))
    return events


async def writer(client: httpx.AsyncClient, run: Run, session: str, name: str, rng: random.Random) -> None:
    """Append batches at the head this writer believes in, learning the real head from every answer."""
    head = -1
    number = 0
    run.running += 1
    try:
        while not run.stopping:
            batch = Batch(session, name, number, batch_events(name, number, head + 1, rng.randint(1, 3)))
            run.batches.append(batch)
            number += 1
            try:
                response = await client.post(
                    f"/v1/sessions/{session}/events", content=encode({"events": batch.events}), headers=JSON
                )
            except httpx.ConnectError:
                batch.outcome = "unsent"  # no connection was made: the server never saw it
                return
            except httpx.TransportError as exc:
                batch.outcome, batch.reply = "unknown", repr(exc)
                return
            body = response.json()
            batch.reply = (response.status_code, body)
            if response.status_code in (200, 201):
                batch.outcome = "acknowledged"
                run.acks += 1
                head = body["headSeq"]
            elif response.status_code == 409 and body["error"]["code"] == "seq_conflict":
                batch.outcome = "conflict"
                head = body["error"]["headSeq"]
            else:
                batch.outcome = "failed"
                return
    finally:
        run.running -= 1


async def kill_when_enough(run: Run, server: ServerProcess) -> None:
    """SIGKILL the service once enough appends were acknowledged (or every writer has stopped)."""
    with anyio.move_on_after(HANG_GUARD):
        while run.acks < ACKS_BEFORE_KILL and run.running > 0:
            await anyio.sleep(0.005)
    assert server.process is not None
    run.acks_at_kill = run.acks
    os.kill(server.process.pid, signal.SIGKILL)
    run.stopping = True


def wait_for_postgres_clients_gone(url: str) -> None:
    """Wait until the killed service's backends have ended, so each of its transactions has committed or rolled back."""
    query = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    )
    engine = sa.create_engine(url)
    deadline = time.monotonic() + HANG_GUARD
    try:
        while True:
            with engine.connect() as conn:
                if conn.execute(query).scalar() == 0:
                    return
            assert time.monotonic() < deadline, "the killed service's PostgreSQL sessions did not end"
            time.sleep(0.05)
    finally:
        engine.dispose()


def kinds() -> list[Any]:
    return [
        pytest.param("sqlite", id="sqlite"),
        pytest.param("jsonl", id="jsonl"),
        pytest.param("jsonl-zstd", id="jsonl-zstd"),
        pytest.param(
            "postgresql",
            id="postgresql",
            marks=pytest.mark.skipif(not PG_URL, reason=f"{PG_URL_ENV} is not set; run under scripts/with-postgres"),
        ),
    ]


@pytest.mark.parametrize("kind", kinds())
async def test_killed_under_concurrent_appends_keeps_exactly_the_acknowledged(
    tmp_path: Path, kind: str, rand: Rand
) -> None:
    url = await emptied_backend_url(kind, tmp_path)
    own = [f"own-{i:02d}" for i in range(OWN_WRITERS)]
    server = ServerProcess(url)
    server.start()
    run = Run()
    try:
        limits = httpx.Limits(max_connections=OWN_WRITERS + RACERS + 8, max_keepalive_connections=OWN_WRITERS + RACERS)
        async with httpx.AsyncClient(base_url=server.url, timeout=HANG_GUARD, limits=limits) as client:
            for session in [*own, SHARED]:
                created = await client.post("/v1/sessions", json={"id": session, "createdAt": T0}, headers=JSON)
                assert created.status_code == 201, f"{created.text}; server log: {server.stderr()[-3000:]}"
            async with anyio.create_task_group() as group:
                for session in own:
                    group.start_soon(writer, client, run, session, session, random.Random(rand.getrandbits(64)))
                for i in range(RACERS):
                    group.start_soon(writer, client, run, SHARED, f"racer-{i}", random.Random(rand.getrandbits(64)))
                await anyio.sleep(0)  # let every writer start before the killer counts them
                group.start_soon(kill_when_enough, run, server)
        assert server.process is not None
        assert await anyio.to_thread.run_sync(server.process.wait, HANG_GUARD) == -signal.SIGKILL
        log = server.stderr()
    finally:
        server.stop()

    failed = [(b.session, b.writer, b.number, b.reply) for b in run.batches if b.outcome in ("failed", "pending")]
    assert not failed, f"appends answered neither 2xx nor 409 seq_conflict: {failed[:5]}; server log: {log[-2000:]}"
    assert run.acks_at_kill >= ACKS_BEFORE_KILL, f"only {run.acks_at_kill} acknowledged appends before the kill"
    if kind == "postgresql":
        await anyio.to_thread.run_sync(wait_for_postgres_clients_gone, url)

    # Every event sent, by its canonical line: unique, as its content names writer, batch and position.
    sent: dict[bytes, Batch] = {}
    for batch in run.batches:
        for event in batch.events:
            line = encode(event)
            assert line not in sent
            sent[line] = batch
    found: dict[int, list[int]] = {}  # id(batch) -> the seqs where its events were found
    store = await open_store(url)
    try:
        for session in [*own, SHARED]:
            head = await store.head_seq(session)
            events = await store.read_events(session, 0, head + 1)
            assert [event.seq for event in events] == list(range(head + 1)), f"{session}: not dense up to {head}"
            assert await store.read_events(session, head + 1, head + 1000) == [], f"{session}: events past the head"
            for event in events:
                owner = sent.get(encode(event))
                assert owner is not None, f"{session}: seq {event.seq} was never sent: {event}"
                assert owner.session == session, f"{session}: seq {event.seq} was sent to {owner.session}"
                found.setdefault(id(owner), []).append(event.seq)
    finally:
        await store.close()

    for batch in run.batches:
        present = found.get(id(batch), [])
        where = f"{batch.session}: batch {batch.number} of {batch.writer} at {batch.seqs} ({batch.outcome})"
        if batch.outcome == "acknowledged":
            assert present == batch.seqs, f"{where} was acknowledged but is stored at {present}"
            status, body = batch.reply
            assert status == 201 and body["firstSeq"] == batch.first, f"{where}: the reply {batch.reply}"
            assert body["headSeq"] >= batch.seqs[-1], f"{where}: the reply {batch.reply}"
        elif batch.outcome in ("conflict", "unsent"):
            assert present == [], f"{where} is stored at {present}"
        else:
            assert present in ([], batch.seqs), f"{where} is stored in part, at {present}"


# The writer itself, on SQLite connections of the test's own.


def _sqlite_writer(tmp_path: Path, aborted: list[int] | None = None) -> tuple[GroupCommit, Path]:
    path = tmp_path / "group.db"
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL)")
    setup.commit()
    setup.close()

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def on_abort() -> None:
        if aborted is not None:
            aborted.append(1)

    return GroupCommit(SqlGroups(connect, begin="BEGIN IMMEDIATE", aborted=on_abort), name="test-writer"), path


def _rows(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as reader:
        return dict(reader.execute("SELECT k, v FROM t").fetchall())


def _insert(key: str, value: int) -> Any:
    def work(cursor: Any) -> str:
        cursor.execute("INSERT INTO t VALUES (?, ?)", (key, value))
        return key

    return work


async def test_units_that_arrive_together_share_one_commit_and_fail_alone(tmp_path: Path) -> None:
    writer, path = _sqlite_writer(tmp_path)
    results: dict[str, object] = {}

    async def run(name: str, work: Any) -> None:
        try:
            results[name] = await writer.run(work)
        except StoreError as exc:
            results[name] = exc

    def conflict(cursor: Any) -> None:
        cursor.execute("INSERT INTO t VALUES ('half', 1)")
        raise SeqConflictError("refused after writing", session_id="s", head_seq=3)

    async with anyio.create_task_group() as group:
        for k in range(40):
            group.start_soon(run, f"k{k}", _insert(f"k{k}", k))
        group.start_soon(run, "conflict", conflict)
        group.start_soon(run, "duplicate", _insert("k0", 99))
    writer.close()
    assert isinstance(results["conflict"], SeqConflictError)
    assert isinstance(results["duplicate"], StoreError) and not isinstance(results["duplicate"], SeqConflictError)
    # The refused units left nothing behind, and every other unit committed.
    assert _rows(path) == {f"k{k}": k for k in range(40)}
    assert all(results[f"k{k}"] == f"k{k}" for k in range(40))
    assert writer.units == 42 and writer.groups < writer.units


async def test_a_failed_commit_fails_every_unit_of_its_group_and_the_writer_recovers(tmp_path: Path) -> None:
    aborted: list[int] = []
    writer, path = _sqlite_writer(tmp_path, aborted)

    def breaks_the_transaction(cursor: Any) -> None:
        # Ends the group's transaction under the writer, so its savepoint release and commit fail.
        cursor.execute("INSERT INTO t VALUES ('lost', 1)")
        cursor.connection.rollback()

    with pytest.raises(StoreError):
        await writer.run(breaks_the_transaction)
    assert aborted == [1]
    assert await writer.run(_insert("after", 2)) == "after"
    writer.close()
    assert _rows(path) == {"after": 2}


async def test_a_cancelled_caller_still_waits_for_its_unit(tmp_path: Path) -> None:
    writer, path = _sqlite_writer(tmp_path)
    started = threading.Event()
    release = threading.Event()
    finished: list[str] = []

    def slow(cursor: Any) -> str:
        started.set()
        release.wait(30)
        cursor.execute("INSERT INTO t VALUES ('slow', 1)")
        return "slow"

    async def caller() -> None:
        finished.append(await writer.run(slow))

    async with anyio.create_task_group() as group:
        group.start_soon(caller)
        await anyio.to_thread.run_sync(started.wait, 30)
        group.cancel_scope.cancel()
        release.set()
    writer.close()
    # The shield held: the caller saw its unit's outcome, which had committed.
    assert finished == ["slow"]
    assert _rows(path) == {"slow": 1}


async def test_a_bounded_caller_leaves_a_hung_group_and_its_queued_unit_never_runs() -> None:
    """F12: the group ahead hangs; each caller gets `StoreError` at its bound, and a unit not begun is skipped."""
    hung, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def commit_group(works: list[Any]) -> list[tuple[bool, Any]]:
        hung.set()
        release.wait(30)
        return [(True, work(None)) for work in works]

    writer = GroupCommit(commit_group, name="test-bounded-writer", bound=0.2)
    outcomes: list[str] = []

    async def caller(name: str) -> None:
        try:
            await writer.run(lambda _: ran.append(name))
            outcomes.append(f"{name} answered")
        except StoreError as exc:
            outcomes.append(f"{name}: {exc}")

    async with anyio.create_task_group() as group:
        group.start_soon(caller, "first")
        await anyio.to_thread.run_sync(hung.wait, 30)
        group.start_soon(caller, "queued")
    release.set()
    writer.close()
    assert sorted(outcomes) == [
        "first: store unavailable: no answer within 0.2 s",
        "queued: store unavailable: no answer within 0.2 s",
    ]
    assert ran == ["first"]  # begun before its caller left, so it ran; the queued one never did


async def test_a_closed_writer_refuses_new_work(tmp_path: Path) -> None:
    writer, _ = _sqlite_writer(tmp_path)
    assert await writer.run(_insert("a", 1)) == "a"
    writer.close()
    with pytest.raises(StoreError, match="closed"):
        await writer.run(_insert("b", 2))


async def test_a_unit_queued_as_another_thread_closes_the_writer_is_still_answered(tmp_path: Path) -> None:
    """A store closes its writer from a worker thread: a unit queued meanwhile must not land behind the stop."""
    writer, path = _sqlite_writer(tmp_path)
    assert await writer.run(_insert("first", 1)) == "first"
    queue = writer._queue
    closing = threading.Thread(target=writer.close)
    puts: list[str] = []

    class ClosedMeanwhile:
        def put(self, unit: Any) -> None:
            if unit is not None and not closing.is_alive():
                # The close starts between the caller's check and its put, and is given time to finish.
                closing.start()
                closing.join(0.2)
            puts.append("stop" if unit is None else "unit")
            queue.put(unit)

        def __getattr__(self, name: str) -> Any:
            return getattr(queue, name)

    writer._queue = ClosedMeanwhile()  # type: ignore[assignment]
    # A task, not awaited until the order is known: a unit behind the stop is never answered.
    second = asyncio.get_running_loop().create_task(writer.run(_insert("second", 2)))
    await anyio.to_thread.run_sync(closing.join, 30)
    assert puts == ["unit", "stop"]
    assert await second == "second"
    assert _rows(path) == {"first": 1, "second": 2}


# Two processes' groups take their locks in one order.


@pytest.mark.parametrize("kind", ["jsonl", "postgresql"])
def test_two_processes_groups_never_wait_on_each_other(kind: str, tmp_path: Path) -> None:
    """Two stores on one root or database (as two processes) append to the same sessions at once.

    A group holds its sessions' locks (a JSONL ``flock``, a PostgreSQL row lock) until it is
    durable, so two groups taking them in different orders would wait on each other for ever
    (JSONL) or be failed by the deadlock detector (PostgreSQL). Every append ends in 201 or
    409. The stores run in a thread of their own, so a hang fails the test instead of hanging it.
    """
    if kind == "postgresql" and not PG_URL:
        pytest.skip(f"{PG_URL_ENV} is not set; run under scripts/with-postgres")
    sessions = ["a", "b", "c", "d"]
    outcomes: dict[str, int] = {"appended": 0, "conflict": 0}
    heads: list[int] = []

    async def writer(store: Any, number: int) -> None:
        rand = random.Random(number)
        for attempt in range(150):
            session = rand.choice(sessions)
            head = await store.head_seq(session)
            try:
                # Content of its own, so a lost race is a conflict, never an idempotent re-send.
                await store.append(session, [plain(head + 1, "note", {"writer": number, "attempt": attempt})])
                outcomes["appended"] += 1
            except SeqConflictError:
                outcomes["conflict"] += 1

    async def scenario() -> None:
        url = await emptied_backend_url(kind, tmp_path)
        stores = [await open_store(url, create=True), await open_store(url)]
        for session in sessions:
            await stores[0].create_session(SessionHeader(id=session, createdAt=T0))
        try:
            async with anyio.create_task_group() as group:
                for number in range(16):
                    group.start_soon(writer, stores[number % 2], number)
            heads.extend([await stores[0].head_seq(session) for session in sessions])
        finally:
            for store in stores:
                await store.close()

    errors: list[BaseException] = []

    def run() -> None:
        try:
            anyio.run(scenario)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD)
    assert not thread.is_alive(), f"the two stores' groups are waiting on each other: {outcomes}"
    assert not errors, errors
    assert sum(outcomes.values()) == 16 * 150
    assert sum(head + 1 for head in heads) == outcomes["appended"]

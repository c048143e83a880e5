"""Search across sessions (docs/protocol.md §14) measured: the sessions it reads, what it costs an append, its size.

* `Talk`: one session as an agent writes it, an event at a time, deterministic from its
  number: a user message, then per step a reasoning block and a text block streamed as
  deltas of 1 to 7 characters, a streamed tool call with its ``tool/call`` and
  ``tool/result``, the step's ``assistant/message``, usage and step ends. Texts are
  sentences of developer talk whose slots (names, files, words) are drawn from a long-tail
  vocabulary, so a few words are everywhere and most are rare; 1 session in 7 talks
  Chinese and Japanese beside English; some user messages are pastes, some assistant texts
  run to 10,000 characters (several passages). Every session names its own ticket
  (`codename`) in its first message: a rare word found in that session alone.
* `Streams`: sessions on one store, each appending its talk one event per call, in
  windows of a closed loop: how many durable 1-event appends a second it takes.
* `load`: sessions written in batches of `LOAD_BATCH` events, a few at once.
* `sqlite_sizes` (or `file_sizes`), `postgres_sizes`: the bytes of the index beside those of the records.
* `queries` and `timed_queries`, `timed_http_queries`: a mix of queries of every kind,
  through `HistoryStore.search` and through ``GET /v1/search``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import sqlite3
import statistics
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import msgspec
import sqlalchemy as sa

from bench.throughput import Connection, _get
from codec import DeltaData, Event, ReasoningDelta, SessionHeader, TextDelta, ToolCallDelta
from history_service.scenarios import TIME_ZERO
from persistence import DEFAULT_OWNER, HistoryStore, SearchUnsupportedError, now_ms
from persistence.search import SearchRequest, parse

__all__ = [
    "LIMIT",
    "Hits",
    "LOAD_BATCH",
    "Streams",
    "Talk",
    "codename",
    "file_sizes",
    "latency",
    "load",
    "passages",
    "postgres_sizes",
    "queries",
    "rare_sessions",
    "refuses_search",
    "session_id",
    "sqlite_sizes",
    "timed_http_queries",
    "timed_queries",
]

# Hits a query asks for: the service's default page.
LIMIT: Final = 20
LOAD_BATCH: Final = 512
# Sessions written at once while loading: one generates its events while another's batch commits.
LOAD_TASKS: Final = 4

_SYLLABLES: Final = [c + v for c in "bdfghklmnprstv" for v in "aeiou"]


def _vocabulary(count: int) -> list[str]:
    """``count`` made-up words of 2 to 4 syllables, never with a c, j, q, w, x, y or z (the no-hit queries have)."""
    rand = random.Random(11)
    words: dict[str, None] = {}
    while len(words) < count:
        words.setdefault("".join(rand.choice(_SYLLABLES) for _ in range(rand.randint(2, 4))), None)
    return list(words)


# Slot words drawn by a Zipf law (s = 1.07) over 20,000: the head recurs in every session, the tail is rare.
_VOCABULARY: Final = _vocabulary(20_000)
_CUMULATIVE: Final = list(itertools.accumulate(1 / (rank + 1) ** 1.07 for rank in range(len(_VOCABULARY))))
_ENGLISH: Final = [
    "Let me check `{file}` first, then the page builder.",
    "The session history is paged from the tail, and the cursor must end where the page says it does.",
    "The test failed with a decode error at seq {num}; I'll retry with a smaller batch.",
    "Retrying the request hit the rate limit again, so the client backs off for {num} ms.",
    "The follow stream resumed from `Last-Event-ID: {num}` and lost nothing.",
    "I will serialize the {word} records before the store writes them.",
    "The configuration sets `{name}` to {num}; the default was lower.",
    "Looking at the stack trace, `{name}` raised on an empty row in `{file}`.",
    "So the answer is yes: the tail page is message-aligned and the cut is stable.",
    "Next I'll measure the cold tail page of the {word} session on SQLite and PostgreSQL.",
    'The error said "seq_conflict" with headSeq {num}, so the batch was already stored.',
    "Hmm, wait: `{name}` runs twice per page, once for the index and once for the rows.",
    "The user wants a summary of the {word} change; I'll keep it short and cite the figures.",
    "Résumé: the naïve loop over {word} rows was quadratic, the new scan is linear.",
    "I should double-check the `{name}` bisection in `{file}` before committing.",
    "Can you confirm that the {word} index survives a restart of the service?",
    "The session store keeps every append durable before it answers the client.",
    "Tests pass now: {num} passed, 0 failed, in {num} ms.",
]
_CJK: Final = [
    "会话历史的第{num}页已经加载，游标停在消息边界上。",
    "数据库连接超时了，我会重试三次，然后检查 `{file}`。",
    "这个 `{name}` 函数在解码空行时报错，需要修复。",
    "エージェントがツールを呼び出して、結果をセッションに保存しました。",
    "重试之后速率限制解除了，流恢复正常。",
    "搜索索引按段落保存，每段最多两千个字符。",
    "東京のサーバーで `{name}` を実行すると、ページの読み込みが速くなります。",
]
_TOOL_LINES: Final = [
    "def {name}(rows, cursor):",
    "    return [row for row in rows if row.seq >= cursor]  # {word}",
    "{file}:{num}:     {name} = decode(page, strict=True)",
    "ERROR {name} failed after {num} ms: rate limit exceeded, retrying",
    "PASSED tests/test_{word}.py::test_{name}",
    "FAILED tests/test_{word}.py::test_{name} - AssertionError: seq {num} != expected",
    "INFO follow stream for session {word} resumed at seq {num}",
    "    raise DecodeError(f'bad row at {{seq}}')",
]
_TOOLS: Final = ["read_file", "run_tests", "grep", "edit_file", "bash"]

# (kind, q): every kind of query a person types, four of each. The rare ones are added per corpus
# (`queries`), from the tickets of sessions it holds. None of the no-hit words can be generated.
_FIXED_QUERIES: Final = [
    *[("common", q) for q in ("session", "page", "error", "store")],
    *[("phrase", q) for q in ('"rate limit"', '"tail page"', '"follow stream"', '"decode error"')],
    *[("prefix", q) for q in ("retr*", "seri*", "deco*", "conf*")],
    *[("words", q) for q in ("client backs", "cursor page", "index restart", "summary figures")],
    *[("cjk", q) for q in ("会话历史", "数据库", "エージェント", "重试")],
    *[("none", q) for q in ("quixotry", "xylograph", "jukebox", "zephyrs wax")],
]


def codename(number: int) -> str:
    """Session ``number``'s ticket: a word no other session says."""
    return f"zephyr{number:05d}"


def session_id(number: int) -> str:
    return f"talk-{number:05d}"


def rare_sessions(sessions: int) -> list[int]:
    """The four sessions whose tickets the rare queries ask for, spread over ``sessions``."""
    return sorted({sessions * k // 4 + (1 if sessions > 4 else 0) for k in range(4)})


def queries(sessions: int) -> list[tuple[str, str]]:
    """The query mix over a corpus of ``sessions``: (kind, q), in the order they run."""
    return [*_FIXED_QUERIES, *[("rare", codename(n)) for n in rare_sessions(sessions)]]


class Talk:
    """Session ``number``'s events, made one at a time and the same every time (see the module)."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.rand = random.Random(f"talk:{number}")
        self.cjk = number % 7 == 3
        self.seq = 0
        self.time = TIME_ZERO + number * 7919
        self.turn = 0

    def session(self) -> list[Event]:
        """A whole session for the corpus: 1 to 7 turns."""
        turns = self.rand.choice((1, 2, 2, 3, 3, 4, 5, 7))
        events = list(self._title())
        for _ in range(turns):
            events.extend(self._turn())
        return events

    def events(self) -> Iterator[Event]:
        """An endless stream of turns, for appends."""
        yield from self._title()
        while True:
            yield from self._turn()

    def _event(self, type_: str, data: Any, **extra: Any) -> Event:
        self.time += self.rand.choice((0, 1, 16, 17, 33, 40, 120))
        event = Event(type_, self.seq, self.time, data, **extra)
        self.seq += 1
        return event

    def _title(self) -> Iterator[Event]:
        if self.rand.random() < 0.5:
            yield self._event("session/title", {"title": self._sentence()[:80]})

    def _fill(self, template: str) -> str:
        name, word, folder, file = self.rand.choices(_VOCABULARY, cum_weights=_CUMULATIVE, k=4)
        return template.format(
            name=f"{name}_{word}", word=word, file=f"src/{folder}/{file}.py", num=self.rand.randint(1, 99_999)
        )

    def _sentence(self) -> str:
        pool = _CJK if self.cjk and self.rand.random() < 0.6 else _ENGLISH
        return self._fill(self.rand.choice(pool))

    def _prose(self, length: int) -> str:
        said: list[str] = []
        total = 0
        while total < length:
            said.append(self._sentence())
            total += len(said[-1]) + 1
        return " ".join(said)

    def _output(self, length: int) -> str:
        lines: list[str] = []
        total = 0
        while total < length:
            lines.append(self._fill(self.rand.choice(_TOOL_LINES)))
            total += len(lines[-1]) + 1
        return "\n".join(lines)

    def _pieces(self, text: str) -> list[str]:
        """``text`` as a model streams it: pieces of 1 to 7 characters."""
        out, at = [], 0
        while at < len(text):
            step = self.rand.randint(1, 7)
            out.append(text[at : at + step])
            at += step
        return out

    def _length(self, spans: Sequence[tuple[float, int, int]]) -> int:
        """A length from the first of ``spans`` (share, low, high) the roll falls in."""
        roll = self.rand.random()
        for share, low, high in spans:
            if roll < share:
                return self.rand.randint(low, high)
            roll -= share
        return self.rand.randint(spans[-1][1], spans[-1][2])

    def _block(self, turn: int, step: int, index: int, kind: str, text: str) -> Iterator[Event]:
        yield self._chunk(turn, step, {"type": "block-start", "index": index, "blockType": kind})
        delta = ReasoningDelta if kind == "reasoning" else TextDelta
        for piece in self._pieces(text):
            yield self._event("assistant/chunk", DeltaData(turn, step, delta(index, piece)))
        yield self._chunk(turn, step, {"type": "block-end", "index": index})

    def _chunk(self, turn: int, step: int, chunk: dict[str, Any]) -> Event:
        return self._event("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})

    def _turn(self) -> Iterator[Event]:
        self.turn += 1
        turn, rand = self.turn, self.rand
        yield self._event("turn/start", {"turn": turn})
        asked = self._prose(self._length([(0.85, 40, 1200), (0.15, 1500, 6000)]))
        if turn == 1 or rand.random() < 0.1:
            asked += f" (ticket {codename(self.number)})"
        content = [{"type": "text", "text": asked}]
        yield self._event("user/message", {"id": f"u-{turn}", "role": "user", "content": content}, surfaceOp="append")
        steps = rand.randint(1, 3)
        for step in range(1, steps + 1):
            yield self._event("step/start", {"turn": turn, "step": step})
            first, index = self.seq, 0
            if rand.random() < 0.7:
                yield from self._block(turn, step, index, "reasoning", self._prose(rand.randint(100, 800)))
                index += 1
            said = self._prose(self._length([(0.7, 80, 800), (0.25, 800, 3000), (0.05, 3000, 10_000)]))
            yield from self._block(turn, step, index, "text", said)
            index += 1
            call = f"call-{turn}-{step}" if step < steps else None
            if call is not None:
                name = rand.choice(_TOOLS)
                arguments = msgspec.json.encode({"path": self._fill("{file}"), "line": rand.randint(1, 900)}).decode()
                yield self._chunk(turn, step, {"type": "block-start", "index": index, "blockType": "tool-call"})
                for at, piece in enumerate(self._pieces(arguments)):
                    chunk = ToolCallDelta(index=index, id=call, argumentsDelta=piece)
                    if at == 0:
                        chunk = ToolCallDelta(index=index, id=call, name=name, argumentsDelta=piece)
                    yield self._event("assistant/chunk", DeltaData(turn, step, chunk))
                yield self._chunk(turn, step, {"type": "block-end", "index": index})
            message = {"id": f"a-{turn}-{step}", "role": "assistant", "content": [{"type": "text", "text": said}]}
            yield self._event("assistant/message", message, surfaceOp="append", sourceEventSeqs=(first,))
            if call is not None:
                yield self._event("tool/call", {"turn": turn, "step": step, "callId": call, "name": name})
                result = {"role": "tool", "content": self._output(rand.randint(200, 5000))}
                yield self._event("tool/result", {"turn": turn, "step": step, "callId": call, "message": result})
            usage = {"inputTokens": rand.randint(1000, 90_000), "outputTokens": rand.randint(10, 4000)}
            yield self._event("usage/update", usage)
            yield self._event("step/end", {"turn": turn, "step": step})
        yield self._event("turn/end", {"turn": turn})


class Streams:
    """``count`` sessions on one store, each appending its `Talk` one event per call."""

    def __init__(self, store: HistoryStore, prefix: str, count: int) -> None:
        self.store = store
        self.ids = [f"{prefix}-{n}" for n in range(count)]
        # The same talks on every store: the sessions of the indexed store and of the other say the same.
        self.talks = [Talk(1_000_000 + n).events() for n in range(count)]
        self.ready: list[deque[Event]] = [deque() for _ in range(count)]
        self.heads = [-1] * count
        self.wrong = 0
        self._most = 0

    async def create(self) -> None:
        for session in self.ids:
            await self.store.create_session(SessionHeader(id=session, createdAt=TIME_ZERO))

    def _fill(self) -> None:
        """Events enough for the next window made beforehand (twice the most a stream took in one), so a window
        measures appends alone."""
        wanted = max(2 * self._most, 200)
        for ready, talk in zip(self.ready, self.talks, strict=True):
            ready.extend(itertools.islice(talk, max(0, wanted - len(ready))))

    async def window(self, seconds: float) -> float:
        """Append for ``seconds``, every stream in a closed loop; the appends a second."""
        self._fill()
        counts = [0] * len(self.ids)
        deadline = time.perf_counter() + seconds

        async def stream(at: int) -> None:
            session, ready, talk = self.ids[at], self.ready[at], self.talks[at]
            while time.perf_counter() < deadline:
                event = ready.popleft() if ready else next(talk)
                result = await self.store.append(session, [event])
                if result.head_seq != event.seq or result.idempotent:
                    self.wrong += 1
                self.heads[at] = event.seq
                counts[at] += 1

        started = time.perf_counter()
        await asyncio.gather(*(stream(at) for at in range(len(self.ids))))
        elapsed = time.perf_counter() - started
        self._most = max(self._most, *counts)
        return sum(counts) / elapsed

    async def stored_heads(self) -> list[int]:
        return [await self.store.head_seq(session) for session in self.ids]


async def load(store: HistoryStore, sessions: int) -> dict[str, Any]:
    """Sessions ``0`` to ``sessions - 1``, each written in batches of `LOAD_BATCH`, `LOAD_TASKS` at once."""
    numbers = iter(range(sessions))
    events = 0
    started = time.perf_counter()

    async def writer() -> None:
        nonlocal events
        for number in numbers:
            talk = Talk(number).session()
            await store.create_session(SessionHeader(id=session_id(number), createdAt=talk[0].time))
            for at in range(0, len(talk), LOAD_BATCH):
                result = await store.append(session_id(number), talk[at : at + LOAD_BATCH])
                assert result.head_seq == min(at + LOAD_BATCH, len(talk)) - 1, (number, at, result)
            events += len(talk)

    await asyncio.gather(*(writer() for _ in range(LOAD_TASKS)))
    seconds = time.perf_counter() - started
    return {
        "sessions": sessions,
        "events": events,
        "seconds": round(seconds, 1),
        "eventsPerSec": round(events / seconds),
    }


def _owner_sizes(rows: Sequence[tuple[str, str, int]]) -> dict[str, Any]:
    """Index and history bytes from (object, its table, bytes) rows: the index is every table named ``search_*``
    with its indexes, the history ``history_records`` with its."""
    index = {name: size for name, table, size in rows if table.startswith("search_")}
    history = {name: size for name, table, size in rows if table == "history_records"}
    return {"indexBytes": sum(index.values()), "historyBytes": sum(history.values()), "objects": {**index, **history}}


def sqlite_sizes(path: Path) -> dict[str, Any] | None:
    """The index's bytes and the records' on a SQLite store, each table with its indexes, by ``dbstat``; ``None``
    from a SQLite built without ``dbstat`` (then `file_sizes` measures them)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        try:
            pages = db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
        except sqlite3.OperationalError:
            return None
        tables = dict(db.execute("SELECT name, tbl_name FROM sqlite_master").fetchall())
    return {"method": "dbstat", **_owner_sizes([(name, tables.get(name, name), size) for name, size in pages])}


def file_sizes(path: Path, plain: Path) -> dict[str, Any]:
    """The index's bytes as the difference between the files of two SQLite stores of the same sessions, ``path``
    indexed and ``plain`` not; the history is ``plain``'s file (its sessions table included). Each file is
    checkpointed first."""
    sizes = {}
    for file in (path, plain):
        with contextlib.closing(sqlite3.connect(file)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        sizes[file.name] = file.stat().st_size
    return {
        "method": "fileSize",
        "indexBytes": sizes[path.name] - sizes[plain.name],
        "historyBytes": sizes[plain.name],
        "objects": sizes,
    }


def postgres_sizes(url: str) -> dict[str, Any]:
    """The index's bytes and the records' on PostgreSQL, after ``VACUUM ANALYZE`` (what autovacuum does after a
    load): each table's heap and TOAST, and each of its indexes (for ``search_passages``, the GIN one)."""
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
            rows = conn.exec_driver_sql(
                "SELECT t.relname, t.relname, pg_total_relation_size(t.oid) - pg_indexes_size(t.oid) "
                "FROM pg_class t WHERE t.relname IN ('search_passages', 'history_records') AND t.relkind = 'r' "
                "UNION ALL SELECT i.relname, t.relname, pg_relation_size(i.oid) FROM pg_index x "
                "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
                "WHERE t.relname IN ('search_passages', 'history_records')"
            ).all()
    finally:
        engine.dispose()
    return {"method": "pg_total_relation_size", **_owner_sizes([(r[0], r[1], int(r[2])) for r in rows])}


def passages(url: str) -> dict[str, int]:
    """How many passages a SQL store holds, and their characters."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            query = "SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0) FROM search_passages"
            count, chars = conn.exec_driver_sql(query).one()
    finally:
        engine.dispose()
    return {"passages": int(count), "passageChars": int(chars)}


def latency(samples: Sequence[float]) -> dict[str, Any]:
    """p50, p99 (nearest rank) and max of ``samples`` in ms, and how many."""
    ordered = sorted(samples)
    p99 = ordered[max(0, -(-len(ordered) * 99 // 100) - 1)]
    return {
        "samples": len(ordered),
        "p50Ms": round(statistics.median(ordered), 2),
        "p99Ms": round(p99, 2),
        "maxMs": round(ordered[-1], 2),
    }


Hits = list[tuple[str, int]]


def _summary(queries: Sequence[tuple[str, str]], times: list[list[float]], hits: list[Hits]) -> dict[str, Any]:
    """Latency over every query and by kind, with each kind's queries and how many hits they had."""
    by_kind: dict[str, Any] = {}
    for kind in dict.fromkeys(kind for kind, _ in queries):
        at = [n for n, (k, _) in enumerate(queries) if k == kind]
        by_kind[kind] = {
            **latency([t for n in at for t in times[n]]),
            "queries": [queries[n][1] for n in at],
            "hits": [len(hits[n]) for n in at],
        }
    return {**latency([t for row in times for t in row]), "byKind": by_kind}


async def timed_queries(store: HistoryStore, queries: Sequence[tuple[str, str]], rounds: int) -> tuple[Any, list[Hits]]:
    """Each query ``rounds`` times through `HistoryStore.search`, after one round untimed; the summary and each
    query's hits (session, seq), best first."""
    times: list[list[float]] = [[] for _ in queries]
    hits: list[Hits] = []
    for round_ in range(rounds + 1):
        for n, (_, q) in enumerate(queries):
            request = SearchRequest(owner=DEFAULT_OWNER, query=parse(q), limit=LIMIT, now=now_ms())
            started = time.perf_counter()
            page = await store.search(request)
            elapsed = (time.perf_counter() - started) * 1000
            if round_ == 0:
                hits.append([(hit.session_id, hit.seq) for hit in page.hits])
            else:
                times[n].append(elapsed)
    return _summary(queries, times, hits), hits


_ANSWER = msgspec.json.Decoder()


async def timed_http_queries(port: int, queries: Sequence[tuple[str, str]], rounds: int) -> tuple[Any, list[Hits]]:
    """The same through ``GET /v1/search`` on one keep-alive connection: from the request's first byte to the
    answer's last."""
    conn = Connection(port)
    times: list[list[float]] = [[] for _ in queries]
    hits: list[Hits] = []
    try:
        for round_ in range(rounds + 1):
            for n, (_, q) in enumerate(queries):
                request = _get(f"/v1/search?q={quote(q)}&limit={LIMIT}")
                started = time.perf_counter()
                reply = await conn.request(request)
                elapsed = (time.perf_counter() - started) * 1000
                assert reply.status == 200, (q, reply)
                if round_ == 0:
                    hits.append([(hit["session"], hit["seq"]) for hit in _ANSWER.decode(reply.body)["hits"]])
                else:
                    times[n].append(elapsed)
    finally:
        conn.close()
    return _summary(queries, times, hits), hits


async def refuses_search(store: HistoryStore) -> bool:
    """Whether ``store`` (one opened without its index) refuses a search, as it must."""
    try:
        await store.search(SearchRequest(owner=DEFAULT_OWNER, query=parse("page"), limit=LIMIT, now=now_ms()))
    except SearchUnsupportedError:
        return True
    return False

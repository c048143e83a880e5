"""Follow streams on the wire (issue 45, item 5): bytes per event, delivery latency, memory per follower.

A live cell is one producer and one reader per stream on the same session at once, so every
stream sees the same tokens at the same moments. The producer appends one text delta per
token (a 1-event append each) at a fixed rate, open loop: each append leaves on its schedule,
pipelined on one keep-alive connection (`bench.capacity`'s producer), whether or not the one
before was answered. Each reader is a raw `asyncio.Protocol` that counts every byte the
socket hands it (the HTTP head, the chunk framing and, when the stream is gzip-coded, the
compressed bytes), then undoes the chunking and the coding, parses the SSE frames and
decodes each event as a client would: an ``event`` frame's event, or a ``records`` frame's
page records with their rows expanded (`codec`). An event's delivery latency runs from just
before its append was written to the socket to the moment the reader had decoded it, on
this process's monotonic clock.

The same cell runs against a Durable Streams server's SSE (`ds_feed`): each message is the
same event's JSON in a JSON stream, or the token alone in a ``text/plain`` one.

`IdleStreams` opens many follow streams from one loop, each waiting for its first body
bytes, for a server's memory per follower.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

import msgspec

from bench.capacity import _Producer, _Tally
from bench.follow_load import _Chunked
from bench.throughput import TIME_ZERO, Connection, _post, _send
from codec import (
    DeltaData,
    Event,
    TextDelta,
    decode_live_record,
    decode_live_records,
    decode_page_record,
    encode,
    iter_page_events,
)
from history_client.sse import ServerSentEvent, SSEDecoder

__all__ = [
    "MODES",
    "Feed",
    "IdleStreams",
    "Kind",
    "Mode",
    "WireReader",
    "burst",
    "delta",
    "ds_feed",
    "follow_request",
    "live",
    "tokens",
    "v1_feed",
]

Kind = Literal["v1", "ds-json", "ds-text"]
SETTLE_S: Final = 0.3
SEED_BATCH: Final = 100
# Common words, each with its leading space as a tokenizer cuts them: about 5 characters a token.
_WORDS: Final = (
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " with", " was", " on",
    " be", " at", " by", " this", " had", " not", " are", " but", " from", " or", " have", " an",
    " they", " which", " one", " you", " were", " her", " all", " she", " there", " would", " their",
    " we", " him", " been", " has", " when", " who", " will", " more", " no", " if", " out", " so",
    " said", " what", " up", " its", " about", " into", " than", " them", " can", " only", " other",
    " new", " some", " could", " time", " these", " two", " may", " then", " do", " first", " any",
    " session", " history", " stream", " follower", " server", " token", " packed", " record",
    " message", " delta", " window", " compressed", ".", ",", " answer", " question", " because",
)  # fmt: skip


class Mode(NamedTuple):
    """A follow stream's form: ``records`` frames (``?packed=1``) or ``event`` frames, gzip-coded or not."""

    packed: bool
    gzip: bool


# Today's frames first: every ratio is over it.
MODES: Final = {
    "frames": Mode(packed=False, gzip=False),
    "packed": Mode(packed=True, gzip=False),
    "packedGzip": Mode(packed=True, gzip=True),
    "framesGzip": Mode(packed=False, gzip=True),
}


def tokens(count: int, *, seed: int = 45) -> list[str]:
    """``count`` text-delta tokens drawn from common words, the same for a given seed."""
    rand = random.Random(seed)
    return [rand.choice(_WORDS) for _ in range(count)]


def delta(seq: int, time_ms: int, text: str) -> bytes:
    """One ``assistant/chunk`` text delta in canonical form, as a harness streams a token."""
    return encode(Event("assistant/chunk", seq, time_ms, DeltaData(1, 1, TextDelta(0, text))))


def follow_request(session: str, mode: Mode, *, after: int = -1) -> bytes:
    """``GET …/follow`` in ``mode``; identity is asked for by name, so the server cannot pick gzip."""
    query = f"after={after}" + ("&packed=1" if mode.packed else "")
    coding = "gzip" if mode.gzip else "identity"
    head = f"GET /v1/sessions/{session}/follow?{query} HTTP/1.1\r\nHost: bench\r\nAccept-Encoding: {coding}\r\n\r\n"
    return head.encode()


class Feed(NamedTuple):
    """A session (or stream) to create with ``create`` (answered 201), append a token to, and read."""

    create: bytes
    append: Callable[[int, int, str], bytes]  # (seq, time in ms, token) → the request
    reads: dict[str, tuple[Kind, bytes]]  # a reader's name → what it parses, and the request that opens it


def v1_feed(session: str, modes: Mapping[str, Mode]) -> Feed:
    """A session of ours, one 1-event append per token, read in each of ``modes`` from its start."""

    def append(seq: int, time_ms: int, text: str) -> bytes:
        return _post(f"/v1/sessions/{session}/events", b'{"events":[%b]}' % delta(seq, time_ms, text))

    return Feed(
        _post("/v1/sessions", msgspec.json.encode({"id": session, "createdAt": TIME_ZERO})),
        append,
        {name: ("v1", follow_request(session, mode)) for name, mode in modes.items()},
    )


def ds_feed(root: str, name: str, *, json: bool) -> Feed:
    """A Durable Streams stream under ``root``: each message the event's JSON (``json``), or the token as text."""
    path = f"{root}/v1/stream/{name}"
    content_type = "application/json" if json else "text/plain"

    def append(seq: int, time_ms: int, text: str) -> bytes:
        body = delta(seq, time_ms, text) if json else text.encode()
        return _send("POST", path, body, content_type)

    sse = f"GET {path}?offset=-1&live=sse HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    return Feed(_send("PUT", path, b"", content_type), append, {"sse": ("ds-json" if json else "ds-text", sse)})


class WireReader(asyncio.Protocol):
    """One SSE reader: counts the socket's bytes, decodes every event and checks it against ``texts``."""

    def __init__(self, kind: Kind, texts: Sequence[str]) -> None:
        loop = asyncio.get_running_loop()
        self.kind = kind
        self.texts = texts
        self.wire = 0  # every byte read off the socket
        self.head_bytes = 0
        self.decoded = 0  # body bytes once the chunking and the coding are undone
        self.coding = "identity"
        self.frames = 0  # SSE events with data: a retry alone is none, a control event is one
        self.reads = 0  # socket reads that carried body bytes
        self.arrived: list[int] = []  # when each seq was decoded (monotonic ns), seq 0 first
        self.wrong: list[str] = []
        self.opened: asyncio.Future[int] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.BaseTransport | None = None
        self._head = b""
        self._chunked: _Chunked | None = None
        self._inflate: Any = None
        self._sse = SSEDecoder()
        self._next = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.wire += len(data)
        if not self.opened.done():
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = self._head[: end + 4].lower(), self._head[end + 4 :]
            self.head_bytes = len(head)
            if b"\r\ncontent-encoding: gzip" in head:
                self.coding = "gzip"
                self._inflate = zlib.decompressobj(wbits=31)
            self._chunked = _Chunked() if b"\r\ntransfer-encoding: chunked" in head else None
            self.opened.set_result(int(head[9:12]))
        if not data:
            return
        self.reads += 1
        body = data if self._chunked is None else self._chunked.feed(data)
        if self._inflate is not None:
            body = self._inflate.decompress(body)
        self.decoded += len(body)
        before = self._next
        try:
            for frame in self._sse.feed(body):
                self.frames += 1
                self._frame(frame)
        except Exception as exc:  # a frame this reader cannot decode is wrong, and counted so
            self.wrong.append(f"{type(exc).__name__}: {exc}"[:300])
        now = time.monotonic_ns()
        self.arrived.extend([now] * (self._next - before))
        if self._next >= len(self.texts) and not self.done.done():
            self.done.set_result(None)

    def _frame(self, frame: ServerSentEvent) -> None:
        if self.kind == "v1":
            if frame.event == "event":
                self._event(decode_live_record(frame.data).event)
            elif frame.event == "records":
                shell = decode_live_records(frame.data)
                if shell.fromSeq != self._next:
                    self.wrong.append(f"records of [{shell.fromSeq}, {shell.toSeq}) after {self._next - 1}")
                records = (decode_page_record(raw, index=i) for i, raw in enumerate(shell.records))
                for event in iter_page_events(records):
                    self._event(event)
                if self._next != shell.toSeq:
                    self.wrong.append(f"records of [{shell.fromSeq}, {shell.toSeq}) ended at {self._next}")
            else:
                self.wrong.append(f"{frame.event} frame: {frame.data[:200]!r}")
        elif frame.event == "data":
            if self.kind == "ds-json":
                for value in msgspec.json.decode(frame.data):
                    self._check(value["seq"], value["data"]["chunk"]["text"])
            else:
                # One message a data event; the server writes ``data:`` and the token, so a token's
                # leading space is the one a decoder takes as the field's separator.
                text = self.texts[self._next] if self._next < len(self.texts) else ""
                self._check(self._next, " " * text.startswith(" ") + frame.data.decode())

    def _event(self, event: Any) -> None:
        data = event.data
        text = data.chunk.text if isinstance(data, DeltaData) and isinstance(data.chunk, TextDelta) else None
        self._check(event.seq, text)

    def _check(self, seq: int, text: str | None) -> None:
        if seq != self._next or seq >= len(self.texts) or text != self.texts[seq]:
            self.wrong.append(f"seq {seq} ({text!r}) where seq {self._next} was due")
        self._next = seq + 1

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_result(0)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def summary(self, sent: Sequence[int] | None = None) -> dict[str, Any]:
        """Bytes per event over the body (everything after the head), and, given ``sent``, delivery latency."""
        events = len(self.arrived)
        body = self.wire - self.head_bytes
        out: dict[str, Any] = {
            "events": events,
            "wrong": len(self.wrong),
            "firstWrong": self.wrong[0] if self.wrong else None,
            "coding": self.coding,
            "headBytes": self.head_bytes,
            "bodyBytes": body,
            "decodedBytes": self.decoded,
            "bytesPerEvent": round(body / events, 2) if events else None,
            "decodedBytesPerEvent": round(self.decoded / events, 2) if events else None,
            "frames": self.frames,
            "reads": self.reads,
        }
        if sent is not None:
            delays = sorted(arrived - at for arrived, at in zip(self.arrived, sent, strict=False))
            out.update(p50Ms=_ms(delays, 0.5), p99Ms=_ms(delays, 0.99), maxMs=_ms(delays, 1.0))
        return out


def _ms(ordered: list[int], q: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] / 1e6, 2)


async def _create(port: int, request: bytes) -> None:
    conn = Connection(port)
    try:
        reply = await conn.request(request)
        assert reply.status == 201, reply
    finally:
        conn.close()


async def _open(port: int, kind: Kind, request: bytes, texts: Sequence[str]) -> WireReader:
    loop = asyncio.get_running_loop()
    _, reader = await loop.create_connection(functools.partial(WireReader, kind, texts), "127.0.0.1", port)
    assert reader.transport is not None
    reader.transport.write(request)  # type: ignore[attr-defined]
    status = await asyncio.wait_for(reader.opened, 30)
    assert status == 200, (status, request)
    return reader


async def _produce(port: int, feed: Feed, texts: Sequence[str], rate: float, *, drain: float) -> tuple[list[int], int]:
    """Append one token every ``1 / rate`` s, open loop; each append's send time, and how many were not 2xx."""
    loop = asyncio.get_running_loop()
    tally = _Tally()
    transport, producer = await loop.create_connection(functools.partial(_Producer, tally), "127.0.0.1", port)
    sent: list[int] = []
    try:
        start, start_ns = time.monotonic(), time.monotonic_ns()
        for seq, text in enumerate(texts):
            delay = start + seq / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.monotonic_ns()
            request = feed.append(seq, TIME_ZERO + (now - start_ns) // 1_000_000, text)
            sent.append(now)
            producer.send(request)
        deadline = time.monotonic() + drain
        while producer.pending and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return sent, tally.refused + producer.pending
    finally:
        transport.close()


async def live(port: int, feed: Feed, texts: Sequence[str], rate: float, *, drain: float = 30) -> dict[str, Any]:
    """One live cell: every reader of ``feed`` open at once, then ``texts`` appended at ``rate`` tokens/s."""
    await _create(port, feed.create)
    readers = {name: await _open(port, kind, request, texts) for name, (kind, request) in feed.reads.items()}
    try:
        await asyncio.sleep(SETTLE_S)
        started = time.monotonic()
        sent, refused = await _produce(port, feed, texts, rate, drain=drain)
        elapsed = time.monotonic() - started
        await asyncio.wait([reader.done for reader in readers.values()], timeout=drain)
    finally:
        for reader in readers.values():
            reader.close()
    return {
        "tokens": len(texts),
        "targetPerSec": rate,
        "achievedPerSec": round(len(texts) / elapsed, 1),
        "refused": refused,
        "streams": {name: reader.summary(sent) for name, reader in readers.items()},
    }


async def burst(
    port: int, session: str, texts: Sequence[str], modes: Mapping[str, Mode], *, timeout: float = 120
) -> dict[str, Any]:
    """A session of ``texts``, stored first (appends of `SEED_BATCH` deltas), replayed whole in each mode in turn."""
    await _create(port, _post("/v1/sessions", msgspec.json.encode({"id": session, "createdAt": TIME_ZERO})))
    rand = random.Random(5)
    times = [TIME_ZERO]
    for _ in texts[1:]:
        times.append(times[-1] + rand.randint(5, 35))  # 20 ms apart on average: 50 tokens/s
    conn = Connection(port)
    try:
        for first in range(0, len(texts), SEED_BATCH):
            seqs = range(first, min(first + SEED_BATCH, len(texts)))
            body = b'{"events":[%b]}' % b",".join(delta(seq, times[seq], texts[seq]) for seq in seqs)
            reply = await conn.request(_post(f"/v1/sessions/{session}/events", body))
            assert reply.status == 201, reply
    finally:
        conn.close()
    out: dict[str, Any] = {"events": len(texts)}
    for name, mode in modes.items():
        started = time.monotonic()
        reader = await _open(port, "v1", follow_request(session, mode), texts)
        try:
            await asyncio.wait_for(asyncio.shield(reader.done), timeout)
        except TimeoutError:
            pass  # counted below: fewer events than stored
        finally:
            reader.close()
        out[name] = {**reader.summary(), "replayMs": round((time.monotonic() - started) * 1000, 1)}
    return out


class _Opening(asyncio.Protocol):
    """An idle follower: it reads whatever comes, and is open once its head and first body bytes have."""

    def __init__(self) -> None:
        self.ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.BaseTransport | None = None
        self.closed = False
        self._got = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.ready.done():
            return
        self._got += data
        end = self._got.find(b"\r\n\r\n")
        if end >= 0 and len(self._got) > end + 4:
            self.ready.set_result(int(self._got[9:12]))
            self._got = b""

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.ready.done():
            self.ready.set_result(0)


class IdleStreams:
    """Follow streams opened from one loop, ``at_once`` at a time, each open once its first body bytes came."""

    def __init__(self, port: int, requests: Sequence[bytes], *, at_once: int = 100) -> None:
        self.port = port
        self.requests = requests
        self.at_once = at_once
        self.followers: list[_Opening] = []

    async def open(self, timeout: float = 60) -> None:
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(self.at_once)

        async def one(request: bytes) -> None:
            async with gate:
                transport, follower = await loop.create_connection(_Opening, "127.0.0.1", self.port)
                self.followers.append(follower)
                transport.write(request)
                status = await asyncio.wait_for(asyncio.shield(follower.ready), timeout)
                assert status == 200, f"a follower got {status} after {len(self.followers) - 1} opened"

        await asyncio.gather(*(one(request) for request in self.requests))

    def still_open(self) -> int:
        return sum(not follower.closed for follower in self.followers)

    async def close(self) -> None:
        for follower in self.followers:
            if follower.transport is not None:
                follower.transport.close()
        await asyncio.sleep(0)

"""Follow streams on the wire (issue 45, item 5): bytes per event, delivery latency and memory, by stream form.

Four forms of ``GET /v1/sessions/{id}/follow`` (docs/protocol.md §5): today's ``event``
frames (``frames``), ``records`` frames (``packed``, §5.5), and each of them gzip-coded
(``packedGzip``, ``framesGzip``, §5.4). One service process (memory store, as shipped, the
40 ms coalescing included) serves every cell but the memory ones; `bench.live_wire` has the
load generator.

* Live: text deltas of about 5 characters, one 1-event append per token, at 50 tokens/s
  (``HISTORY_BENCH_LIVE_TOKENS``, default 200 tokens) and at 500 tokens/s (ten times as many),
  with one reader of each form on the session at once, so all four see the same appends. Per
  form: bytes read off the socket per event (the compressed bytes when coded; the body after
  the response head, chunk framing included), and the delivery latency p50/p99, from the
  append's send to the moment the reader had decoded the event.
* Burst: a session of ``HISTORY_BENCH_LIVE_BURST`` (default 10,000) text deltas already
  stored, followed with ``after=-1`` in each form in turn: bytes per event of the replay.
* Reference: the same token streams read from the Durable Streams reference server's SSE
  (``HISTORY_DS_REFERENCE`` from `scripts/with-node`; Node, in memory, uncompressed as pinned),
  each message the same event's JSON (``json``) or the bare token (``text``): its bytes per
  token, and ours over it. Without node it is ``null``, and the line says why.
* Memory: ``HISTORY_BENCH_LIVE_FOLLOWERS`` (default 2,000) idle packed followers on a fresh
  service process, gzip-coded, then (another fresh process) uncompressed: (RSS with them −
  RSS before) / followers. The followers are raw sockets in this one loop, each open once its
  head and first body bytes came. The open-file limit is raised to its hard limit first.

Prints ``HISTORY_LIVE_WIRE_RESULT {json}`` with every figure, the ratios issue 45 names and
their goals beside them (never asserted). ``HISTORY_BENCH_SMOKE=1`` runs it tiny. Asserts
structure (every event delivered once, in order, decoded to its token; every follower
open), never time or size.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any, Final
from urllib.parse import urlsplit

import pytest

from bench.live_wire import (
    MODES,
    IdleStreams,
    Kind,
    Mode,
    WireReader,
    burst,
    delta,
    ds_feed,
    follow_request,
    live,
    tokens,
    v1_feed,
)
from bench.machine import emit, machine
from bench.throughput import TIME_ZERO, Connection, _post, rss_bytes, run
from codec import Event, decode_event, encode, pack
from history_service.follow_coding import FrameCoder
from testing.servers import ServerProcess, ds_reference_server

SMOKE = os.environ.get("HISTORY_BENCH_SMOKE") == "1"


def size(name: str, full: int, smoke: int) -> int:
    """``HISTORY_BENCH_LIVE_<name>``, else ``full``; ``smoke`` in smoke mode, whatever is set."""
    return smoke if SMOKE else int(os.environ.get(f"HISTORY_BENCH_LIVE_{name}", str(full)))


# At 50 tokens/s and at ten times that, the same seconds each.
RATES: Final = {50: size("TOKENS", 200, 20), 500: 10 * size("TOKENS", 200, 20)}
BURST = size("BURST", 10_000, 500)
FOLLOWERS = size("FOLLOWERS", 2000, 50)
FOLLOWER_SESSIONS = 5 if SMOKE else 20
SESSION_EVENTS = 10  # each idle session's, replayed to its followers as they open
WARM_FOLLOWERS = 20
# After the warm-up streams close, and after every follower opened, before RSS is read.
SETTLE_S = 0.1 if SMOKE else 1.0
REFERENCE = os.environ.get("HISTORY_DS_REFERENCE")
# As shipped (bench/test_hot_path.py), but with pings every 15 s (`ServerProcess` sets 1) and room for the
# idle followers: the follower cap (3,072 by default) and uvicorn's connection limit.
ENV: Final = {
    "HISTORY_PING_INTERVAL": "15",
    "HISTORY_MAX_FOLLOWERS": str(max(3072, FOLLOWERS + WARM_FOLLOWERS + 100)),
    "HISTORY_LIMIT_CONCURRENCY": str(max(4096, 2 * FOLLOWERS + 1000)),
    "HISTORY_HTTP": "httptools",
    "HISTORY_AUTH": "none",
    "HISTORY_TIMEOUT_KEEP_ALIVE": "60",
}
GOALS: Final = {
    "packedGzipOverFramesBytesAt50": 0.25,
    "packedGzipOverFramesBytesBurst": 0.10,
    "packedGzipOverFramesP99At500": 1.2,
    "bytesPerCompressedFollower": 64 * 1024,
}


def progress(stage: str) -> None:
    print(f"[live-wire] {time.strftime('%H:%M:%S')} {stage}", file=sys.stderr, flush=True)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def wire(mode: Mode, texts: list[str]) -> bytes:
    """A follow stream of ``texts`` in ``mode`` as the service writes it: a write of one event, then one of the rest."""
    events = [decode_event(delta(seq, TIME_ZERO + seq, text)) for seq, text in enumerate(texts)]
    writes = [b"retry: 1000\n\n"]
    for first, end in ((0, 1), (1, len(texts))):
        if mode.packed:
            records = [{"event": r} if type(r) is Event else {"chunks": r} for r in pack(events[first:end])]
            data = encode({"records": records, "fromSeq": first, "toSeq": end})
            writes.append(b"id: i:%d\nevent: records\ndata: %b\n\n" % (end - 1, data))
        else:
            writes.append(
                b"".join(b"id: i:%d\nevent: event\ndata: %b\n\n" % (e.seq, encode(e)) for e in events[first:end])
            )
    coder = FrameCoder() if mode.gzip else None
    coding = b"content-encoding: gzip\r\n" if mode.gzip else b""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n%btransfer-encoding: chunked\r\n\r\n" % coding
    return head + b"".join(chunk(w if coder is None else coder.code(w)) for w in writes)


def read(kind: Kind, data: bytes, texts: list[str], piece: int) -> WireReader:
    """Feed ``data`` to a reader ``piece`` bytes at a time."""

    async def feed() -> WireReader:
        reader = WireReader(kind, texts)
        for at in range(0, len(data), piece):
            reader.data_received(data[at : at + piece])
        return reader

    return run(feed())


@pytest.mark.parametrize("piece", [1, 7, 1 << 16])
@pytest.mark.parametrize("mode", list(MODES))
def test_a_reader_decodes_every_form_in_any_pieces(mode: str, piece: int) -> None:
    texts = tokens(6)
    data = wire(MODES[mode], texts)
    reader = read("v1", data, texts, piece)
    assert reader.opened.result() == 200 and reader.done.done()
    assert (len(reader.arrived), reader.wrong, reader.wire) == (len(texts), [], len(data))
    assert reader.coding == ("gzip" if MODES[mode].gzip else "identity")
    assert reader.frames == (2 if MODES[mode].packed else len(texts))


def test_a_reader_counts_what_came_out_of_order() -> None:
    texts = tokens(6)
    data = wire(MODES["frames"], texts[:1] + texts[2:])  # seq 1 carries token 2: wrong from there on
    reader = read("v1", data, texts, 1 << 16)
    assert reader.wrong and not reader.done.done()


def test_a_reader_reads_the_reference_servers_sse() -> None:
    texts = tokens(4)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    control = b'event: control\ndata:{"streamNextOffset":"1","streamCursor":"2","upToDate":true}\n\n'
    as_json = b"".join(
        chunk(b"event: data\n") + chunk(b"data:[%b]\n\n" % delta(seq, TIME_ZERO, t)) + chunk(control)
        for seq, t in enumerate(texts)
    )
    as_text = b"".join(chunk(b"event: data\n") + chunk(b"data:%b\n\n" % t.encode()) + chunk(control) for t in texts)
    feeds: list[tuple[Kind, bytes]] = [("ds-json", head + as_json), ("ds-text", head + as_text)]
    for kind, data in feeds:
        reader = read(kind, data, texts, 5)
        assert (len(reader.arrived), reader.wrong) == (len(texts), []), kind


@pytest.fixture(scope="module")
def nofile() -> Iterator[dict[str, int]]:
    """The open-file limit raised to its hard limit: each follower is a socket here and one in the server, which
    inherits the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= FOLLOWERS + 500, f"ulimit -Hn is {hard}: too few for {FOLLOWERS} followers"
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield {"nofileBefore": soft, "nofileAfter": hard}
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def serve() -> ServerProcess:
    server = ServerProcess("memory://", env=ENV)
    server.start()
    return server


def pid_of(server: ServerProcess) -> int:
    assert server.process is not None
    return server.process.pid


async def memory(port: int, pid: int, mode: Mode) -> dict[str, Any]:
    """Idle followers in ``mode`` over `FOLLOWER_SESSIONS` sessions; the server's RSS before and with them."""
    names = [f"idle-{n}" for n in range(FOLLOWER_SESSIONS)]
    conn = Connection(port)
    try:
        for name in names:
            header = b'{"id":"%b","createdAt":%d}' % (name.encode(), TIME_ZERO)
            assert (await conn.request(_post("/v1/sessions", header))).status == 201
            body = b'{"events":[%b]}' % b",".join(
                delta(s, TIME_ZERO + s, t) for s, t in enumerate(tokens(SESSION_EVENTS))
            )
            assert (await conn.request(_post(f"/v1/sessions/{name}/events", body))).status == 201
    finally:
        conn.close()

    def requests(count: int) -> list[bytes]:
        return [follow_request(names[n % len(names)], mode) for n in range(count)]

    # A few streams first, so what the first follower alone costs (code paths, the sessions' state) is not counted.
    warm = IdleStreams(port, requests(WARM_FOLLOWERS))
    await warm.open()
    await warm.close()
    await asyncio.sleep(SETTLE_S)
    before = rss_bytes(pid)
    idle = IdleStreams(port, requests(FOLLOWERS))
    await idle.open()
    await asyncio.sleep(SETTLE_S)
    after = rss_bytes(pid)
    still_open = idle.still_open()
    await idle.close()
    return {
        "followers": FOLLOWERS,
        "sessions": FOLLOWER_SESSIONS,
        "stillOpen": still_open,
        "rssBeforeBytes": before,
        "rssAfterBytes": after,
        "bytesPerFollower": round((after - before) / FOLLOWERS),
    }


def ratio(over: float | None, under: float | None) -> float | None:
    return None if over is None or not under else round(over / under, 3)


def test_follow_streams_on_the_wire(nofile: dict[str, int]) -> None:
    started, load = time.monotonic(), os.getloadavg()[0]
    cells: dict[str, Any] = {}
    server = serve()
    try:
        for rate, count in RATES.items():
            progress(f"live: {count} tokens at {rate}/s, four forms at once")
            cells[str(rate)] = run(live(server.port, v1_feed(f"live-{rate}", MODES), tokens(count), rate))
        progress(f"burst: {BURST} stored deltas replayed in each form")
        bursts = run(burst(server.port, "burst", tokens(BURST, seed=9), MODES))
    finally:
        server.stop()
    reference: dict[str, Any] | None = None
    why = None
    if REFERENCE is None or shutil.which("node") is None:
        why = "HISTORY_DS_REFERENCE or node is missing; run under scripts/with-node"
    else:
        peer = ds_reference_server(REFERENCE)
        port = urlsplit(peer.url).port
        assert port is not None
        reference = {}
        try:
            for rate, count in RATES.items():
                for kind in ("json", "text"):
                    progress(f"reference: {count} tokens at {rate}/s, {kind}")
                    feed = ds_feed("", f"tokens-{rate}-{kind}", json=kind == "json")
                    cell = run(live(port, feed, tokens(count), rate))
                    streams = cell.pop("streams")
                    reference.setdefault(str(rate), {})[kind] = {**cell, **streams["sse"]}
        finally:
            peer.stop()
    followers: dict[str, Any] = {}
    for name in ("packedGzip", "packed"):
        progress(f"memory: {FOLLOWERS} idle {name} followers")
        server = serve()
        try:
            followers[name] = run(memory(server.port, pid_of(server), MODES[name]))
        finally:
            server.stop()

    def per_event(cell: dict[str, Any], mode: str) -> float | None:
        value: float | None = (cell["streams"] if "streams" in cell else cell)[mode]["bytesPerEvent"]
        return value

    live_p99 = {rate: {mode: s["p99Ms"] for mode, s in cell["streams"].items()} for rate, cell in cells.items()}
    by_frames = {
        **{rate: {m: ratio(per_event(c, m), per_event(c, "frames")) for m in MODES} for rate, c in cells.items()},
        "burst": {m: ratio(per_event(bursts, m), per_event(bursts, "frames")) for m in MODES},
    }
    over_reference = (
        None
        if reference is None
        else {
            rate: {
                kind: {m: ratio(per_event(cells[rate], m), ref["bytesPerEvent"]) for m in MODES}
                for kind, ref in by_kind.items()
            }
            for rate, by_kind in reference.items()
        }
    )
    result = {
        "machine": machine(
            smoke=SMOKE,
            store="memory",
            rates=RATES,
            burst=BURST,
            followers=FOLLOWERS,
            followerSessions=FOLLOWER_SESSIONS,
            coalesceMs=40,
            elapsedSeconds=round(time.monotonic() - started),
            # The machine's load average over the minute before the run and before its end: other work shows here.
            loadAverage=[round(load, 2), round(os.getloadavg()[0], 2)],
            **nofile,
        ),
        "live": cells,
        "burst": bursts,
        "reference": reference,
        "memory": followers,
        "ratios": {
            "packedGzipOverFramesBytesAt50": by_frames["50"]["packedGzip"],
            "packedGzipOverFramesBytesAt500": by_frames["500"]["packedGzip"],
            "packedGzipOverFramesBytesBurst": by_frames["burst"]["packedGzip"],
            "packedGzipOverFramesP99At500": ratio(live_p99["500"]["packedGzip"], live_p99["500"]["frames"]),
            "bytesPerCompressedFollower": followers["packedGzip"]["bytesPerFollower"],
            "compressedOverUncompressedFollower": ratio(
                followers["packedGzip"]["bytesPerFollower"], followers["packed"]["bytesPerFollower"]
            ),
            "packedGzipOverReferenceJsonAt50": None
            if over_reference is None
            else over_reference["50"]["json"]["packedGzip"],
            "framesOverReferenceJsonAt50": None if over_reference is None else over_reference["50"]["json"]["frames"],
            "packedGzipOverReferenceTextAt50": None
            if over_reference is None
            else over_reference["50"]["text"]["packedGzip"],
            "bytesOverFrames": by_frames,
            "bytesOverReference": over_reference,
        },
        "goals": GOALS,
        "referenceMissing": why,
    }
    emit("LIVE_WIRE", result)
    for at, cell in cells.items():
        assert cell["refused"] == 0, (at, cell)
        for mode, stream in cell["streams"].items():
            assert (stream["events"], stream["wrong"]) == (cell["tokens"], 0), (at, mode, stream)
            assert stream["coding"] == ("gzip" if MODES[mode].gzip else "identity"), (at, mode)
    for mode in MODES:
        assert (bursts[mode]["events"], bursts[mode]["wrong"]) == (BURST, 0), (mode, bursts[mode])
    for at, by_kind in (reference or {}).items():
        for kind, ref in by_kind.items():
            assert ref["refused"] == 0 and (ref["events"], ref["wrong"]) == (ref["tokens"], 0), (at, kind, ref)
    for name, cell in followers.items():
        assert cell["stillOpen"] == FOLLOWERS, (name, cell)

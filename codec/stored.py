"""Stored records: the storage form of a session, made for splicing (docs/protocol.md §7).

Every backend keeps, per storage record, its canonical JSON line (the exact bytes a page
carries) and the columns a join needs: the seq range, the kind, the block key and the
first and last member times. Whether two records join is decided from the columns alone,
with the one run rule (`continues_run`); joining them concatenates byte spans of their
lines. Only a row cut by an interval's edge is decoded.

Appends may store one run in several pieces. `join` builds from them the one row `pack`
would build, which is how stores seal a run; `run_lines` does the same for a page's
interval, and `event_lines` expands records into canonical event lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import Any, Final, NamedTuple

import msgspec

from codec._paths import DECODE_FAILURES, describe, reason
from codec.chunk_rows import (
    MIN_RUN,
    REASONING_BLOCK,
    ROW_TAGS,
    TEXT_BLOCK,
    TOOL_BLOCK,
    Block,
    ChunkRow,
    StorageRecord,
    block_of,
    check_row,
    continues_run,
    delta_member,
    member_count,
    pack,
    row_block,
)
from codec.errors import InvalidJsonError, RecordFormatError, RowFormatError
from codec.event_json import decode_event, encode
from codec.events import CHUNK_EVENT_TYPE, Event

__all__ = [
    "OTHER",
    "Part",
    "StoredRecord",
    "decode_storage_line",
    "event_lines",
    "join",
    "run_lines",
    "runs",
    "stored_batch",
    "stored_record",
]

OTHER: Final = 0
_SINGLE: Final = 4
_ROW_TAG: Final = {TEXT_BLOCK: b"text-chunks", REASONING_BLOCK: b"reasoning-chunks", TOOL_BLOCK: b"tool-call-chunks"}
_DELTA_TAG: Final = {TEXT_BLOCK: b"text-delta", REASONING_BLOCK: b"reasoning-delta", TOOL_BLOCK: b"tool-call-delta"}
_MEMBER_KEY: Final = {TEXT_BLOCK: b',"text":', REASONING_BLOCK: b',"text":', TOOL_BLOCK: b',"argumentsDelta":'}
_INDEX: Final = b',"index":'
_ID: Final = b',"id":'
_DT: Final = b'"dt":['
_ARGS: Final = b',"args":['
_TEXTS: Final = b',"texts":['

Part = bytes | memoryview


class StoredRecord(NamedTuple):
    """One storage record: its seq range, its canonical JSON line and its join columns.

    ``kind`` is `OTHER` for a record that never joins, the block kind (1-3) for a row and
    the block kind plus 4 for a single delta event; ``key`` is the block key (`Block.key`);
    ``time0`` and ``time1`` are the first and the last member's time.
    """

    seq: int
    members: int
    line: bytes
    kind: int = OTHER
    key: bytes = b""
    time0: int = 0
    time1: int = 0

    @property
    def block(self) -> Block:
        return Block(self.kind & 3, self.key)

    @property
    def is_row(self) -> bool:
        return 0 < self.kind < _SINGLE

    @property
    def end(self) -> int:
        """One past the last seq."""
        return self.seq + self.members


def stored_record(record: StorageRecord, line: bytes | None = None) -> StoredRecord:
    """The stored form of an event or a row; ``line`` is its canonical encoding when already made."""
    if line is None:
        line = encode(record)
    if type(record) is Event:
        member = delta_member(record)
        if member is None:
            return StoredRecord(record.seq, 1, line)
        kind, key = block_of(member)
        return StoredRecord(record.seq, 1, line, kind + _SINGLE, key, record.time, record.time)
    row: ChunkRow = record  # type: ignore[assignment]
    kind, key = row_block(row)
    return StoredRecord(row.seq0, member_count(row), line, kind, key, row.time0, row.time0 + sum(row.data.dt))


def stored_batch(events: Sequence[Event]) -> list[StoredRecord]:
    """A dense batch packed into stored records: a row for each run, an event for the rest."""
    return [stored_record(record) for record in pack(events)]


class _TypeProbe(msgspec.Struct):
    type: Any = None


_PROBE: Final = msgspec.json.Decoder(_TypeProbe)
_ROW: Final = msgspec.json.Decoder(ChunkRow)


def decode_storage_line(line: bytes, *, where: str = "record") -> StorageRecord:
    """Decode one storage line: a chunk row (by its tag) or a logical event."""
    try:
        tag = _PROBE.decode(line).type
    except DECODE_FAILURES as exc:
        if isinstance(exc, msgspec.ValidationError):
            raise RecordFormatError(f"{where}: not a JSON object: {reason(exc)}") from exc
        raise InvalidJsonError(f"{where}: invalid JSON: {reason(exc)}") from exc
    if type(tag) is str and tag in ROW_TAGS:
        try:
            row = _ROW.decode(line)
        except msgspec.ValidationError as exc:
            row_where, why = describe(exc, "row")
            raise RowFormatError(f"malformed {tag} row: {row_where}: {why}") from exc
        except DECODE_FAILURES as exc:
            raise InvalidJsonError(f"{where}: invalid JSON: {reason(exc)}") from exc
        return check_row(row)
    if tag == "session":
        raise RecordFormatError(f"{where}: a session header where a storage record was expected")
    return decode_event(line, where=where)


def runs(stored: Iterable[StoredRecord]) -> Iterator[list[StoredRecord]]:
    """Group stored records, in seq order: the pieces of each run of deltas together, every other record alone."""
    run: list[StoredRecord] = []
    for record in stored:
        if run and record.kind:
            last = run[-1]
            if last.kind and continues_run(
                last.block, last.end - 1, last.time1, record.block, record.seq, record.time0
            ):
                run.append(record)
                continue
        if run:
            yield run
        run = [record]
    if run:
        yield run


class _Piece(NamedTuple):
    """Part of a run, clipped: first seq, first and last time, and its ``dt`` and members as JSON without brackets."""

    seq: int
    time0: int
    time1: int
    dt: Part
    values: Part


class _RowBody(msgspec.Struct, gc=False):
    dt: list[int]
    texts: list[str] = []
    args: list[str] = []


class _RowLine(msgspec.Struct, gc=False):
    data: _RowBody


_ROW_BODY: Final = msgspec.json.Decoder(_RowLine)


class _SingleChunk(msgspec.Struct, gc=False):
    text: msgspec.Raw = msgspec.Raw(b"")
    argumentsDelta: msgspec.Raw = msgspec.Raw(b"")


class _SingleData(msgspec.Struct, gc=False):
    chunk: _SingleChunk


class _SingleLine(msgspec.Struct, gc=False):
    data: _SingleData


_SINGLE_LINE: Final = msgspec.json.Decoder(_SingleLine)


def _members(record: StoredRecord) -> tuple[list[int], list[str]]:
    """A stored row's ``dt`` and member strings, decoded; stored lines are canonical and trusted."""
    body = _ROW_BODY.decode(record.line).data
    return body.dt, body.args if record.kind == TOOL_BLOCK else body.texts


def _piece(record: StoredRecord, lo: int, hi: int) -> _Piece:
    """``record`` clipped to seqs ``[lo, hi)``: spans of its line unless the clip cuts it."""
    line = record.line
    view = memoryview(line)
    if not record.is_row:
        # A single delta keeps the key order it was sent in (docs/protocol.md §2.2), so its
        # member is found by decoding, never by its place in the line.
        chunk = _SINGLE_LINE.decode(line).data.chunk
        return _Piece(record.seq, record.time0, record.time1, b"", bytes(chunk.argumentsDelta or chunk.text))
    start, stop = max(lo, record.seq) - record.seq, min(hi, record.end) - record.seq
    if start == 0 and stop == record.members:
        dt_start = line.index(_DT) + len(_DT)
        dt_end = line.index(b"]", dt_start)
        marker = _ARGS if record.kind == TOOL_BLOCK else _TEXTS
        values = line.index(marker, dt_end) + len(marker)
        return _Piece(record.seq, record.time0, record.time1, view[dt_start:dt_end], view[values:-3])
    dt, members = _members(record)
    times = list(accumulate(dt, initial=record.time0))
    return _Piece(
        record.seq + start,
        times[start],
        times[stop - 1],
        encode(dt[start : stop - 1])[1:-1],
        encode(members[start:stop])[1:-1],
    )


def _comma_separated(items: Iterable[Part]) -> list[Part]:
    out: list[Part] = []
    for item in items:
        if out:
            out.append(b",")
        out.append(item)
    return out


def _row_parts(block: Block, pieces: Sequence[_Piece]) -> list[Part]:
    """The canonical line, in parts, of the row holding ``pieces`` (one run, in order)."""
    kind, key = block
    if kind == TOOL_BLOCK:
        split = key.index(_ID)
        fields, values = key[:split], b"]," + key[split + 1 : -1] + _ARGS
    else:
        fields, values = key[:-1], b"]" + _TEXTS
    first = pieces[0]
    dt: list[Part] = []
    for i, piece in enumerate(pieces):
        if i:
            dt.append(b"%d" % (piece.time0 - pieces[i - 1].time1))
        if piece.dt:
            dt.append(piece.dt)
    head = b'{"type":"%b","seq0":%d,"time0":%d,"data":%b,"dt":[' % (_ROW_TAG[kind], first.seq, first.time0, fields)
    return [head, *_comma_separated(dt), values, *_comma_separated(piece.values for piece in pieces), b"]}}"]


def run_lines(run: Sequence[StoredRecord], lo: int, hi: int) -> Iterator[tuple[bool, int, int, list[Part]]]:
    """The records `pack` builds from a run (see `runs`) clipped to seqs ``[lo, hi)``.

    Yields ``(is_row, first seq, members, parts)``, where the parts join into the record's
    canonical line. A run that is one stored record, uncut, is its line as it is.
    """
    first, last = run[0], run[-1]
    start, stop = max(lo, first.seq), min(hi, last.end)
    if start >= stop:
        return
    if len(run) == 1 and (not first.is_row or (first.members >= MIN_RUN and stop - start == first.members)):
        yield first.is_row, first.seq, first.members, [first.line]
        return
    inside = [record for record in run if record.end > start and record.seq < stop]
    if stop - start >= MIN_RUN:
        pieces = [_piece(record, start, stop) for record in inside]
        yield True, start, stop - start, _row_parts(first.block, pieces)
        return
    # Too short for a row: pack leaves these as events.
    for seq, lines in event_lines(inside, start, stop):
        for i, line in enumerate(lines):
            yield False, seq + i, 1, [line]


def join(run: Sequence[StoredRecord]) -> list[StoredRecord]:
    """The stored records `pack` builds from the pieces of one run (see `runs`): how a store seals it."""
    first, last = run[0], run[-1]
    if len(run) == 1 and (not first.is_row or first.members >= MIN_RUN):
        return [first]
    members = last.end - first.seq
    if members < MIN_RUN and not any(record.is_row for record in run):
        return list(run)
    if members < MIN_RUN:
        lines = [line for _, group in event_lines(run, first.seq, last.end) for line in group]
        return [stored_record(decode_event(line), line) for line in lines]
    line = b"".join(_row_parts(first.block, [_piece(record, first.seq, last.end) for record in run]))
    return [StoredRecord(first.seq, members, line, first.kind & 3, first.key, first.time0, last.time1)]


def event_lines(
    stored: Iterable[StoredRecord], lo: int, hi: int, *, opening: bytes = b"", closing: bytes = b""
) -> Iterator[tuple[int, list[bytes]]]:
    """The canonical lines of the logical events in ``[lo, hi)``, each between ``opening`` and ``closing``.

    Yields, per stored record that overlaps the interval, its first seq there and its lines.
    """
    for record in stored:
        if record.end <= lo or record.seq >= hi:
            continue
        if not record.is_row:
            yield record.seq, [opening + record.line + closing if opening or closing else record.line]
            continue
        dt, members = _members(record)
        start, stop = max(lo, record.seq) - record.seq, min(hi, record.end) - record.seq
        times = list(accumulate(dt[: stop - 1], initial=record.time0))
        template = _line_template(record.block, opening, closing)
        items = zip(
            range(record.seq + start, record.seq + stop), times[start:], map(encode, members[start:stop]), strict=True
        )
        yield record.seq + start, [template % item for item in items]


def _line_template(block: Block, opening: bytes, closing: bytes) -> bytes:
    """A ``%``-template of a block's delta event line, taking the seq, the time and the member's JSON."""
    kind, key = block
    at = key.index(_INDEX)
    fixed = (
        opening + b'{"type":"' + CHUNK_EVENT_TYPE.encode() + b'","seq":',
        b',"time":',
        b',"data":%b,"chunk":{"type":"%b"%b%b' % (key[:at], _DELTA_TAG[kind], key[at:-1], _MEMBER_KEY[kind]),
        b"}}}" + closing,
    )
    escaped = [part.replace(b"%", b"%%") for part in fixed]
    return escaped[0] + b"%d" + escaped[1] + b"%d" + escaped[2] + b"%b" + escaped[3]

"""Server splicing (docs/protocol.md §4, §7): page records and bodies made from byte spans of stored lines.

A page is built from the stored records covering its interval, never from decoded events:
the pieces of a run that appends stored apart are joined into the one row `pack` would
build (`run_lines`, and `join`, which is how stores seal a run), and `event_lines` expands
records into canonical event lines for the unpacked page. Only a row cut by an interval's
edge is decoded. The result, `splice` or `raw_records`, is byte-identical to encoding
`pack_page` of the same logical events, which `codec.pages` decodes strictly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import Final, NamedTuple

import msgspec

from codec.chunk_rows import MIN_RUN, REASONING_BLOCK, TEXT_BLOCK, TOOL_BLOCK, Block
from codec.event_json import decode_event, encode
from codec.events import CHUNK_EVENT_TYPE, SessionHeader
from codec.stored import Part, StoredRecord, runs, single_delta, stored_record

__all__ = [
    "SplicedRecords",
    "event_lines",
    "event_records",
    "join",
    "live_records",
    "page_body",
    "page_parts",
    "page_size",
    "raw_records",
    "run_lines",
    "snapshot_body",
    "splice",
]

_ROW_TAG: Final = {TEXT_BLOCK: b"text-chunks", REASONING_BLOCK: b"reasoning-chunks", TOOL_BLOCK: b"tool-call-chunks"}
_DELTA_TAG: Final = {TEXT_BLOCK: b"text-delta", REASONING_BLOCK: b"reasoning-delta", TOOL_BLOCK: b"tool-call-delta"}
_MEMBER_KEY: Final = {TEXT_BLOCK: b',"text":', REASONING_BLOCK: b',"text":', TOOL_BLOCK: b',"argumentsDelta":'}
_INDEX: Final = b',"index":'
_ID: Final = b',"id":'
_DT: Final = b'"dt":['
_ARGS: Final = b',"args":['
_TEXTS: Final = b',"texts":['
_EVENT_OPEN: Final = b'{"event":'
_CHUNKS_OPEN: Final = b'{"chunks":'
_RECORDS_OPEN: Final = b'{"records":['
_EVENT_FRAME: Final = len(_EVENT_OPEN) + 1


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


def event_records(stored: Iterable[StoredRecord], lo: int, hi: int) -> list[StoredRecord]:
    """Each logical event of ``[lo, hi)`` as its own stored record: a row's members as the single deltas it packs.

    Records of one event each never overlap, whatever rows a store compacted them into
    between two reads, and `splice` joins them back into the rows `pack` builds.
    """
    out: list[StoredRecord] = []
    for record in stored:
        if record.end <= lo or record.seq >= hi:
            continue
        if not record.is_row:
            out.append(record)
            continue
        dt, members = _members(record)
        start, stop = max(lo, record.seq) - record.seq, min(hi, record.end) - record.seq
        times = list(accumulate(dt[: stop - 1], initial=record.time0))
        block = record.block
        template = _line_template(block, b"", b"")
        for i in range(start, stop):
            line = template % (record.seq + i, times[i], encode(members[i]))
            out.append(single_delta(record.seq + i, line, block, times[i]))
    return out


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


class SplicedRecords:
    """The page records of an interval, as byte parts that join into the records array's content.

    Records are separated by ``,``. Each record's byte position and place in the parts are
    kept, so the records from any one on, which is the page for a later ``fromSeq``, are a
    slice of the parts and their size a subtraction.
    """

    __slots__ = ("_offsets", "_part_of", "_parts", "_positions", "_size", "starts")

    def __init__(self) -> None:
        self._parts: list[Part] = []
        self._size = 0
        self.starts: list[int] = []
        self._positions: list[int] = []
        self._part_of: list[int] = []
        self._offsets: list[int] = []

    def __len__(self) -> int:
        return len(self.starts)

    def _separate(self) -> None:
        if self.starts:
            self._parts.append(b",")
            self._size += 1

    def add(self, seq: int, parts: Iterable[Part]) -> None:
        """Add one record, given as the parts of its bytes."""
        self._separate()
        self.starts.append(seq)
        self._positions.append(self._size)
        self._part_of.append(len(self._parts))
        self._offsets.append(0)
        for part in parts:
            self._parts.append(part)
            self._size += len(part)

    def add_event(self, seq: int, line: bytes) -> None:
        """Add one ``{"event":line}`` record: `add` of its three parts."""
        self._separate()
        self.starts.append(seq)
        self._positions.append(self._size)
        self._part_of.append(len(self._parts))
        self._offsets.append(0)
        self._parts += (_EVENT_OPEN, line, b"}")
        self._size += len(line) + _EVENT_FRAME

    def add_each(self, first_seq: int, records: list[bytes]) -> None:
        """Add records of consecutive seqs, one bytes each, as one part."""
        if not records:
            return
        self._separate()
        offsets = list(accumulate([len(record) + 1 for record in records[:-1]], initial=0))
        self.starts.extend(range(first_seq, first_seq + len(records)))
        self._positions.extend([self._size + offset for offset in offsets])
        self._part_of.extend([len(self._parts)] * len(records))
        self._offsets.extend(offsets)
        blob = records[0] if len(records) == 1 else b",".join(records)
        self._parts.append(blob)
        self._size += len(blob)

    def size(self, first: int = 0) -> int:
        """The bytes of records ``first..`` joined by commas."""
        return self._size - self._positions[first] if first < len(self.starts) else 0

    def parts(self, first: int = 0) -> list[Part]:
        """The parts of records ``first..``."""
        if first >= len(self.starts):
            return []
        at, offset = self._part_of[first], self._offsets[first]
        return [memoryview(self._parts[at])[offset:] if offset else self._parts[at], *self._parts[at + 1 :]]

    def followed_by(self, other: SplicedRecords, first: int) -> SplicedRecords:
        """These records, then ``other``'s records ``first..``."""
        out = SplicedRecords()
        out._parts, out._size = self._parts[:], self._size
        out.starts, out._positions = self.starts[:], self._positions[:]
        out._part_of, out._offsets = self._part_of[:], self._offsets[:]
        if first >= len(other.starts):
            return out
        out._separate()
        at, offset, position = other._part_of[first], other._offsets[first], other._positions[first]
        base = len(out._parts)
        for j in range(first, len(other.starts)):
            out.starts.append(other.starts[j])
            out._positions.append(out._size + other._positions[j] - position)
            out._part_of.append(base + other._part_of[j] - at)
            out._offsets.append(other._offsets[j] - offset if other._part_of[j] == at else other._offsets[j])
        tail = other.parts(first)
        out._parts.extend(tail)
        out._size += sum(map(len, tail))
        return out

    def __iter__(self) -> Iterator[bytes]:
        """Each record's bytes, for tests and tools."""
        content = b"".join(self._parts)
        ends = [position - 1 for position in self._positions[1:]] + [len(content)] if self.starts else []
        for position, end in zip(self._positions, ends, strict=True):
            yield content[position:end]


def splice(stored: Iterable[StoredRecord], from_seq: int, to_seq: int) -> SplicedRecords:
    """The page records for ``[from_seq, to_seq)`` from the stored records covering it, in seq order.

    Byte-identical to encoding ``pack_page`` of the same logical events: runs split by
    appends are joined into the one row `pack` builds, from spans of the stored lines.
    """
    out = SplicedRecords()
    for run in runs(record for record in stored if record.end > from_seq and record.seq < to_seq):
        if len(run) == 1 and not run[0].is_row:
            # Most records: an event (or a lone delta) inside the interval, as it is stored.
            out.add_event(run[0].seq, run[0].line)
            continue
        for is_row, seq, _, parts in run_lines(run, from_seq, to_seq):
            out.add(seq, [_CHUNKS_OPEN if is_row else _EVENT_OPEN, *parts, b"}"])
    return out


def raw_records(stored: Iterable[StoredRecord], from_seq: int, to_seq: int) -> SplicedRecords:
    """Every logical event of ``[from_seq, to_seq)`` as its own ``{"event"}`` record: the unpacked page."""
    out = SplicedRecords()
    for seq, records in event_lines(stored, from_seq, to_seq, opening=_EVENT_OPEN, closing=b"}"):
        out.add_each(seq, records)
    return out


def _tail(from_seq: int, to_seq: int) -> bytes:
    return b'],"hasMore":%b,"fromSeq":%d,"toSeq":%d}' % (b"true" if from_seq > 0 else b"false", from_seq, to_seq)


def page_size(records: SplicedRecords, first: int, from_seq: int, to_seq: int) -> int:
    """The bytes `page_body` would make, without making them."""
    return len(_RECORDS_OPEN) + records.size(first) + len(_tail(from_seq, to_seq))


def page_parts(records: SplicedRecords, first: int, from_seq: int, to_seq: int) -> list[Part]:
    """The page body of records ``first..``, which cover ``[from_seq, to_seq)``, as parts in order.

    Sent part by part, a page never exists as one more copy of its stored records.
    """
    return [_RECORDS_OPEN, *records.parts(first), _tail(from_seq, to_seq)]


def page_body(records: SplicedRecords, first: int, from_seq: int, to_seq: int) -> bytes:
    """The page body of records ``first..``, which cover ``[from_seq, to_seq)``."""
    return b"".join(page_parts(records, first, from_seq, to_seq))


def live_records(stored: Iterable[StoredRecord], from_seq: int, to_seq: int) -> bytes:
    """A packed follow frame's data (docs/protocol.md §5.5): the page records of ``[from_seq, to_seq)``
    from the stored records covering it, with the interval."""
    records = splice(stored, from_seq, to_seq)
    return b"".join([_RECORDS_OPEN, *records.parts(), b'],"fromSeq":%d,"toSeq":%d}' % (from_seq, to_seq)])


def snapshot_body(header: SessionHeader, cursor: int, page: bytes) -> bytes:
    """A follow snapshot's data: the header and the cursor, then the fields of ``page``, a page body."""
    return b"".join([b'{"header":%b,"cursor":%d,' % (encode(header), cursor), memoryview(page)[1:]])

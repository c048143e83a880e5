"""Page records built directly from stored lines (docs/protocol.md §7.4, cold reads).

`build_page_records` turns the stored lines that cover ``[from_seq, to_seq)`` into the
JSON array of page records, byte-identical to ``encode(pack_page(events))`` over the same
logical events, without expanding rows into events:

* ordinary events are spliced as their stored bytes;
* a row's ``texts``/``args`` array is spliced as raw JSON; only a row cut by the interval
  edge, or a run too short to pack, is decoded;
* adjacent stored rows of one run (split by batch boundaries or the row cap), and stored
  single deltas that continue them, are joined into the one row `pack` would build.

Stored lines must be canonical (``encode(record)``); stores re-encode foreign lines first.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate
from typing import Any, Final

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from codec import (
    CHUNK_EVENT_TYPE,
    DeltaData,
    Event,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    continues_run,
    decode_event,
    delta_member,
    encode,
)
from persistence.stored import StoredRecord, is_row_line

__all__ = ["build_page_records", "records_body"]


class _TextData(Struct, gc=False):
    turn: Any
    step: Any
    index: Any
    dt: list[int]
    texts: Raw


class _ToolData(Struct, gc=False, kw_only=True):
    turn: Any
    step: Any
    index: Any
    dt: list[int]
    id: str
    name: str | UnsetType = UNSET
    args: Raw


class _TextRow(Struct, gc=False, tag="text-chunks", tag_field="type"):
    seq0: int
    time0: int
    data: _TextData


class _ReasoningRow(Struct, gc=False, tag="reasoning-chunks", tag_field="type"):
    seq0: int
    time0: int
    data: _TextData


class _ToolRow(Struct, gc=False, tag="tool-call-chunks", tag_field="type"):
    seq0: int
    time0: int
    data: _ToolData


_RawRow = _TextRow | _ReasoningRow | _ToolRow
_ROW: Final = msgspec.json.Decoder(_RawRow)
_STRINGS: Final = msgspec.json.Decoder(list[str])
_CHUNK_PREFIX: Final = b'{"type":"' + CHUNK_EVENT_TYPE.encode() + b'"'
_DELTA_FOR_ROW: Final[dict[type[Any], type[Any]]] = {
    _TextRow: TextDelta,
    _ReasoningRow: ReasoningDelta,
    _ToolRow: ToolCallDelta,
}


def _row_head(row: _RawRow) -> DeltaData:
    """A member-less stand-in for the row's key, for `continues_run`."""
    data = row.data
    if isinstance(data, _ToolData):
        return DeltaData(
            data.turn, data.step, ToolCallDelta(index=data.index, id=data.id, name=data.name, argumentsDelta="")
        )
    return DeltaData(data.turn, data.step, _DELTA_FOR_ROW[type(row)](data.index, ""))


class _Run:
    """A run being joined: its key, first member, and raw member arrays."""

    __slots__ = ("count", "dt", "head", "last_seq", "last_time", "parts", "row_type", "seq0", "time0", "units")

    def __init__(self, head: DeltaData, row_type: type[Any], seq: int, time: int) -> None:
        self.head = head
        self.row_type = row_type
        self.seq0 = seq
        self.time0 = time
        self.last_seq = seq - 1
        self.last_time = time
        self.count = 0
        self.dt: list[int] = []
        self.parts: list[bytes | memoryview] = []
        # (line, None) for a stored single event, (None, texts) for members cut from a row.
        self.units: list[tuple[bytes | None, list[str] | None]] = []

    def add(
        self,
        first_time: int,
        dt: list[int],
        count: int,
        part: bytes | memoryview,
        unit: tuple[bytes | None, list[str] | None],
    ) -> None:
        if self.count:
            self.dt.append(first_time - self.last_time)
        self.dt.extend(dt)
        self.last_time = first_time + sum(dt)
        self.last_seq += count
        self.count += count
        if part:
            self.parts.append(part)
        self.units.append(unit)

    def records(self) -> list[bytes]:
        if self.count >= 3:
            head = self.head
            chunk = head.chunk
            payload = Raw(b"[" + b",".join(self.parts) + b"]")
            row: _RawRow
            if isinstance(chunk, ToolCallDelta):
                data = _ToolData(
                    turn=head.turn,
                    step=head.step,
                    index=chunk.index,
                    dt=self.dt,
                    id=chunk.id,
                    name=chunk.name,
                    args=payload,
                )
                row = _ToolRow(self.seq0, self.time0, data)
            else:
                row = self.row_type(
                    self.seq0, self.time0, _TextData(head.turn, head.step, chunk.index, self.dt, payload)
                )
            return [b'{"chunks":' + encode(row) + b"}"]
        return self._short_records()

    def _short_records(self) -> list[bytes]:
        # Fewer than three members: each becomes its own event, as `pack` leaves them.
        times = accumulate(self.dt, initial=self.time0)
        out = []
        seq = self.seq0
        for line, texts in self.units:
            if line is not None:
                next(times)
                out.append(b'{"event":' + line + b"}")
                seq += 1
                continue
            for text in texts or ():
                event = Event(CHUNK_EVENT_TYPE, seq, next(times), _member(self.head, text))
                out.append(b'{"event":' + encode(event) + b"}")
                seq += 1
        return out


def _member(head: DeltaData, text: str) -> DeltaData:
    chunk = head.chunk
    if isinstance(chunk, ToolCallDelta):
        return DeltaData(
            head.turn, head.step, ToolCallDelta(index=chunk.index, id=chunk.id, name=chunk.name, argumentsDelta=text)
        )
    return DeltaData(head.turn, head.step, type(chunk)(chunk.index, text))


def build_page_records(stored: Iterable[StoredRecord], from_seq: int, to_seq: int) -> list[bytes]:
    """The page records for ``[from_seq, to_seq)``, each as JSON bytes, from stored records in seq order.

    ``stored`` must cover the interval contiguously; records entirely outside it are skipped.
    """
    out: list[bytes] = []
    run: _Run | None = None
    for seq, count, line in stored:
        if seq + count <= from_seq or seq >= to_seq:
            continue
        if is_row_line(line):
            row = _ROW.decode(line)
            head = _row_head(row)
            start, stop = max(0, from_seq - seq), min(count, to_seq - seq)
            time = row.time0
            dt = row.data.dt
            payload = row.data.args if isinstance(row.data, _ToolData) else row.data.texts
            members: list[str] | None = None
            part: bytes | memoryview
            if start or stop < count:
                members = _STRINGS.decode(payload)[start:stop]
                time += sum(dt[:start])
                dt = dt[start : stop - 1]
                part = encode(members)[1:-1]
            else:
                part = memoryview(payload)[1:-1]
            first = seq + start
            if run is None or not continues_run(run.head, run.last_seq, run.last_time, head, first, time):
                if run is not None:
                    out.extend(run.records())
                run = _Run(head, type(row), first, time)
            if members is None and run.count + (stop - start) < 3:
                members = _STRINGS.decode(payload)
            run.add(time, dt, stop - start, part, (None, members))
            continue
        if line.startswith(_CHUNK_PREFIX):
            event = decode_event(line)
            member = delta_member(event)
            if member is not None:
                if run is None or not continues_run(
                    run.head, run.last_seq, run.last_time, member, event.seq, event.time
                ):
                    if run is not None:
                        out.extend(run.records())
                    run = _Run(member, _row_type(member), event.seq, event.time)
                run.add(event.time, [], 1, encode(_member_text(member)), (line, None))
                continue
        if run is not None:
            out.extend(run.records())
            run = None
        out.append(b'{"event":' + line + b"}")
    if run is not None:
        out.extend(run.records())
    return out


def _member_text(member: DeltaData) -> str:
    chunk = member.chunk
    return chunk.argumentsDelta if isinstance(chunk, ToolCallDelta) else chunk.text


def _row_type(member: DeltaData) -> type[Any]:
    chunk = member.chunk
    if isinstance(chunk, ToolCallDelta):
        return _ToolRow
    return _TextRow if isinstance(chunk, TextDelta) else _ReasoningRow


def records_body(records: list[bytes]) -> bytes:
    """The JSON array of page records."""
    return b"[" + b",".join(records) + b"]"

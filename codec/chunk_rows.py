"""Lossless chunk rows (docs/protocol.md §3), the storage and wire format of the deepseek-harness logs.

A run of at least `MIN_RUN` consecutive delta ``assistant/chunk`` events of one block
becomes one row::

    {"type":"text-chunks","seq0":10,"time0":1700000000000,
     "data":{"turn":2,"step":1,"index":1,"dt":[3,0,-1],"texts":["Hel","lo",""," world"]}}

Member *k* has ``seq = seq0 + k`` and ``time = time0 + dt[0] + ... + dt[k-1]``. ``dt`` has one
entry per member after the first and may be negative. ``texts`` (or ``args`` for a tool
call) keeps one string per member: token boundaries are data. A tool-call row carries
``name`` only when every member carried the same ``name``. Anything that does not fit a
row stays a verbatim event: compression may be lost, data never is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import accumulate, repeat
from operator import sub
from typing import Annotated, Any, Final

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from codec._paths import describe
from codec.errors import RowFormatError
from codec.events import (
    CHUNK_EVENT_TYPE,
    MAX_SAFE_INTEGER,
    DeltaData,
    Event,
    ReasoningDelta,
    SafeInt,
    Seq,
    TextDelta,
    ToolCallDelta,
    as_delta_data,
)

__all__ = [
    "MIN_RUN",
    "ROW_TAGS",
    "ChunkRow",
    "ReasoningChunks",
    "StorageRecord",
    "TextChunks",
    "TextRowData",
    "ToolCallChunks",
    "ToolCallRowData",
    "check_row",
    "continues_run",
    "decode_storage_record",
    "delta_member",
    "expand_records",
    "expand_row",
    "member_count",
    "pack",
    "record_range",
    "row_from_value",
]

MIN_RUN: Final = 3
ROW_TAGS: Final = frozenset({"text-chunks", "reasoning-chunks", "tool-call-chunks"})

Number = int | float
Members = Annotated[list[str], Meta(min_length=1)]


class TextRowData(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """``data`` of a text or reasoning row: ``{turn, step, index, dt, texts}``. Treat the lists as immutable."""

    turn: Number
    step: Number
    index: Number
    dt: list[SafeInt]
    texts: Members


class ToolCallRowData(Struct, frozen=True, gc=False, kw_only=True, forbid_unknown_fields=True):
    """``data`` of a tool-call row: ``{turn, step, index, dt, id, name?, args}``."""

    turn: Number
    step: Number
    index: Number
    dt: list[SafeInt]
    id: str
    name: str | UnsetType = UNSET
    args: Members


class TextChunks(Struct, frozen=True, gc=False, forbid_unknown_fields=True, tag="text-chunks", tag_field="type"):
    """A packed run of ``text-delta`` chunks."""

    seq0: Seq
    time0: SafeInt
    data: TextRowData


class ReasoningChunks(
    Struct, frozen=True, gc=False, forbid_unknown_fields=True, tag="reasoning-chunks", tag_field="type"
):
    """A packed run of ``reasoning-delta`` chunks."""

    seq0: Seq
    time0: SafeInt
    data: TextRowData


class ToolCallChunks(
    Struct, frozen=True, gc=False, forbid_unknown_fields=True, tag="tool-call-chunks", tag_field="type"
):
    """A packed run of ``tool-call-delta`` chunks of one call."""

    seq0: Seq
    time0: SafeInt
    data: ToolCallRowData


ChunkRow = TextChunks | ReasoningChunks | ToolCallChunks
StorageRecord = Event | ChunkRow

_ROW_TYPES: Final = (TextChunks, ReasoningChunks, ToolCallChunks)
_TEXT_ROW_FOR: Final[dict[type[Any], type[TextChunks] | type[ReasoningChunks]]] = {
    TextDelta: TextChunks,
    ReasoningDelta: ReasoningChunks,
}


def member_count(row: ChunkRow) -> int:
    """The number of logical events a row stands for."""
    data = row.data
    return len(data.args) if isinstance(data, ToolCallRowData) else len(data.texts)


def record_range(record: StorageRecord) -> tuple[int, int]:
    """The inclusive ``(first, last)`` seq range a storage record covers."""
    if type(record) is Event:
        return record.seq, record.seq
    row: ChunkRow = record  # type: ignore[assignment]
    return row.seq0, row.seq0 + member_count(row) - 1


def check_row(row: ChunkRow, *, max_abs_dt: int | None = None) -> ChunkRow:
    """Check the rules a row's types cannot express; return the row or raise `RowFormatError`.

    ``dt`` has exactly ``members - 1`` entries, the last member's seq is a safe integer, and
    every running time ``time0 + dt[0] + ... + dt[k-1]`` is a safe integer. A decoder that
    has already bounded every ``|dt[k]|`` passes that bound as ``max_abs_dt``, which turns
    the time check into one comparison for any realistic row.
    """
    data = row.data
    members = len(data.args) if isinstance(data, ToolCallRowData) else len(data.texts)
    tag = row.__struct_config__.tag
    if members == 0:
        raise RowFormatError(f"malformed {tag} row: it has no members")
    dt = data.dt
    if len(dt) != members - 1:
        raise RowFormatError(
            f"malformed {tag} row: dt has {len(dt)} entries for {members} members, expected {members - 1}"
        )
    if members - 1 > MAX_SAFE_INTEGER - row.seq0:
        raise RowFormatError(f"malformed {tag} row: member seq {row.seq0} + {members - 1} exceeds 2^53-1")
    if dt:
        # Cheap bound first: only rows that could leave the range pay for the exact prefix scan.
        widest = max(-min(dt), max(dt)) if max_abs_dt is None else max_abs_dt
        if abs(row.time0) + widest * len(dt) > MAX_SAFE_INTEGER:
            for k, time in enumerate(accumulate(dt, initial=row.time0)):
                if not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER:
                    raise RowFormatError(f"malformed {tag} row: running time of member {k} exceeds 2^53-1")
    return row


def row_from_value(value: dict[str, Any]) -> ChunkRow:
    """Validate a decoded JSON object whose ``type`` is a row tag, strictly, as a `ChunkRow`."""
    tag = value.get("type")
    try:
        row: ChunkRow = msgspec.convert(value, ChunkRow)
    except RecursionError as exc:
        raise RowFormatError(f"malformed {tag} row: nesting is too deep") from exc
    except msgspec.ValidationError as exc:
        where, why = describe(exc, "row")
        raise RowFormatError(f"malformed {tag} row: {where}: {why}") from exc
    return check_row(row)


def expand_row(row: ChunkRow) -> list[Event]:
    """The exact logical events of a row, in seq order, in canonical form."""
    data = row.data
    seq0 = row.seq0
    if isinstance(data, ToolCallRowData):
        call_id, name, index = data.id, data.name, data.index
        chunks: Iterable[Any] = [ToolCallDelta(index=index, id=call_id, name=name, argumentsDelta=a) for a in data.args]
        members = len(data.args)
    else:
        chunk_cls = TextDelta if type(row) is TextChunks else ReasoningDelta
        chunks = map(chunk_cls, repeat(data.index), data.texts)
        members = len(data.texts)
    datas = map(DeltaData, repeat(data.turn), repeat(data.step), chunks)
    times = accumulate(data.dt, initial=row.time0)
    return list(map(Event, repeat(CHUNK_EVENT_TYPE), range(seq0, seq0 + members), times, datas))


def expand_records(records: Iterable[StorageRecord]) -> list[Event]:
    """Expand storage or page records into their logical events, in order."""
    events: list[Event] = []
    for record in records:
        if type(record) is Event:
            events.append(record)
        else:
            events.extend(expand_row(record))  # type: ignore[arg-type]
    return events


def decode_storage_record(value: object) -> list[Any]:
    """Decode one storage record into its logical events.

    A row (a `ChunkRow` Struct, or a JSON object whose ``type`` is a row tag) is checked
    strictly and expanded; a violation raises `RowFormatError` ("malformed <tag> row:
    <why>"). Any other value, including an `Event`, ``None`` or a string, is not a row and
    decodes to itself: ``[value]``.
    """
    if isinstance(value, _ROW_TYPES):
        return expand_row(check_row(value))
    if type(value) is dict:
        tag = value.get("type")
        if type(tag) is str and tag in ROW_TAGS:
            return expand_row(row_from_value(value))
    return [value]


def delta_member(event: Event) -> DeltaData | None:
    """The delta payload of ``event`` if it may join a row (exact keys, valid seq and time), else ``None``.

    This is the per-event half of `pack`'s rule; the other half compares neighbours.
    """
    raw = event.data
    data: DeltaData | None = raw if type(raw) is DeltaData else as_delta_data(raw, any_order=True)
    seq, time = event.seq, event.time
    if (
        data is None
        or event.type != CHUNK_EVENT_TYPE
        or event.ignorable is not UNSET
        or event.sourceEventSeqs is not UNSET
        or event.surfaceOp is not UNSET
        or event.conversationOp is not UNSET
        or type(seq) is not int
        or type(time) is not int
        or not 0 <= seq <= MAX_SAFE_INTEGER
        or not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER
    ):
        return None
    return data


def continues_run(last: DeltaData, last_seq: int, last_time: int, next_: DeltaData, seq: int, time: int) -> bool:
    """Whether a delta at ``seq``/``time`` may follow ``last`` in one row (the neighbour half of `pack`'s rule)."""
    a, b = last.chunk, next_.chunk
    return (
        seq == last_seq + 1
        and type(a) is type(b)
        and a.index == b.index
        and last.turn == next_.turn
        and last.step == next_.step
        and type(a.index) is type(b.index)
        and type(last.turn) is type(next_.turn)
        and type(last.step) is type(next_.step)
        and -MAX_SAFE_INTEGER <= time - last_time <= MAX_SAFE_INTEGER
        and (type(a) is not ToolCallDelta or (a.id == b.id and a.name == b.name))  # type: ignore[union-attr]
    )


def pack(events: Iterable[Event], *, max_members: int | None = None) -> list[StorageRecord]:
    """Pack logical events into storage records: verbatim events and chunk rows.

    A run of at least `MIN_RUN` delta events becomes a row when every member has exactly
    the keys ``type, seq, time, data``, the same delta kind, ``turn``, ``step`` and
    ``index`` (same value and JSON type), dense seqs, safe-integer time gaps and, for tool
    calls, the same ``id`` and the same presence and value of ``name``. ``max_members``
    caps a row's length (stores use it to bound their lookback); the remainder of a run
    shorter than `MIN_RUN` stays verbatim.
    """
    if max_members is not None and max_members < MIN_RUN:
        raise ValueError(f"max_members must be at least {MIN_RUN}")
    out: list[StorageRecord] = []
    run: list[Event] = []
    deltas: list[DeltaData] = []
    kind: type[Any] = type(None)
    turn: Any = None
    step: Any = None
    index: Any = None
    call_id: Any = None
    name: Any = None
    last_seq = last_time = 0
    index_type: type[Any] = type(None)
    turn_type: type[Any] = type(None)
    step_type: type[Any] = type(None)
    for event in events:
        data = event.data
        if type(data) is DeltaData and run:
            # Fast path: a delta that continues the current run (most events in a long session).
            chunk = data.chunk
            seq, time = event.seq, event.time
            if (
                seq == last_seq + 1
                and type(chunk) is kind
                and chunk.index == index
                and data.turn == turn
                and data.step == step
                and type(chunk.index) is index_type
                and type(data.turn) is turn_type
                and type(data.step) is step_type
                and event.type == CHUNK_EVENT_TYPE
                and event.ignorable is UNSET
                and event.sourceEventSeqs is UNSET
                and event.surfaceOp is UNSET
                and event.conversationOp is UNSET
                and type(seq) is int
                and seq <= MAX_SAFE_INTEGER
                and type(time) is int
                and -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER
                and -MAX_SAFE_INTEGER <= time - last_time <= MAX_SAFE_INTEGER
                and (type(chunk) is not ToolCallDelta or (chunk.id == call_id and chunk.name == name))
            ):
                run.append(event)
                deltas.append(data)
                last_seq, last_time = seq, time
                continue
        # The same test as delta_member, inlined: a call per event costs ~10% of pack's time.
        if type(data) is not DeltaData:
            data = as_delta_data(data, any_order=True) if type(data) is dict else None
        seq, time = event.seq, event.time
        if (
            data is None
            or event.type != CHUNK_EVENT_TYPE
            or event.ignorable is not UNSET
            or event.sourceEventSeqs is not UNSET
            or event.surfaceOp is not UNSET
            or event.conversationOp is not UNSET
            or type(seq) is not int
            or type(time) is not int
            or not 0 <= seq <= MAX_SAFE_INTEGER
            or not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER
        ):
            if run:
                _flush(run, deltas, out, max_members)
                run, deltas = [], []
            out.append(event)
            continue
        chunk = data.chunk
        # Types are compared too: 1 and 1.0 are one JS number but two JSON spellings.
        if run and not (
            seq == last_seq + 1
            and type(chunk) is kind
            and chunk.index == index
            and data.turn == turn
            and data.step == step
            and type(chunk.index) is type(index)
            and type(data.turn) is type(turn)
            and type(data.step) is type(step)
            and -MAX_SAFE_INTEGER <= time - last_time <= MAX_SAFE_INTEGER
            and (kind is not ToolCallDelta or (chunk.id == call_id and chunk.name == name))
        ):
            _flush(run, deltas, out, max_members)
            run, deltas = [], []
        if not run:
            kind, turn, step, index = type(chunk), data.turn, data.step, chunk.index
            index_type, turn_type, step_type = type(index), type(turn), type(step)
            if kind is ToolCallDelta:
                call_id, name = chunk.id, chunk.name
        run.append(event)
        deltas.append(data)
        last_seq, last_time = seq, time
    if run:
        _flush(run, deltas, out, max_members)
    return out


def _flush(run: list[Event], deltas: list[DeltaData], out: list[StorageRecord], max_members: int | None) -> None:
    if len(run) < MIN_RUN:
        out.extend(run)
        return
    step = max_members or len(run)
    for start in range(0, len(run), step):
        part = run[start : start + step]
        if len(part) < MIN_RUN:
            out.extend(part)
        else:
            out.append(_build_row(part, deltas[start : start + step]))


def _build_row(run: Sequence[Event], deltas: Sequence[DeltaData]) -> ChunkRow:
    first = deltas[0]
    chunk = first.chunk
    times = [event.time for event in run]
    dt = list(map(sub, times[1:], times[:-1]))
    if type(chunk) is ToolCallDelta:
        args = [d.chunk.argumentsDelta for d in deltas]  # type: ignore[union-attr]
        tool = ToolCallRowData(
            turn=first.turn, step=first.step, index=chunk.index, dt=dt, id=chunk.id, name=chunk.name, args=args
        )
        return ToolCallChunks(run[0].seq, times[0], tool)
    texts = [d.chunk.text for d in deltas]  # type: ignore[union-attr]
    row_cls = _TEXT_ROW_FOR[type(chunk)]
    return row_cls(run[0].seq, times[0], TextRowData(first.turn, first.step, chunk.index, dt, texts))

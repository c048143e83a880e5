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
from typing import Annotated, Any, Final, NamedTuple

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
    "REASONING_BLOCK",
    "ROW_TAGS",
    "TEXT_BLOCK",
    "TOOL_BLOCK",
    "Block",
    "ChunkRow",
    "ReasoningChunks",
    "StorageRecord",
    "TextChunks",
    "TextRowData",
    "ToolCallChunks",
    "ToolCallRowData",
    "block_of",
    "check_row",
    "continues_run",
    "decode_storage_record",
    "delta_member",
    "expand_records",
    "expand_row",
    "member_count",
    "pack",
    "record_range",
    "row_block",
    "row_from_value",
]

MIN_RUN: Final = 3
TEXT_BLOCK: Final = 1
REASONING_BLOCK: Final = 2
TOOL_BLOCK: Final = 3
ROW_TAGS: Final = frozenset({"text-chunks", "reasoning-chunks", "tool-call-chunks"})

Number = int | float


class Block(NamedTuple):
    """The block a delta belongs to: its kind (`TEXT_BLOCK`, `REASONING_BLOCK`, `TOOL_BLOCK`) and its key.

    The key is the canonical JSON object of the block's ``turn, step, index`` and, for a
    tool call, ``id`` and ``name`` when present: the bytes a row writes once for all members.
    """

    kind: int
    key: bytes


Members = Annotated[list[str], Meta(min_length=1)]


class TextRowData(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """``data`` of a text or reasoning row: ``{turn, step, index, dt, texts}``.

    Treat the lists as immutable.
    """

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


class _BlockKey(Struct, frozen=True, gc=False):
    turn: Number
    step: Number
    index: Number


class _ToolBlockKey(Struct, frozen=True, gc=False, kw_only=True):
    turn: Number
    step: Number
    index: Number
    id: str
    name: str | UnsetType = UNSET


_KEY_ENCODER: Final = msgspec.json.Encoder()
_BLOCK_KINDS: Final[dict[type[Any], int]] = {
    TextDelta: TEXT_BLOCK,
    ReasoningDelta: REASONING_BLOCK,
    ToolCallDelta: TOOL_BLOCK,
}


def block_of(member: DeltaData) -> Block:
    """The block a delta belongs to: its kind and the canonical JSON of its ``turn, step, index`` (and ``id, name``).

    Keys compare as bytes, so ``1`` and ``1.0``, or ``0.0`` and ``-0.0``, are different
    blocks: a row keeps one spelling for all its members, and expansion must give each
    member back its own.
    """
    chunk = member.chunk
    if type(chunk) is ToolCallDelta:
        key = _ToolBlockKey(turn=member.turn, step=member.step, index=chunk.index, id=chunk.id, name=chunk.name)
        return Block(TOOL_BLOCK, _KEY_ENCODER.encode(key))
    return Block(_BLOCK_KINDS[type(chunk)], _KEY_ENCODER.encode(_BlockKey(member.turn, member.step, chunk.index)))


def row_block(row: ChunkRow) -> Block:
    """The block of a row's members: what `block_of` gives for each of them."""
    data = row.data
    if isinstance(data, ToolCallRowData):
        key = _ToolBlockKey(turn=data.turn, step=data.step, index=data.index, id=data.id, name=data.name)
        return Block(TOOL_BLOCK, _KEY_ENCODER.encode(key))
    kind = TEXT_BLOCK if type(row) is TextChunks else REASONING_BLOCK
    return Block(kind, _KEY_ENCODER.encode(_BlockKey(data.turn, data.step, data.index)))


def delta_member(event: Event) -> DeltaData | None:
    """The delta payload of ``event`` if it may join a row (exact keys, valid seq and time), else ``None``.

    This is the per-event half of the run rule; `continues_run` is the other half.
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


def continues_run(block: Block, last_seq: int, last_time: int, next_block: Block, seq: int, time: int) -> bool:
    """Whether a delta of ``next_block`` at ``seq``/``time`` may follow a run of ``block`` that ends at ``last_seq``.

    The one rule for joining: `pack` applies it to events and the page splice to stored
    records. Same block, the next seq, and a gap ``dt`` that is a safe integer.
    """
    return seq == last_seq + 1 and next_block == block and -MAX_SAFE_INTEGER <= time - last_time <= MAX_SAFE_INTEGER


def pack(events: Iterable[Event], *, max_members: int | None = None) -> list[StorageRecord]:
    """Pack logical events into storage records: verbatim events and chunk rows.

    A run of at least `MIN_RUN` delta events (`delta_member`) becomes a row when each
    continues the one before (`continues_run`): the same delta kind, ``turn``, ``step`` and
    ``index`` spelt the same (and for tool calls the same ``id`` and the same presence and
    value of ``name``), dense seqs and safe-integer time gaps. ``max_members`` caps a row's
    length; the remainder of a run shorter than `MIN_RUN` stays verbatim.
    """
    if max_members is not None and max_members < MIN_RUN:
        raise ValueError(f"max_members must be at least {MIN_RUN}")
    out: list[StorageRecord] = []
    run: list[Event] = []
    deltas: list[DeltaData] = []
    block = Block(0, b"")
    last: DeltaData | None = None
    last_seq = last_time = 0
    for event in events:
        member = delta_member(event)
        if member is None:
            if run:
                _flush(run, deltas, out, max_members)
                run, deltas = [], []
            out.append(event)
            last = None
            continue
        chunk = member.chunk
        if (
            last is not None
            and type(chunk) is type(last.chunk)
            and member.turn is last.turn
            and member.step is last.step
            and chunk.index is last.chunk.index
            and (type(chunk) is not ToolCallDelta or (chunk.id == last.chunk.id and chunk.name == last.chunk.name))  # type: ignore[union-attr]
        ):
            # block_of is pure: the very same field objects (and equal strings) give the same block.
            member_block = block
        else:
            member_block = block_of(member)
        if run and not continues_run(block, last_seq, last_time, member_block, event.seq, event.time):
            _flush(run, deltas, out, max_members)
            run, deltas = [], []
        block, last = member_block, member
        run.append(event)
        deltas.append(member)
        last_seq, last_time = event.seq, event.time
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

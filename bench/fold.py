"""The benchmark's two-consumer fold: what a UI keeps per assistant block (the seed's §6.2).

Two consumers run side by side, as the seed's chat and trajectory Definitions do: ``chat``
folds text and tool-call deltas, ``trajectory`` folds reasoning deltas. Per block
(turn, step, index) each keeps the accumulated text, the delta count, the last delta's
seq, the first token's time and, for text and reasoning, the seq and time at which the
accumulated text first stops being blank.

`fold_events` consumes exact logical events; `fold_records` consumes page records and
folds a whole row at once through `joined_text`, never building its events. Both must
give the same state, which `digest` condenses.
"""

from __future__ import annotations

import hashlib
from itertools import accumulate, islice
from typing import Any

import msgspec

from codec import (
    DeltaData,
    Event,
    PageRecord,
    ReasoningChunks,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallRowData,
)
from history_client import has_visible, joined_text

__all__ = ["Fold", "digest", "fold_events", "fold_records"]


class Block:
    __slots__ = ("count", "first_token_time", "last_seq", "pieces", "visible_seq", "visible_time")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.count = 0
        self.last_seq = -1
        self.first_token_time: int | None = None
        self.visible_seq: int | None = None
        self.visible_time: int | None = None

    def state(self) -> dict[str, Any]:
        return {
            "text": "".join(self.pieces),
            "deltaCount": self.count,
            "lastDeltaSeq": self.last_seq,
            "firstTokenTime": self.first_token_time,
            "firstVisibleSeq": self.visible_seq,
            "firstVisibleTime": self.visible_time,
        }


Fold = dict[str, dict[tuple[int, int, int], Block]]


def _new() -> Fold:
    return {"chat": {}, "trajectory": {}}


def _block(fold: Fold, consumer: str, turn: Any, step: Any, index: Any) -> Block:
    blocks = fold[consumer]
    key = (turn, step, index)
    block = blocks.get(key)
    if block is None:
        block = blocks[key] = Block()
    return block


def fold_events(events: Any) -> Fold:
    """Fold exact logical events, one at a time."""
    fold = _new()
    for event in events:
        _fold_event(fold, event)
    return fold


def _fold_event(fold: Fold, event: Event) -> None:
    data = event.data
    if type(data) is not DeltaData:
        return
    chunk = data.chunk
    kind = type(chunk)
    if kind is ToolCallDelta:
        block = _block(fold, "chat", data.turn, data.step, chunk.index)
        piece = chunk.argumentsDelta  # type: ignore[union-attr]
        visible = False
    elif kind is TextDelta or kind is ReasoningDelta:
        block = _block(fold, "chat" if kind is TextDelta else "trajectory", data.turn, data.step, chunk.index)
        piece = chunk.text  # type: ignore[union-attr]
        visible = True
    else:
        return
    block.pieces.append(piece)
    block.count += 1
    block.last_seq = event.seq
    if piece and block.first_token_time is None:
        block.first_token_time = event.time
    if visible and block.visible_seq is None and has_visible(piece):
        block.visible_seq, block.visible_time = event.seq, event.time


def fold_records(records: list[PageRecord]) -> Fold:
    """Fold page records: ordinary events one at a time, each row whole through `joined_text`."""
    fold = _new()
    for record in records:
        row = record.chunks
        if row is msgspec.UNSET:
            _fold_event(fold, record.event)  # type: ignore[arg-type]
            continue
        data = row.data
        if isinstance(data, ToolCallRowData):
            block = _block(fold, "chat", data.turn, data.step, data.index)
            pieces = data.args
            first = next((i for i, piece in enumerate(pieces) if piece), None)
            block.pieces.append("".join(pieces))
            if first is not None and block.first_token_time is None:
                block.first_token_time = _member_time(row.time0, data.dt, first)
        else:
            consumer = "trajectory" if type(row) is ReasoningChunks else "chat"
            block = _block(fold, consumer, data.turn, data.step, data.index)
            view = joined_text(row)
            block.pieces.append(view.text)
            if view.text and block.first_token_time is None:
                block.first_token_time = view.token_time
            if block.visible_seq is None and view.visible_start is not None:
                block.visible_seq, block.visible_time = view.visible_seq, view.visible_time
            pieces = data.texts
        block.count += len(pieces)
        block.last_seq = row.seq0 + len(pieces) - 1
    return fold


def _member_time(time0: int, dt: list[int], member: int) -> int:
    return next(islice(accumulate(dt, initial=time0), member, None))


def digest(fold: Fold) -> str:
    """SHA-256 of the fold's final state, consumers and blocks in order."""
    state = {
        consumer: [[list(key), block.state()] for key, block in sorted(blocks.items())]
        for consumer, blocks in fold.items()
    }
    return hashlib.sha256(msgspec.json.encode(state)).hexdigest()

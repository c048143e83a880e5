"""Builders for hand-made events in tests; every builder returns canonical form."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from codec import DeltaData, Event, ReasoningDelta, TextDelta, ToolCallDelta


def text(seq: int, time: int, value: str, *, index: int = 1, turn: int = 1, step: int = 1) -> Event:
    return Event("assistant/chunk", seq, time, DeltaData(turn, step, TextDelta(index, value)))


def reasoning(seq: int, time: int, value: str, *, index: int = 0, turn: int = 1, step: int = 1) -> Event:
    return Event("assistant/chunk", seq, time, DeltaData(turn, step, ReasoningDelta(index, value)))


def tool(
    seq: int,
    time: int,
    args: str,
    *,
    call_id: str = "c1",
    name: Any = UNSET,
    index: int = 2,
    turn: int = 1,
    step: int = 1,
) -> Event:
    chunk = ToolCallDelta(index=index, id=call_id, name=name, argumentsDelta=args)
    return Event("assistant/chunk", seq, time, DeltaData(turn, step, chunk))


def chunk_event(seq: int, time: int, chunk: dict[str, Any], *, turn: int = 1, step: int = 1) -> Event:
    return Event("assistant/chunk", seq, time, {"turn": turn, "step": step, "chunk": chunk})


def plain(seq: int, type_: str = "turn/start", data: Any = None, time: int = 1000, **extra: Any) -> Event:
    return Event(type_, seq, time, {"turn": 1} if data is None else data, **extra)

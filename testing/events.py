"""Builders for hand-made events and event logs; every builder returns canonical form."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from codec import DeltaData, Event, ReasoningDelta, TextDelta, ToolCallDelta

__all__ = ["chunk_event", "make_events", "plain", "reasoning", "text", "tool"]


def text(seq: int, time: int, value: str, *, index: int = 1, turn: float = 1, step: int = 1) -> Event:
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


def make_events(count: int, *, start: int = 0) -> list[Event]:
    """A user message every 40 seqs, then text and reasoning delta runs (so pages carry rows)."""
    events = []
    for seq in range(start, start + count):
        phase = seq % 40
        if phase == 0:
            events.append(Event("user/message", seq, 1000 + seq, {"text": f"q{seq}"}, surfaceOp="append"))
        elif phase < 25:
            events.append(Event("assistant/chunk", seq, 1000 + seq, DeltaData(1, 1, TextDelta(0, f" t{seq}"))))
        elif phase < 38:
            events.append(Event("assistant/chunk", seq, 1000 + seq, DeltaData(1, 1, ReasoningDelta(1, f"r{seq}"))))
        else:
            events.append(Event("tool/result", seq, 1000 + seq, {"ok": True, "seq": seq}))
    return events

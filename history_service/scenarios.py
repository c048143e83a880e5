"""Deterministic session scenarios, for the test seeder, the tests and the benchmarks.

Every generator takes a seed and returns logical events in canonical form, seq 0 first.
"""

from __future__ import annotations

import random
from typing import Any, Final

from codec import DeltaData, Event, ReasoningDelta, ReplaceOp, TextDelta, ToolCallDelta

__all__ = ["TIME_ZERO", "compaction", "dsh_synthetic", "dsh_token", "multi_turn"]

TIME_ZERO: Final = 1_700_000_000_000
_WORDS: Final = (
    "the", " session", " history", " is", " packed", " into", " rows", ",", " and", " every", " token",
    " keeps", " its", " boundary", ".", " Résumé", " naïve", " 東京", " \"quoted\"", " back\\slash", "\n",
)  # fmt: skip


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rand = random.Random(seed)
        self.events: list[Event] = []
        self.time = TIME_ZERO

    def add(self, type_: str, data: Any, **extra: Any) -> int:
        step = self.rand.choice((0, 1, 1, 3, 12, 40))
        if self.rand.random() < 0.02:
            step = -self.rand.randint(1, 500)  # the clock stepped back
        self.time += step
        seq = len(self.events)
        self.events.append(Event(type_, seq, self.time, data, **extra))
        return seq

    def chunk(self, turn: int, step: int, chunk: Any) -> int:
        return self.add(
            "assistant/chunk",
            DeltaData(turn, step, chunk) if _is_delta(chunk) else {"turn": turn, "step": step, "chunk": chunk},
        )

    def message(self, role: str, text: str, **extra: Any) -> int:
        data = {"id": f"{role}-{len(self.events)}", "role": role, "content": [{"type": "text", "text": text}]}
        return self.add(f"{role}/message", data, **extra)


def _is_delta(chunk: Any) -> bool:
    return isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta)


def _tokens(rand: random.Random, count: int) -> list[str]:
    return [rand.choice(_WORDS) for _ in range(count)]


def _turn(b: _Builder, turn: int, *, max_run: int) -> None:
    rand = b.rand
    b.add("turn/start", {"turn": turn})
    b.message("user", f"question {turn}: " + "".join(_tokens(rand, 6)), surfaceOp="append")
    steps = rand.randint(1, 2)
    for step in range(1, steps + 1):
        b.add("step/start", {"turn": turn, "step": step})
        sources: list[int] = []
        blocks: list[dict[str, Any]] = []
        index = 0
        for kind in ("reasoning", "text", "tool-call"):
            if kind == "tool-call" and (step == steps or rand.random() < 0.3):
                continue
            sources.append(b.chunk(turn, step, {"type": "block-start", "index": index, "blockType": kind}))
            tokens = _tokens(rand, rand.randint(0, max_run))
            if kind == "tool-call":
                call_id = f"call_{turn}_{step}"
                named_all = rand.random() < 0.5
                fragments = ["", '{"cmd":', ' "ls', " -la", '"}'] + [""] * rand.randint(0, 3)
                for k, fragment in enumerate(fragments):
                    name = "bash" if named_all or k == 0 else None
                    delta = ToolCallDelta(index=index, id=call_id, argumentsDelta=fragment)
                    if name is not None:
                        delta = ToolCallDelta(index=index, id=call_id, name=name, argumentsDelta=fragment)
                    sources.append(b.chunk(turn, step, delta))
                block: dict[str, Any] = {
                    "type": "tool-call",
                    "id": call_id,
                    "name": "bash",
                    "arguments": "".join(fragments),
                }
            else:
                cls = ReasoningDelta if kind == "reasoning" else TextDelta
                sources.extend(b.chunk(turn, step, cls(index, token)) for token in tokens)
                block = {"type": kind, "text": "".join(tokens)}
            sources.append(b.chunk(turn, step, {"type": "block-end", "index": index, "block": block}))
            blocks.append(block)
            index += 1
        b.chunk(
            turn,
            step,
            {"type": "usage", "usage": {"inputTokens": rand.randint(10, 5000), "outputTokens": len(sources)}},
        )
        b.chunk(turn, step, {"type": "finish", "reason": {"kind": "tool-calls" if index == 3 else "stop"}})
        message = {
            "turn": turn,
            "step": step,
            "message": {"id": f"a-{turn}-{step}", "role": "assistant", "content": blocks},
        }
        b.add("assistant/message", message, sourceEventSeqs=tuple(sources), surfaceOp="append")
        if index == 3:
            call = b.add("tool/call", {"turn": turn, "step": step, "callId": f"call_{turn}_{step}", "name": "bash"})
            result = {"turn": turn, "step": step, "message": {"role": "tool", "content": "ok"}, "meta": {"ms": 1.5}}
            b.add("tool/result", result, sourceEventSeqs=(call,), surfaceOp="append")
        b.add("step/end", {"turn": turn, "step": step})
    b.add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def multi_turn(*, seed: int = 0, turns: int = 5, max_run: int = 60) -> list[Event]:
    """``turns`` turns of user message, reasoning, text and tool-call runs, messages and tool results.

    Each ``assistant/message`` lists its chunk seqs in ``sourceEventSeqs``; each
    ``tool/result`` cites its ``tool/call``. Times mostly rise and sometimes step back.
    """
    b = _Builder(seed)
    for turn in range(1, turns + 1):
        _turn(b, turn, max_run=max_run)
    return b.events


def compaction(*, seed: int = 0, turns: int = 4) -> list[Event]:
    """A conversation compacted once (a replacement without ``conversationOp``) and edited once (with it).

    The compaction writes a ``compaction/summary`` and a replacement copy of the first user
    message; the edit is a ``user/message`` whose ``conversationOp`` hides the last turn.
    """
    b = _Builder(seed)
    for turn in range(1, turns + 1):
        _turn(b, turn, max_run=20)
    first_user = next(e.seq for e in b.events if e.type == "user/message")
    b.add("compaction/start", {})
    b.add("compaction/summary", {"summary": "earlier turns, condensed"}, ignorable=True)
    b.message(
        "user",
        "condensed context",
        surfaceOp=ReplaceOp("replace", first_user, first_user),
        sourceEventSeqs=(first_user,),
    )
    b.add("compaction/end", {})
    last_turn_start = max(e.seq for e in b.events if e.type == "turn/start")
    end = len(b.events) - 1
    b.message(
        "user",
        "edited question",
        surfaceOp=ReplaceOp("replace", last_turn_start, end),
        conversationOp=ReplaceOp("replace", last_turn_start, end),
    )
    _turn(b, turns + 1, max_run=20)
    return b.events


DSH_DELTA_EVENTS: Final = 416_176
DSH_DELTA_RUNS: Final = 116
_DIGITS: Final = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(value: int) -> str:
    out = ""
    while True:
        value, digit = divmod(value, 36)
        out = _DIGITS[digit] + out
        if not value:
            return out


def dsh_token(run: int, member: int) -> str:
    """The seed's 2-character member text for member ``member`` of run ``run``."""
    value = (((run + 1) * 0x9E3779B1) % 2**32) ^ (((member + 1) * 0x85EBCA6B) % 2**32)
    return _base36(value).rjust(7, "0")[-2:]


def dsh_synthetic(*, scale: int = 1) -> list[Event]:
    """The seed benchmark's fixture: 416,756 events, 116 reasoning runs, 580 ordinary events.

    ``scale`` divides every run length (rounding up), for smoke runs.
    """
    events: list[Event] = []

    def add(type_: str, data: Any, **extra: Any) -> None:
        seq = len(events)
        events.append(Event(type_, seq, TIME_ZERO + seq, data, **extra))

    add("turn/start", {"turn": 1})
    message = {
        "id": "00000000-0000-4000-8000-000000000001",
        "role": "user",
        "content": [{"type": "text", "text": "synthetic history transport benchmark"}],
        "source": {"kind": "user"},
    }
    add("user/message", message, surfaceOp="append")
    add("step/start", {"turn": 1, "step": 1})
    base, extra = divmod(DSH_DELTA_EVENTS, DSH_DELTA_RUNS)
    for run in range(DSH_DELTA_RUNS):
        members = -(-(base + (1 if run < extra else 0)) // scale)
        seq = len(events)
        events.extend(
            Event(
                "assistant/chunk", seq + i, TIME_ZERO + seq + i, DeltaData(1, 1, ReasoningDelta(run, dsh_token(run, i)))
            )
            for i in range(members)
        )
        for separator in range(4 if run < 3 else 5):
            add("benchmark/separator", {"run": run, "separator": separator}, ignorable=True)
    return events

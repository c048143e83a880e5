"""Benchmark fixtures (DESIGN §12): ``dsh-synthetic`` (shared with the seeder, in `history_service.scenarios`),
``realistic`` and ``long-session``."""

from __future__ import annotations

import random
from typing import Any, Final

import msgspec

from codec import DeltaData, Event, ReasoningDelta, TextDelta, ToolCallDelta
from history_service.scenarios import TIME_ZERO, dsh_synthetic, dsh_token

__all__ = [
    "DSH_DELTA_RUNS",
    "DSH_LOGICAL_EVENTS",
    "DSH_ORDINARY_EVENTS",
    "DSH_PACKED_RECORDS",
    "REALISTIC_COMPLETED_DELTAS",
    "REALISTIC_DELTA_RUNS",
    "REALISTIC_LOGICAL_EVENTS",
    "REALISTIC_ORDINARY_EVENTS",
    "REALISTIC_PACKED_RECORDS",
    "REALISTIC_PROJECTION_RECORDS",
    "REALISTIC_TAIL_DELTAS",
    "TIME_ZERO",
    "completed_step_projection",
    "dsh_synthetic",
    "dsh_token",
    "is_delta",
    "long_session",
    "realistic",
]

DSH_LOGICAL_EVENTS: Final = 416_756
DSH_DELTA_RUNS: Final = 116
DSH_ORDINARY_EVENTS: Final = 580
DSH_PACKED_RECORDS: Final = 696


# --- realistic -------------------------------------------------------------------------
#
# The seed's production sample, rebuilt with its exact cardinalities (DESIGN §12): 416,756
# logical events, 580 ordinary, 116 delta runs over text, reasoning and tool-call blocks;
# steps that ended drop their deltas in the completed-step projection (188,627 of them),
# and the incomplete tail step keeps its 227,549. The distributions below were tuned so
# raw JSON lands near 69.4 MB and packed JSON near 6.36 MB:
#
# * tokens: mostly one to three words, each with a leading space; some punctuation, newlines,
#   quotes and backslashes (JSON escapes), and about 1 in 12 non-ASCII (accents, CJK,
#   emoji); tool-call fragments are JSON argument pieces (keys, quotes, paths, numbers);
# * dt: 8-150 ms between tokens, with rare pauses of up to 2 s;
# * ordinary events: user messages of 200-2,000 characters, assistant messages, tool
#   results of 300-3,000 characters, block and step boundaries, usage records.

REALISTIC_LOGICAL_EVENTS: Final = 416_756
REALISTIC_ORDINARY_EVENTS: Final = 580
REALISTIC_DELTA_RUNS: Final = 116
REALISTIC_COMPLETED_DELTAS: Final = 188_627
REALISTIC_TAIL_DELTAS: Final = 227_549
REALISTIC_PROJECTION_RECORDS: Final = 228_129
REALISTIC_PACKED_RECORDS: Final = 696

_WORDS = (
    "the of and to in is that for it as with was on be by this are from or at an have which not but "
    "history transport session page row chunk event delta stream token cursor follow packed message "
    "function return value error result query index buffer server client request response latency "
    "résumé naïve café über señal déjà"
).split()
_CJK = ["数据", "会话", "历史", "传输", "エージェント", "세션"]
_EMOJI = ["🙂", "🚀", "✅", "📦"]
_PUNCT = [".", ",", ":", ";", "?", "!", ")", "(", "—", "…"]
_ARG_PIECES = [
    '{"',
    "path",
    '":"',
    "src/",
    "codec/",
    "chunk",
    "_rows",
    ".py",
    '","',
    "start",
    '":',
    "120",
    ",",
    "end",
    "4096",
    "}",
    '"query":"',
    "SELECT",
    " seq",
    " FROM",
    " records",
    "\\n",
    '\\"',
    "true",
    "false",
    "]",
]


def _token(rand: random.Random, kind: str) -> str:
    if kind == "tool":
        return rand.choice(_ARG_PIECES)
    roll = rand.random()
    if roll < 0.62:
        words = 1 + (rand.random() < 0.8) + (rand.random() < 0.35)
        return "".join(" " + rand.choice(_WORDS) for _ in range(words))
    if roll < 0.70:
        return rand.choice(_WORDS)
    if roll < 0.78:
        return rand.choice(_PUNCT)
    if roll < 0.82:
        return rand.choice(["\n", "\n\n", "\n- ", "\n```\n", "\t"])
    if roll < 0.86:
        return rand.choice(['"', ' "', "\\", "'s", "`"])
    if roll < 0.92:
        return rand.choice(_CJK)
    if roll < 0.94:
        return rand.choice(_EMOJI)
    return " " + "".join(rand.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(rand.randint(2, 12)))


def _split(rand: random.Random, total: int, parts: int, minimum: int = 3) -> list[int]:
    """``parts`` lengths of at least ``minimum`` summing to ``total``, drawn unevenly."""
    weights = [rand.paretovariate(1.3) for _ in range(parts)]
    spare = total - minimum * parts
    sizes = [minimum + int(spare * w / sum(weights)) for w in weights]
    sizes[max(range(parts), key=sizes.__getitem__)] += total - sum(sizes)
    return sizes


def _text(rand: random.Random, low: int, high: int) -> str:
    return "".join(_token(rand, "text") for _ in range(rand.randint(low, high) // 6)).strip()


def realistic(*, scale: int = 1, seed: int = 7) -> list[Event]:
    """The ``realistic`` fixture (see above). ``scale`` divides every run length, for smoke runs."""
    rand = random.Random(seed)
    events: list[Event] = []
    clock = [TIME_ZERO]

    def add(type_: str, data: Any, *, dt: int | None = None, **extra: Any) -> None:
        clock[0] += rand.randint(5, 60) if dt is None else dt
        events.append(Event(type_, len(events), clock[0], data, **extra))

    # 116 blocks: 112 across 28 completed steps (4 each), and 4 in the tail step.
    completed_steps, per_step, tail_blocks = 28, 4, 4
    completed = _split(rand, -(-REALISTIC_COMPLETED_DELTAS // scale), completed_steps * per_step)
    tail = _split(rand, -(-REALISTIC_TAIL_DELTAS // scale), tail_blocks)
    if scale == 1:
        assert sum(completed) == REALISTIC_COMPLETED_DELTAS and sum(tail) == REALISTIC_TAIL_DELTAS
    kinds = ["reasoning", "text", "tool", "text"]
    turns = 7  # 4 completed steps per turn; the last turn also holds the tail step
    block_sizes = iter(completed)
    ordinary = 0

    def ordinary_event(type_: str, data: Any, **extra: Any) -> None:
        nonlocal ordinary
        ordinary += 1
        add(type_, data, dt=rand.randint(20, 2000), **extra)

    def block(turn: int, step: int, index: int, kind: str, size: int, *, closed: bool) -> None:
        call_id = f"call_{rand.getrandbits(64):016x}"
        start = {"type": "block-start", "index": index, "blockType": {"tool": "tool-call"}.get(kind, kind)}
        if kind == "tool":
            start |= {"id": call_id, "name": rand.choice(["read_file", "run_query", "search_code"])}
        ordinary_event("assistant/chunk", {"turn": turn, "step": step, "chunk": start})
        for _ in range(size):
            if kind == "tool":
                chunk: Any = ToolCallDelta(index=index, id=call_id, argumentsDelta=_token(rand, "tool"))
            elif kind == "reasoning":
                chunk = ReasoningDelta(index, _token(rand, "text"))
            else:
                chunk = TextDelta(index, _token(rand, "text"))
            pause = rand.randint(200, 2000) if rand.random() < 0.002 else rand.randint(8, 150)
            add("assistant/chunk", DeltaData(turn, step, chunk), dt=pause)
        if closed:
            ordinary_event(
                "assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "block-end", "index": index}}
            )
        if kind == "tool" and closed:
            ordinary_event("tool/result", {"callId": call_id, "output": _text(rand, 300, 3000)})

    for turn in range(1, turns + 1):
        ordinary_event("turn/start", {"turn": turn})
        ordinary_event(
            "user/message",
            {"id": f"user-{turn}", "role": "user", "content": [{"type": "text", "text": _text(rand, 200, 2000)}]},
            surfaceOp="append",
        )
        for step in range(1, per_step + 1):
            ordinary_event("step/start", {"turn": turn, "step": step})
            first = len(events)
            for index, kind in enumerate(kinds):
                block(turn, step, index, kind, next(block_sizes), closed=True)
            ordinary_event(
                "assistant/message",
                {"id": f"assistant-{turn}-{step}", "role": "assistant", "content": [{"type": "text", "text": "…"}]},
                surfaceOp="append",
                sourceEventSeqs=(first,),
            )
            ordinary_event(
                "usage/update", {"inputTokens": rand.randint(1000, 90000), "outputTokens": rand.randint(10, 4000)}
            )
            ordinary_event("step/end", {"turn": turn, "step": step})
        if turn < turns:
            ordinary_event("turn/end", {"turn": turn})
    ordinary_event("step/start", {"turn": turns, "step": per_step + 1})
    for index, kind in enumerate(kinds):
        block(turns, per_step + 1, index, kind, tail[index], closed=index < tail_blocks - 1)
    # Pad to the exact ordinary count with small usage records between closed blocks' ends.
    return _pad_ordinary(events, REALISTIC_ORDINARY_EVENTS - ordinary, rand)


def _pad_ordinary(events: list[Event], missing: int, rand: random.Random) -> list[Event]:
    if missing < 0:
        raise AssertionError(f"the realistic structure has {-missing} ordinary events too many")
    slots = [i for i, event in enumerate(events) if event.type == "step/end"]
    out: list[Event] = []
    extra = {slot: 0 for slot in slots}
    for k in range(missing):
        extra[slots[k % len(slots)]] += 1
    for event in events:
        out.append(msgspec.structs.replace(event, seq=len(out)))
        for _ in range(extra.get(event.seq, 0)):
            out.append(Event("usage/heartbeat", len(out), event.time, {"n": rand.randint(0, 9)}, ignorable=True))
    return out


def completed_step_projection(events: list[Event]) -> list[Event]:
    """The lossy projection: the deltas of every step that has a ``step/end`` are dropped."""
    ended = {(e.data["turn"], e.data["step"]) for e in events if e.type == "step/end"}
    return [e for e in events if not (is_delta(e) and (e.data.turn, e.data.step) in ended)]


def is_delta(event: Event) -> bool:
    """Whether an event is a text, reasoning or tool-call delta (a run member)."""
    return type(event.data) is DeltaData and type(event.data.chunk) in (TextDelta, ReasoningDelta, ToolCallDelta)


def long_session(*, scale: int = 1, repeat: int = 10) -> list[Event]:
    """``realistic``'s conversation structure repeated ``repeat`` times, renumbered, for page cost vs length."""
    one = realistic(scale=scale)
    out: list[Event] = []
    for r in range(repeat):
        shift_time = r * (one[-1].time - TIME_ZERO + 1000)
        for event in one:
            out.append(msgspec.structs.replace(event, seq=len(out), time=event.time + shift_time))
    return out

"""Benchmark fixtures: ``dsh-synthetic`` (shared with the seeder, in `history_service.scenarios`),
``realistic`` and ``long-session``."""

from __future__ import annotations

import random
import re
from typing import Any, Final

import msgspec

from codec import DeltaData, Event, ReasoningDelta, TextDelta, ToolCallDelta
from history_service.scenarios import TIME_ZERO, dsh_synthetic, dsh_token
from persistence.message_index import index_entries, select_cuts

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
    "tail_cut",
]

DSH_LOGICAL_EVENTS: Final = 416_756
DSH_DELTA_RUNS: Final = 116
DSH_ORDINARY_EVENTS: Final = 580
DSH_PACKED_RECORDS: Final = 696


# --- realistic -------------------------------------------------------------------------
#
# The seed's production sample, rebuilt with its exact cardinalities: 416,756
# logical events, 580 ordinary, 116 delta runs over text, reasoning and tool-call blocks;
# steps that ended drop their deltas in the completed-step projection (188,627 of them),
# and the incomplete tail step keeps its 227,549. The distributions below were tuned so
# raw JSON lands near 69.4 MB and packed JSON near 6.36 MB:
#
# * tokens: pieces of up to 12 characters (sometimes a word and a short one after it),
#   cut from a pool of assistant sentences that recur through the session, as real
#   sessions repeat names, files and phrasing. The pool holds JSON escapes (quotes,
#   backslashes, newlines), accents, CJK, Hangul and emoji, and code. Tool-call
#   fragments are 2-6 character cuts of JSON arguments with varying paths and numbers;
# * dt: bursty. 55% come from the same or the next packet (0, 1, 16, 17 or 33 ms), most
#   others take 20-400 ms, and 1 in 500 is a pause of 0.2-2 s;
# * ordinary events: user messages of 200-2,000 characters, assistant messages holding
#   their step's text (up to 40,000 characters), tool results of 1,000-8,000 characters,
#   block and step boundaries, usage records.

REALISTIC_LOGICAL_EVENTS: Final = 416_756
REALISTIC_ORDINARY_EVENTS: Final = 580
REALISTIC_DELTA_RUNS: Final = 116
REALISTIC_COMPLETED_DELTAS: Final = 188_627
REALISTIC_TAIL_DELTAS: Final = 227_549
REALISTIC_PROJECTION_RECORDS: Final = 228_129
REALISTIC_PACKED_RECORDS: Final = 696
MESSAGE_TEXT_CAP: Final = 40_000

# Assistant prose and code the blocks draw sentences from. Sessions repeat themselves
# (the same files, names and phrasing come back), which is what compressors exploit.
_SENTENCES = [
    "The history transport packs consecutive assistant deltas into lossless chunk rows.",
    "Each row keeps the seq, the time and the token boundary of every member.",
    "Let me check `codec/chunk_rows.py` first, then the page builder.",
    "The cursor must end exactly where the page says it does; otherwise we stop.",
    "I'll run the tests again:\n\n```sh\nmake test\n```\n",
    "Résumé of the change: the naïve loop was O(n²), the new scan is O(n).",
    "数据会话历史传输 works the same for every script, including エージェント and 세션.",
    "Done ✅ — the follow stream resumed with `Last-Event-ID: 4096` and lost nothing 🚀.",
    'The error said "seq_conflict" with headSeq 1200, so the batch was already stored.',
    "On Windows the path is `C:\\work\\history\\h.db`, which needs escaping in JSON.",
    "    def expand_row(row: ChunkRow) -> list[Event]:\n        return list(map(Event, ...))\n",
    "Next, I will measure the cold tail page from SQLite, JSONL and PostgreSQL.",
    "- packed bytes: 6.3 MB\n- raw bytes: 69 MB\n- ratio: 9.2%\n",
    "Hmm, wait. The projection drops deltas of completed steps, so it is lossy.",
    "So the answer is yes: the page is message-aligned and the cut is stable.",
    "I should double-check the `maxBytes` bisection before committing.",
    "Looking at the stack trace, the decoder raised on a row with an empty dt.",
    "Let's compare the three representations side by side in one run.",
    "That's 416,756 logical events but only 696 records on the wire.",
    "The user wants a summary; I'll keep it short and cite the figures.",
]
_TOOLS: list[tuple[str, Any]] = [
    ("read_file", lambda r, n: f'{{"path":"src/{n}.py","start":{r.randint(1, 900)},"end":{r.randint(900, 4096)}}}'),
    ("run_query", lambda r, n: f'{{"sql":"SELECT seq, data FROM {n} WHERE seq >= {r.randint(0, 9999)}","limit":50}}'),
    ("search_code", lambda r, n: f'{{"pattern":"def {n}\\\\(","glob":"**/*.py","context":{r.randint(0, 9)}}}'),
]
_NAMES = ["chunk_rows", "page_builder", "message_index", "follow", "wire", "records", "jsonl"]
_TOKEN = re.compile(r"\s*[^\s]{1,12}(?: [^\s]{1,4}(?![^\s]))?|\s+")


def _sentence_tokens(rand: random.Random) -> list[str]:
    return _TOKEN.findall(rand.choice(_SENTENCES) + " ")


def _text_tokens(rand: random.Random, count: int) -> list[str]:
    tokens: list[str] = []
    while len(tokens) < count:
        tokens.extend(_sentence_tokens(rand))
    return tokens[:count]


def _tool_tokens(rand: random.Random, count: int) -> list[str]:
    tokens: list[str] = []
    while len(tokens) < count:
        _, arguments = rand.choice(_TOOLS)
        text = arguments(rand, rand.choice(_NAMES))
        cuts = [0]
        while cuts[-1] < len(text):
            cuts.append(cuts[-1] + rand.randint(2, 6))
        tokens.extend(text[a:b] for a, b in zip(cuts, cuts[1:], strict=False))
    return tokens[:count]


def _dt(rand: random.Random) -> int:
    """Tokens arrive in bursts: often in the same or the next packet, sometimes after a pause."""
    roll = rand.random()
    if roll < 0.55:
        return rand.choice((0, 1, 16, 17, 33))
    if roll < 0.998:
        return rand.randint(20, 400)
    return rand.randint(200, 2000)


def _split(rand: random.Random, total: int, parts: int, minimum: int = 3) -> list[int]:
    """``parts`` lengths of at least ``minimum`` summing to ``total``, drawn unevenly."""
    weights = [rand.paretovariate(1.3) for _ in range(parts)]
    spare = total - minimum * parts
    sizes = [minimum + int(spare * w / sum(weights)) for w in weights]
    sizes[max(range(parts), key=sizes.__getitem__)] += total - sum(sizes)
    return sizes


def _text(rand: random.Random, low: int, high: int) -> str:
    return "".join(_text_tokens(rand, rand.randint(low, high) // 6)).strip()


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

    def block(turn: int, step: int, index: int, kind: str, size: int, *, closed: bool) -> str:
        call_id = f"call_{rand.getrandbits(64):016x}"
        start = {"type": "block-start", "index": index, "blockType": {"tool": "tool-call"}.get(kind, kind)}
        if kind == "tool":
            start |= {"id": call_id, "name": rand.choice(_TOOLS)[0]}
        ordinary_event("assistant/chunk", {"turn": turn, "step": step, "chunk": start})
        pieces = _tool_tokens(rand, size) if kind == "tool" else _text_tokens(rand, size)
        for piece in pieces:
            if kind == "tool":
                chunk: Any = ToolCallDelta(index=index, id=call_id, argumentsDelta=piece)
            elif kind == "reasoning":
                chunk = ReasoningDelta(index, piece)
            else:
                chunk = TextDelta(index, piece)
            add("assistant/chunk", DeltaData(turn, step, chunk), dt=_dt(rand))
        if closed:
            ordinary_event(
                "assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "block-end", "index": index}}
            )
        if kind == "tool" and closed:
            ordinary_event("tool/result", {"callId": call_id, "output": _text(rand, 1000, 8000)})
        return "".join(pieces) if kind == "text" else ""

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
            said = "".join(
                block(turn, step, index, kind, next(block_sizes), closed=True) for index, kind in enumerate(kinds)
            )
            content = [{"type": "text", "text": said[:MESSAGE_TEXT_CAP]}]
            ordinary_event(
                "assistant/message",
                {"id": f"assistant-{turn}-{step}", "role": "assistant", "content": content},
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
    """``realistic``'s conversation structure repeated ``repeat`` times, for page cost vs session length.

    Each copy is shifted in seq and time, and so are the seqs its messages cite.
    """
    one = realistic(scale=scale)
    out: list[Event] = []
    for r in range(repeat):
        shift_seq, shift_time = r * len(one), r * (one[-1].time - TIME_ZERO + 1000)
        for event in one:
            sources = event.sourceEventSeqs
            if sources is not msgspec.UNSET:
                sources = tuple(seq + shift_seq for seq in sources)
            out.append(
                msgspec.structs.replace(
                    event, seq=event.seq + shift_seq, time=event.time + shift_time, sourceEventSeqs=sources
                )
            )
    return out


def tail_cut(events: list[Event], max_messages: int) -> int:
    """Where the tail page of ``events`` with ``max_messages`` messages starts, as the store selects it."""
    messages, hidden = index_entries(events)
    return select_cuts(reversed(messages), hidden, to_seq=len(events), max_messages=max_messages)[-1]

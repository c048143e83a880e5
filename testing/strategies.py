"""Hypothesis strategies over event streams."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import strategies as st

from codec import MAX_SAFE_INTEGER, DeltaData, Event, StoredRecord, stored_batch
from codec.event_json import events_from_values

__all__ = ["batches", "json_number_texts", "json_values", "layouts", "sessions", "stored_in"]

SAFE = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)


def _time(draw: st.DrawFn) -> int:
    # Mostly close times; one in five anywhere in the safe range, to hit unsafe gaps.
    return draw(st.integers(min_value=995, max_value=9000)) if draw(st.integers(0, 4)) else draw(SAFE)


@st.composite
def batches(draw: st.DrawFn) -> list[Event]:
    """Up to ~40 dense events: runs of one delta template (sometimes perturbed), boundary and ordinary events."""
    seq = draw(st.integers(min_value=0, max_value=1000))
    values: list[dict[str, Any]] = []
    while len(values) < draw(st.integers(min_value=0, max_value=40)):
        turn, step, index = draw(st.integers(0, 1)), draw(st.integers(0, 1)), draw(st.integers(0, 2))
        shape = draw(st.sampled_from(["text", "reasoning", "tool", "tool", "boundary", "ordinary", "extra"]))
        template: dict[str, Any] = {"type": f"{shape}-delta", "index": index}
        if shape == "tool":
            template = {"type": "tool-call-delta", "index": index, "id": draw(st.sampled_from(["c1", "c2"]))}
            if draw(st.booleans()):
                template["name"] = draw(st.sampled_from(["bash", "read"]))
        length = draw(st.integers(1, 8)) if shape in ("text", "reasoning", "tool") else 1
        for _ in range(length):
            value: dict[str, Any] = {"type": "assistant/chunk", "seq": seq, "time": _time(draw)}
            if draw(st.integers(0, 9)) == 0:
                seq += 1  # an occasional seq gap
            seq += 1
            if shape == "ordinary":
                value["type"] = draw(st.sampled_from(["turn/start", "step/end", "tool/call"]))
                value["data"] = {
                    "turn": turn,
                    "x": draw(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False))),
                }
            elif shape == "boundary":
                kind = draw(st.sampled_from(["block-start", "block-end", "usage", "finish"]))
                value["data"] = {"turn": turn, "step": step, "chunk": {"type": kind, "index": index}}
            elif shape == "extra":
                value["data"] = {
                    "turn": turn,
                    "step": step,
                    "chunk": {"type": "text-delta", "index": index, "text": "e"},
                }
                value["ignorable"] = True
            else:
                chunk = dict(template)
                if shape == "tool":
                    if draw(st.integers(0, 7)) == 0:
                        chunk.pop("name", None) if "name" in chunk else chunk.update(name="bash")
                    chunk["argumentsDelta"] = draw(st.sampled_from(["", "{", '"a"', ":1}", "\\u00e9"]))
                    chunk = {k: chunk[k] for k in ("type", "index", "id", "name", "argumentsDelta") if k in chunk}
                else:
                    chunk["text"] = draw(st.text(max_size=4))
                value["data"] = {"turn": turn, "step": step, "chunk": chunk}
            values.append(value)
    return events_from_values(values)


@st.composite
def sessions(draw: st.DrawFn) -> list[Event]:
    """A session's events from seq 0, dense: `batches` renumbered, with a run's ``turn`` sometimes respelt."""
    events = draw(batches())
    respelt = draw(st.sampled_from([None, 1.0, 0.0, -0.0]))
    out = []
    for seq, event in enumerate(events):
        data = event.data
        if respelt is not None and type(data) is DeltaData and draw(st.integers(0, 3)) == 0:
            data = msgspec.structs.replace(data, turn=respelt)
        out.append(msgspec.structs.replace(event, seq=seq, data=data))
    return out


def layouts(count: int) -> st.SearchStrategy[list[int]]:
    """Append batch sizes that add up to ``count``: where a producer's batches end."""
    return st.lists(st.booleans(), min_size=count, max_size=count).map(_sizes)


def _sizes(ends: list[bool]) -> list[int]:
    sizes, size = [], 0
    for end in ends:
        size += 1
        if end:
            sizes.append(size)
            size = 0
    return [*sizes, size] if size else sizes


def stored_in(events: list[Event], sizes: list[int]) -> list[StoredRecord]:
    """The stored records of ``events`` appended in batches of ``sizes``, never sealed."""
    out: list[StoredRecord] = []
    at = 0
    for size in sizes:
        out += stored_batch(events[at : at + size])
        at += size
    return out


# Keys that JavaScript objects would list first ("0", "17") mixed with ordinary ones.
_KEYS = st.one_of(st.text(max_size=6), st.integers(0, 99).map(str))
_FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**60), 2**60).map(float),  # integral floats: 3.0, -0.0 stays rare otherwise
    st.sampled_from([0.0, -0.0, 1e16, 1e-5, 1e-6, 5e-324, 1.7976931348623157e308]),
)


def json_values(*, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """JSON values as msgspec decodes them: ints of any size, finite floats (integral ones
    too), text, and objects with integer-like keys in any position."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(), _FLOATS, st.text(max_size=8))
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
        max_leaves=max_leaves,
    )


def json_number_texts() -> st.SearchStrategy[str]:
    """JSON number literals in any valid spelling: signs, leading zeros of fractions, exponents
    of either case, and sizes beyond a float's range."""
    return st.from_regex(r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)

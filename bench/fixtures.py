"""Deterministic benchmark fixtures (DESIGN §12). Nothing here is committed as data."""

from __future__ import annotations

from typing import Final

from codec import DeltaData, Event, ReasoningDelta

TIME_ZERO: Final = 1_700_000_000_000
DSH_LOGICAL_EVENTS: Final = 416_756
DSH_DELTA_EVENTS: Final = 416_176
DSH_DELTA_RUNS: Final = 116
DSH_ORDINARY_EVENTS: Final = 580
DSH_PACKED_RECORDS: Final = 696
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

    ``scale`` divides every run length (rounding up), for smoke runs in the test suite.
    """
    events: list[Event] = []

    def add(type_: str, data: object, *, ignorable: bool = False, append: bool = False) -> None:
        seq = len(events)
        event = Event(type_, seq, TIME_ZERO + seq, data)
        if ignorable or append:
            event = Event(
                type_, seq, TIME_ZERO + seq, data, **({"ignorable": True} if ignorable else {"surfaceOp": "append"})
            )
        events.append(event)

    add("turn/start", {"turn": 1})
    message = {
        "id": "00000000-0000-4000-8000-000000000001",
        "role": "user",
        "content": [{"type": "text", "text": "synthetic history transport benchmark"}],
        "source": {"kind": "user"},
    }
    add("user/message", message, append=True)
    add("step/start", {"turn": 1, "step": 1})
    base, extra = divmod(DSH_DELTA_EVENTS, DSH_DELTA_RUNS)
    for run in range(DSH_DELTA_RUNS):
        members = base + (1 if run < extra else 0)
        members = -(-members // scale)
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

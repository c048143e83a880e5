"""The demo that ``serve --demo`` seeds: a coding agent's session, shaped like a real harness log.

A user asks why a test fails. The agent reasons, lists the project with ``bash``, reads a
file with ``read_file``, runs the tests (an error result), hands a search to a subagent
(a child session of its own), fixes the bug and answers. Tokens stream as deltas, tool
results nest their text as the harness writes them, and every step carries its usage.
"""

from __future__ import annotations

import json
from typing import Any, Final

from codec import DeltaData, Event, ReasoningDelta, SessionHeader, TextDelta, ToolCallDelta

__all__ = ["DEMO_CHILD", "DEMO_SESSION", "demo_sessions"]

DEMO_SESSION: Final = "demo"
DEMO_CHILD: Final = "5f0c2a8e-3b1d-4e6a-9c7f-2d8b1e4a6c30"  # harnesses name subagents by UUID
_START: Final = 1_700_000_000_000  # as the other scenarios: sessions a reader makes by hand list first


class _Log:
    """Events of one session, a few milliseconds apart, as a harness records them."""

    def __init__(self, start: int) -> None:
        self.events: list[Event] = []
        self.time = start

    def add(self, type_: str, data: Any, *, gap: int = 40, **extra: Any) -> int:
        self.time += gap
        seq = len(self.events)
        self.events.append(Event(type_, seq, self.time, data, **extra))
        return seq

    def user(self, text: str, *, kind: str = "user") -> int:
        source = {"kind": kind} if kind == "user" else {"kind": "plugin", "plugin": kind, "form": "snapshot"}
        content = [{"type": "text", "text": text}]
        return self.add("user/message", {"content": content, "source": source}, gap=900, surfaceOp="append")

    def step(self, turn: int, step: int, blocks: list[tuple[str, str]], usage: tuple[int, int]) -> list[dict[str, Any]]:
        """One model step: each block streamed as deltas, then the assistant message citing them."""
        self.add("step/start", {"turn": turn, "step": step})
        sources: list[int] = []
        content: list[dict[str, Any]] = []
        for index, (kind, value) in enumerate(blocks):
            if kind == "tool-call":
                name, arguments = value.split(" ", 1)
                call_id = f"call_{turn}_{step}_{index}"
                sources.append(self._chunk(turn, step, {"type": "block-start", "index": index, "blockType": kind}))
                for k, piece in enumerate(_pieces(arguments, 12)):
                    delta = ToolCallDelta(index=index, id=call_id, argumentsDelta=piece)
                    if k == 0:
                        delta = ToolCallDelta(index=index, id=call_id, name=name, argumentsDelta=piece)
                    sources.append(self._chunk(turn, step, delta))
                block: dict[str, Any] = {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}
            else:
                sources.append(self._chunk(turn, step, {"type": "block-start", "index": index, "blockType": kind}))
                cls = ReasoningDelta if kind == "reasoning" else TextDelta
                sources.extend(self._chunk(turn, step, cls(index, token)) for token in _tokens(value))
                block = {"type": kind, "text": value}
            sources.append(self._chunk(turn, step, {"type": "block-end", "index": index, "block": block}))
            content.append(block)
        tokens = {"inputTokens": usage[0], "outputTokens": usage[1]}
        sources.append(self._chunk(turn, step, {"type": "usage", "usage": tokens}))
        calls = [block for block in content if block["type"] == "tool-call"]
        finish = {"type": "finish", "reason": {"kind": "tool-calls" if calls else "stop"}}
        sources.append(self._chunk(turn, step, finish))
        message = {"turn": turn, "step": step, "content": content, "usage": tokens}
        self.add("assistant/message", message, gap=5, sourceEventSeqs=tuple(sources), surfaceOp="append")
        return calls

    def result(self, turn: int, step: int, call: dict[str, Any], text: str, *, error: bool = False) -> None:
        at = self.add("tool/call", {"turn": turn, "step": step, "callId": call["id"], "name": call["name"]})
        nested = {"type": "tool-result", "toolCallId": call["id"], "content": [{"type": "text", "text": text}]}
        message = {
            "role": "user",
            "source": {"kind": "tool", "callId": call["id"]},
            "content": [{**nested, "isError": error}],
        }
        self.add(
            "tool/result",
            {"turn": turn, "step": step, "message": message},
            gap=350,
            sourceEventSeqs=(at,),
            surfaceOp="append",
        )
        self.add("step/end", {"turn": turn, "step": step}, gap=2)

    def _chunk(self, turn: int, step: int, chunk: Any) -> int:
        data = (
            DeltaData(turn, step, chunk)
            if not isinstance(chunk, dict)
            else {"turn": turn, "step": step, "chunk": chunk}
        )
        return self.add("assistant/chunk", data, gap=12)


def _tokens(text: str) -> list[str]:
    """Token-sized pieces, as a model streams them: a word with the space before it."""
    out: list[str] = []
    for word in text.split(" "):
        out.append(word if not out else " " + word)
    return [token for token in out if token]


def _pieces(text: str, size: int) -> list[str]:
    return [text[at : at + size] for at in range(0, len(text), size)] or [""]


def _args(**values: Any) -> str:
    return json.dumps(values)


def demo_sessions() -> list[tuple[SessionHeader, list[Event]]]:
    """The demo session and its subagent child, parent first, each with its events from seq 0."""
    log = _Log(_START)
    log.add("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}})
    log.user("Why does `test_totals` fail in this project? Please fix it.")
    log.user(
        "Current runtime context.\n\nWorkspace: /work/shop (a Python package). File policy: workspace-write.",
        kind="@harness/runtime-context",
    )
    calls = log.step(
        1,
        1,
        [
            (
                "reasoning",
                "The user wants a failing test fixed. I should look at the layout first, then read the test.",
            ),
            ("text", "Let me look at the project first."),
            ("tool-call", "bash " + _args(command="ls -R shop tests")),
        ],
        (1840, 61),
    )
    log.result(1, 1, calls[0], "shop:\n__init__.py\ncart.py\n\ntests:\ntest_cart.py")
    calls = log.step(1, 2, [("tool-call", "read_file " + _args(path="shop/cart.py"))], (1990, 18))
    log.result(
        1,
        2,
        calls[0],
        "def total(items):\n    return sum(item.price for item in items[1:])\n",
    )
    calls = log.step(
        1,
        3,
        [
            ("reasoning", "`items[1:]` skips the first item. Run the tests to confirm before changing anything."),
            ("tool-call", "bash " + _args(command="python -m pytest -q tests/test_cart.py")),
        ],
        (2210, 44),
    )
    log.result(
        1,
        3,
        calls[0],
        "F\nFAILED tests/test_cart.py::test_totals - assert 5 == 15\n1 failed in 0.03s\nexit status 1",
        error=True,
    )
    calls = log.step(
        1,
        4,
        [
            ("text", "Confirmed. I'll ask a helper to check whether anything else relies on that slice."),
            (
                "tool-call",
                "subagent "
                + _args(description="Find callers of total()", prompt="List every caller of shop.cart.total."),
            ),
        ],
        (2480, 52),
    )
    log.result(1, 4, calls[0], f"subagent {DEMO_CHILD} reports: one caller, shop/__init__.py, passes the whole cart.")
    calls = log.step(
        1,
        5,
        [("tool-call", "bash " + _args(command="sed -i 's/items\\[1:\\]/items/' shop/cart.py && python -m pytest -q"))],
        (2650, 39),
    )
    log.result(1, 5, calls[0], "..\n2 passed in 0.02s")
    log.step(
        1,
        6,
        [
            (
                "text",
                "Fixed. `total()` summed `items[1:]`, so it dropped the first item of every cart: the test expected 15 "
                "and got 5. It now sums every item, and both tests pass. Its only caller passes the whole cart, so "
                "nothing else changes.",
            )
        ],
        (2790, 58),
    )
    log.add("step/end", {"turn": 1, "step": 6}, gap=2)
    log.add("turn/end", {"turn": 1, "reason": {"kind": "completed"}})

    child = _Log(_START + 20_000)
    child.add("turn/start", {"turn": 1, "trigger": {"kind": "delegation"}})
    child.user("List every caller of shop.cart.total.")
    calls = child.step(1, 1, [("tool-call", "bash " + _args(command="grep -rn 'total(' shop tests"))], (640, 21))
    child.result(
        1,
        1,
        calls[0],
        "shop/__init__.py:4:    return cart.total(order.items)\ntests/test_cart.py:6:    assert total(ITEMS) == 15",
    )
    child.step(
        1, 2, [("text", "One caller outside the tests: shop/__init__.py passes the whole list of items.")], (720, 19)
    )
    child.add("step/end", {"turn": 1, "step": 2}, gap=2)
    child.add("turn/end", {"turn": 1, "reason": {"kind": "completed"}})

    parent = SessionHeader(id=DEMO_SESSION, createdAt=_START, cwd="/work/shop")
    helper = SessionHeader(
        id=DEMO_CHILD,
        createdAt=_START + 20_000,
        cwd="/work/shop",
        parentSession=DEMO_SESSION,
        origin="subagent",
        delegationDepth=1,
    )
    return [(parent, log.events), (helper, child.events)]

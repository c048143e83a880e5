"""What search finds (docs/protocol.md §14.2): a session's events as passages of text.

A **passage** is one piece of what was said or done, with the seq of its first event, the
seq of its last, its first event's time and its kind:

* ``user``: a ``user/message``'s text;
* ``assistant`` and ``reasoning``: a block's text, its deltas joined (so a word split across
  tokens is one word), or an ``assistant/message`` that no deltas built (no ``sourceEventSeqs``);
* ``tool_call``: a call's name and arguments, from ``tool/call`` or from its streamed deltas;
* ``tool_result``: a ``tool/result``'s text, its parts' text or its JSON;
* ``title``: a ``session/title``.

Other events hold nothing a person searches for, and give no passage.

A block's deltas may come one append at a time. A batch's passages are found alone
(`of_batch`); the first of them *continues* the session's last passage when both are the
same run of deltas and the batch starts right after it, and `continued` joins the two. A
passage holds at most `MAX_PASSAGE` characters, so an append to a long block rewrites a
bounded passage: past it, a new passage starts at a token's start, and only a phrase that
spans the cut is not found.

A passage keeps its text as said, but for NUL, which PostgreSQL's text cannot hold: every
store reads it as U+FFFD, no token either way. A passage with text but no token (``---``)
is kept, and found by nothing: a block's first delta may hold none, and its passage still
starts there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec
from msgspec import Struct

from codec import DeltaData, Event, ReasoningDelta, TextDelta, ToolCallDelta
from persistence.search.terms import MAX_TOKEN, spans

__all__ = ["KINDS", "MAX_PASSAGE", "Passage", "continued", "joined", "of_batch", "of_events"]

# The kinds of passage, in the order the protocol lists them.
KINDS: Final = ("user", "assistant", "reasoning", "tool_call", "tool_result", "title")
# The most characters a passage holds before the next begins.
MAX_PASSAGE: Final = 2000

_DELTA_KINDS: Final = {TextDelta: "assistant", ReasoningDelta: "reasoning", ToolCallDelta: "tool_call"}
_PART_KINDS: Final = {"text": "assistant", "reasoning": "reasoning", "tool-call": "tool_call"}
_json = msgspec.json.Encoder()


class Passage(Struct, frozen=True):
    """A piece of text search finds: its first and last event's seqs, its first event's time, its kind and text.

    ``run`` names the run of deltas it was joined from (``None`` for any other passage): the
    next batch's first passage continues it when it is the same run, right after ``last_seq``.
    """

    seq: int
    last_seq: int
    time: int
    kind: str
    text: str
    run: str | None = None


def of_events(events: Iterable[Sequence[Event]]) -> list[Passage]:
    """The passages of a whole session, from its batches in order (or its events as one batch)."""
    out: list[Passage] = []
    for batch in events:
        last, new = joined(out[-1] if out else None, of_batch(batch))
        if last is not None:
            out[-1] = last
        out.extend(new)
    return out


def joined(last: Passage | None, batch: list[Passage]) -> tuple[Passage | None, list[Passage]]:
    """A batch's passages (`of_batch`) after the session's ``last``: what ``last`` becomes (``None``: it stays),
    and the passages to add after it."""
    if last is None or not batch:
        return None, batch
    found = continued(last, batch[0])
    if found is None:
        return None, batch
    # found[0] rewrites ``last``, even when all of its text moved to the next passage.
    return found[0], found[1:] + batch[1:]


def of_batch(events: Sequence[Event]) -> list[Passage]:
    """A batch's passages alone, in seq order; each a bounded one (`MAX_PASSAGE`)."""
    out: list[Passage] = []
    for event in events:
        for found in _passages(event):
            if not found.text:
                continue
            if "\x00" in found.text:
                found = msgspec.structs.replace(found, text=found.text.replace("\x00", "\ufffd"))
            if out:
                joined = continued(out[-1], found)
                if joined is not None:
                    out[-1:] = joined
                    continue
            out.extend(_bounded(found))
    return out


def continued(last: Passage, first: Passage) -> list[Passage] | None:
    """``last`` with ``first`` joined to it, as one or more bounded passages; ``None`` when ``first`` does not
    continue it (another run, or not right after it)."""
    if last.run is None or first.run != last.run or first.seq != last.last_seq + 1:
        return None
    text = last.text + first.text
    if len(text) <= MAX_PASSAGE:
        return [Passage(last.seq, first.last_seq, last.time, last.kind, text, last.run)]
    cut = _cut(text, len(last.text))
    head = Passage(last.seq, last.last_seq, last.time, last.kind, text[:cut], last.run)
    rest = Passage(first.seq, first.last_seq, first.time, first.kind, text[cut:], first.run)
    return ([head] if head.text else []) + _bounded(rest)


def _bounded(passage: Passage) -> list[Passage]:
    """A passage cut into passages of at most `MAX_PASSAGE` characters, never inside a token that fits one."""
    out = []
    text = passage.text
    while len(text) > MAX_PASSAGE:
        cut = _cut(text, MAX_PASSAGE) or MAX_PASSAGE
        out.append(msgspec.structs.replace(passage, text=text[:cut]))
        text = text[cut:]
    out.append(msgspec.structs.replace(passage, text=text))
    return out


def _cut(text: str, at: int) -> int:
    """Where to cut ``text`` at ``at``: there, or the start of the token that runs across it."""
    low = max(0, at - MAX_TOKEN)
    for start, end in spans(text[low : at + MAX_TOKEN]):
        if low + start < at < low + end:
            return low + start
    return at


def _passages(event: Event) -> list[Passage]:
    """The passages one event gives alone."""
    kind = event.type
    data = event.data
    if kind == "assistant/chunk":
        if type(data) is not DeltaData:
            return []
        chunk = data.chunk
        found = _DELTA_KINDS.get(type(chunk))
        if found is None:
            return []
        if isinstance(chunk, ToolCallDelta):
            text = chunk.argumentsDelta if chunk.name is msgspec.UNSET else f"{chunk.name} {chunk.argumentsDelta}"
            run = f"{data.turn}:{data.step}:c:{chunk.index}:{chunk.id}"
        else:
            text = chunk.text
            run = f"{data.turn}:{data.step}:{found[0]}:{chunk.index}"
        return [Passage(event.seq, event.seq, event.time, found, text, run)]
    if not isinstance(data, dict):
        return []
    if kind == "user/message":
        text = data["text"] if isinstance(data.get("text"), str) else _text(data.get("content"))
        return [_one(event, "user", text)]
    if kind == "session/title":
        return [_one(event, "title", data["title"])] if isinstance(data.get("title"), str) else []
    if kind == "tool/call":
        return [_one(event, "tool_call", _call(data.get("name"), data.get("arguments", data.get("args"))))]
    if kind == "tool/result":
        message = data.get("message")
        body = message if isinstance(message, dict) else data
        text = _text(body.get("content"))
        if not text and (error := data.get("error")) is not None:
            text = error if isinstance(error, str) else _text(error)
        return [_one(event, "tool_result", text)]
    if kind == "assistant/message" and not event.sourceEventSeqs:
        message = data.get("message")
        return _message(event, message if isinstance(message, dict) else data)
    return []


def _one(event: Event, kind: str, text: str) -> Passage:
    return Passage(event.seq, event.seq, event.time, kind, text)


def _message(event: Event, body: dict[str, Any]) -> list[Passage]:
    """A whole assistant message: its text, its reasoning and its calls, a passage of each kind it holds."""
    content = body.get("content", body.get("text"))
    if isinstance(content, str):
        return [_one(event, "assistant", content)]
    if not isinstance(content, list):
        return []
    by_kind: dict[str, list[str]] = {}
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = _PART_KINDS.get(part.get("type"))  # type: ignore[arg-type]
        if kind == "tool_call":
            by_kind.setdefault(kind, []).append(_call(part.get("name"), part.get("arguments", part.get("args"))))
        elif kind is not None and isinstance(part.get("text"), str):
            by_kind.setdefault(kind, []).append(part["text"])
    return [_one(event, kind, "\n".join(by_kind[kind])) for kind in KINDS if kind in by_kind]


def _call(name: Any, arguments: Any) -> str:
    args = arguments if isinstance(arguments, str) else "" if arguments is None else _json.encode(arguments).decode()
    return f"{name} {args}" if isinstance(name, str) else args


def _text(value: Any) -> str:
    """The text in a message's content: a string, its text parts (and tool-result parts' content), else its JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, dict) and part.get("type") == "tool-result":
                texts.append(_text(part.get("content", part.get("output"))))
            elif isinstance(part, str):
                texts.append(part)
            else:
                texts.append(_json.encode(part).decode())
        return "\n".join(text for text in texts if text)
    return _json.encode(value).decode()

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
same run of deltas and the batch starts right after it, and `joined` joins the two. A
passage holds at most `MAX_PASSAGE` characters, so an append to a long block rewrites a
bounded passage: past it, a new passage starts at a token's start, and only a phrase that
spans the cut is not found. Every rule here depends on the events alone, never on how they
were batched: a session's passages are the same however it was appended (`of_events`).

A passage keeps its text as said (its first `MAX_EVENT_TEXT` characters an event), but for
NUL, which PostgreSQL's text cannot hold: every store reads it as U+FFFD, no token either
way. A passage with text but no token (``---``) is kept, and found by nothing: a block's
first delta may hold none, and its passage still starts there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec
from msgspec import Struct

from codec import DeltaData, Event, ReasoningDelta, TextDelta, ToolCallDelta
from persistence.search.terms import MAX_TOKEN, spans

__all__ = ["KINDS", "MAX_EVENT_TEXT", "MAX_PASSAGE", "Passage", "joined", "of_batch", "of_events"]

# The kinds of passage, in the order the protocol lists them.
KINDS: Final = ("user", "assistant", "reasoning", "tool_call", "tool_result", "title")
# The most characters a passage holds before the next begins.
MAX_PASSAGE: Final = 1000
# The most characters of one event that are indexed: a megabyte of tool output costs the writer no more than this.
MAX_EVENT_TEXT: Final = 16384

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
    """A batch's passages (`of_batch`) after the session's ``last``, bounded: what ``last`` becomes (``None``: it
    stays), and the passages to add after it."""
    if last is not None and batch and _continues(last, batch[0]):
        first = batch[0]
        merged = Passage(last.seq, first.last_seq, last.time, last.kind, last.text + first.text, last.run)
        found = _bounded(merged)
        # found[0] rewrites ``last``, even when all of its text moved to the next passage.
        return found[0], found[1:] + [piece for passage in batch[1:] for piece in _bounded(passage)]
    return None, [piece for passage in batch for piece in _bounded(passage)]


def of_batch(events: Sequence[Event]) -> list[Passage]:
    """A batch's passages alone, in seq order, each run of deltas joined whole: `joined` bounds them, after it
    has joined the first to the session's last, so a cut falls where it would had the block come in one batch.

    A delta with no text still extends its run (a harness may stream an empty first piece); any other
    passage without text is none.
    """
    out: list[Passage] = []
    texts: list[str] = []  # the pieces of ``out[-1]`` while it is a run, joined once it ends
    for event in events:
        for found in _passages(event):
            if out and _continues(out[-1], found):
                out[-1] = msgspec.structs.replace(out[-1], last_seq=found.last_seq)
                texts.append(found.text)
                continue
            if texts:
                out[-1] = msgspec.structs.replace(out[-1], text="".join(texts))
                texts = []
            if found.run is not None:
                texts = [found.text]
                out.append(found)
            elif found.text:
                out.append(found)
    if texts:
        out[-1] = msgspec.structs.replace(out[-1], text="".join(texts))
    return out


def _continues(last: Passage, first: Passage) -> bool:
    """Whether ``first`` is the next piece of the run ``last`` holds: the same run, right after it."""
    return last.run is not None and first.run == last.run and first.seq == last.last_seq + 1


def _bounded(passage: Passage) -> list[Passage]:
    """A passage cut into passages of at most `MAX_PASSAGE` characters, never inside a token that fits one.

    Where a cut falls depends on the text alone, so a block's passages are the same however
    its deltas were batched. Each passage keeps the block's first seq and time; one cut off
    the front is finished, and keeps no last seq of its own (``last_seq == seq``), so only the
    last may be continued.
    """
    text = passage.text
    if len(text) <= MAX_PASSAGE:
        return [passage]
    out = []
    start = 0
    while len(text) - start > MAX_PASSAGE:
        cut = _cut(text, start, start + MAX_PASSAGE)
        out.append(msgspec.structs.replace(passage, last_seq=passage.seq, text=text[start:cut]))
        start = cut
    out.append(msgspec.structs.replace(passage, text=text[start:]))
    return out


def _cut(text: str, start: int, at: int) -> int:
    """Where to cut ``text[start:]`` at ``at``: there, or the start of the token that runs across it (a token
    longer than `MAX_TOKEN` is cut inside, as it is compared by its start only)."""
    low = max(start, at - MAX_TOKEN)
    for begin, end in spans(text[low : at + MAX_TOKEN]):
        if low + begin < at < low + end:
            return low + begin
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
        return [Passage(event.seq, event.seq, event.time, found, _indexed(text), run)]
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
    return Passage(event.seq, event.seq, event.time, kind, _indexed(text))


def _indexed(text: str) -> str:
    """The part of an event's text that is indexed: its first `MAX_EVENT_TEXT` characters, a NUL read as U+FFFD
    (PostgreSQL's text holds none, and one character for one keeps a snippet's offsets)."""
    text = text[:MAX_EVENT_TEXT]
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


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

"""What a listing says of a session beyond its header (docs/protocol.md §12.1): its synopsis.

A session's synopsis is a fold over its events, and every store keeps it with the append
that changes it, in the same transaction (or, for JSONL, under the same lock):

* its **title**: the text of its last ``session/title`` event, else of its first user
  message (a ``user/message`` whose ``source.kind`` is ``"user"`` or absent: context a
  harness injects is not the user), in one line of at most `MAX_TITLE` characters;
* its **last event's time** (``None`` while it has none);
* the **tokens** its events report: each ``usage`` chunk's, and the usage of an
  ``assistant/message`` that no deltas built (as the viewer shows them), summed, each sum
  at most `codec.MAX_SAFE_INTEGER`.

`of_batch` is what one batch says, `applied` the rule that folds it into a synopsis; the SQL
stores run the same rule as SQL (`persistence.sql.statements`), held to this one by the
contract suite. `matches` is the listing's filter (a case-insensitive substring of the id or
the title), and `folded` the form both sides of it are compared in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from msgspec import Struct

from codec import MAX_SAFE_INTEGER, Event

__all__ = [
    "EMPTY",
    "MAX_MATCH",
    "MAX_TITLE",
    "BatchSynopsis",
    "Synopsis",
    "applied",
    "folded",
    "matches",
    "of_batch",
    "synopsis_of",
    "title_text",
]

# The longest title, in characters: a longer one is cut, ending in "…".
MAX_TITLE: Final = 200
# The longest filter a listing takes, in characters.
MAX_MATCH: Final = 200
# How much of a message a title is made from: enough for `MAX_TITLE` after whitespace is collapsed.
_TITLE_SOURCE: Final = 4 * MAX_TITLE
_TITLE_TYPE: Final = "session/title"
_USER_TYPE: Final = "user/message"


class Synopsis(Struct, frozen=True):
    """A session's title (``None``: none yet), its last event's time (``None``: no event) and the tokens it reports."""

    title: str | None = None
    last_event_at: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0


EMPTY: Final = Synopsis()


class BatchSynopsis(Struct, frozen=True):
    """What one non-empty batch says: its last ``session/title``, its first user message, its last time, its tokens.

    ``named`` and ``said`` are titles already (`title_text`), or ``None`` when the batch has none.
    """

    named: str | None
    said: str | None
    last_event_at: int
    input_tokens: int = 0
    output_tokens: int = 0


def title_text(text: str) -> str | None:
    """``text`` as a title: one line, whitespace and control characters collapsed to single spaces, cut at
    `MAX_TITLE`; ``None`` when nothing is left."""
    head = text[:_TITLE_SOURCE]
    line = " ".join("".join(ch if ch.isprintable() else " " for ch in head).split())
    if not line:
        return None
    if len(line) > MAX_TITLE or (len(text) > _TITLE_SOURCE and len(line) == MAX_TITLE):
        return line[: MAX_TITLE - 1].rstrip() + "…"
    return line


def _message_text(content: Any) -> str:
    """A message's text parts, and the text nested in its tool-result parts, one a line (as the viewer reads them)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "tool-result":
            texts.append(_message_text(part.get("content")))
    return "\n".join(texts)


def _named(data: Any) -> str | None:
    if isinstance(data, dict) and isinstance(data.get("title"), str):
        return title_text(data["title"])
    return None


def _said(data: Any) -> str | None:
    """The title a user message gives: its text, unless the harness injected it (a ``source.kind`` but ``user``)."""
    if not isinstance(data, dict):
        return None
    source = data.get("source")
    if isinstance(source, dict) and isinstance(source.get("kind"), str) and source["kind"] != "user":
        return None
    text = data["text"] if isinstance(data.get("text"), str) else _message_text(data.get("content"))
    return title_text(text)


def _tokens(usage: Any, field: str) -> int:
    value = usage.get(field) if isinstance(usage, dict) else None
    return value if type(value) is int and 0 < value <= MAX_SAFE_INTEGER else 0


def _usage(event: Event) -> Any:
    """The usage an event reports, counted once a step: a ``usage`` chunk's, or a message's that no deltas built."""
    data = event.data
    if not isinstance(data, dict):
        return None
    if event.type == "assistant/chunk":
        chunk = data.get("chunk")
        return chunk.get("usage") if isinstance(chunk, dict) and chunk.get("type") == "usage" else None
    if event.type == "assistant/message" and not event.sourceEventSeqs:
        message = data.get("message")
        return (message if isinstance(message, dict) else data).get("usage") or data.get("usage")
    return None


def _capped(total: int) -> int:
    return total if total < MAX_SAFE_INTEGER else MAX_SAFE_INTEGER


def of_batch(events: Sequence[Event]) -> BatchSynopsis:
    """What a non-empty batch says of its session's synopsis."""
    named: str | None = None
    said: str | None = None
    input_tokens = output_tokens = 0
    for event in events:
        kind = event.type
        if kind == _TITLE_TYPE:
            named = _named(event.data) or named
        elif kind == _USER_TYPE:
            if said is None:
                said = _said(event.data)
        elif kind == "assistant/chunk" or kind == "assistant/message":
            usage = _usage(event)
            if usage is not None:
                input_tokens = _capped(input_tokens + _tokens(usage, "inputTokens"))
                output_tokens = _capped(output_tokens + _tokens(usage, "outputTokens"))
    return BatchSynopsis(named, said, events[-1].time, input_tokens, output_tokens)


def applied(synopsis: Synopsis, batch: BatchSynopsis) -> Synopsis:
    """The synopsis once ``batch`` is appended: a ``session/title`` names the session, a user message only
    while it has no title."""
    title = batch.named or synopsis.title or batch.said
    return Synopsis(
        title,
        batch.last_event_at,
        _capped(synopsis.input_tokens + batch.input_tokens),
        _capped(synopsis.output_tokens + batch.output_tokens),
    )


def synopsis_of(batches: Iterable[Sequence[Event]], start: Synopsis = EMPTY) -> Synopsis:
    """``start`` with every non-empty batch of ``batches`` applied, in order."""
    for events in batches:
        if events:
            start = applied(start, of_batch(events))
    return start


def folded(text: str) -> str:
    """What the filter compares: the text case-folded (Python's `str.casefold`)."""
    return text.casefold()


def matches(session_id: str, title: str | None, needle: str | None) -> bool:
    """Whether a listing filtered by ``needle`` (``None``: none) keeps the session: a substring of its id or title,
    compared case-folded."""
    if needle is None:
        return True
    wanted = folded(needle)
    return wanted in folded(session_id) or (title is not None and wanted in folded(title))

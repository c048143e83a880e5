"""Rewriting what a log's events say about session ids an import renamed.

A parent names its subagent children in its events: a workflow's ``childId``, the
``senderSessionId`` of a child's report, a call's JSON arguments (``{"subagent_id": ...}``)
and the text of a tool result ("started subagent <id>"). When an import renames a child,
those references must name the new id, or the parent's links to the child are cut; the
same goes for a child that names its parent, and a log that names itself.

The rules, so that nothing but a reference changes:

* A reference is an old id standing whole in a string: the string is the id, or the id
  sits in it with no id character on either side (a ``.`` or ``:`` right after it still
  ends it when no id character follows: "started subagent <id>." names it).
* Only a *distinct* id is rewritten: a template placeholder (``{{sessionId}}``) or an id of
  at least `MIN_DISTINCT` characters, such as a UUID. A short id (``main``, ``a``) is a
  word too, and a word in prose is left alone.
* Strings are rewritten wherever they stand in an event's ``data`` (object keys too) and
  in a header's ``meta``. A run of ``assistant/chunk`` deltas is one text split into
  pieces, so a reference split across deltas is found in the run's joined text: the new
  id goes into the delta where the old one began and the rest of the old one is cut from
  the deltas after it, which keeps every event, seq and time (a delta may end up empty).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from codec import SESSION_ID_CHARS, DeltaData, Event, SessionHeader, ToolCallDelta
from history_service.cli.naming import is_templated

__all__ = ["MIN_DISTINCT", "References"]

MIN_DISTINCT: Final = 16


class References:
    """The references to ``renames``' old ids, found and rewritten to their new ids."""

    def __init__(self, renames: Mapping[str, str]) -> None:
        self._renames = {old: new for old, new in renames.items() if old != new and _distinct(old)}
        self._pattern = _pattern(list(self._renames)) if self._renames else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def events(self, events: Sequence[Event]) -> list[Event]:
        """``events`` with every reference rewritten; unchanged events are the same objects."""
        if self._pattern is None:
            return list(events)
        out = list(events)
        runs: dict[tuple[Any, ...], list[int]] = {}
        for i, event in enumerate(events):
            if type(event.data) is DeltaData:
                runs.setdefault(_run_key(event.data), []).append(i)
            else:
                data = self._value(event.data)
                if data is not event.data:
                    out[i] = msgspec.structs.replace(event, data=data)
        for members in runs.values():
            self._run(out, members)
        return out

    def header(self, header: SessionHeader) -> SessionHeader:
        """``header`` with the references in its ``meta`` rewritten (its id and parent are the plan's)."""
        if self._pattern is None or not isinstance(header.meta, dict):
            return header
        meta = self._value(header.meta)
        return header if meta is header.meta else msgspec.structs.replace(header, meta=meta)

    def text(self, text: str) -> str:
        """``text`` with every reference rewritten."""
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda match: self._renames[match[0]], text)

    def _value(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is list:
            items = [self._value(item) for item in value]
            return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
        if kind is dict:
            pairs = [(self._value(key), self._value(item)) for key, item in value.items()]
            changed = any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True))
            return dict(pairs) if changed else value
        return value

    def _run(self, events: list[Event], members: list[int]) -> None:
        assert self._pattern is not None
        pieces = [_piece(events[i].data.chunk) for i in members]
        joined = "".join(pieces)
        found = [(m.start(), m.end(), self._renames[m[0]]) for m in self._pattern.finditer(joined)]
        if not found:
            return
        start = 0
        for i, piece in zip(members, pieces, strict=True):
            end = start + len(piece)
            rewritten = _cut(joined, start, end, found)
            if rewritten != piece:
                data = events[i].data
                events[i] = msgspec.structs.replace(
                    events[i], data=msgspec.structs.replace(data, chunk=_with_piece(data.chunk, rewritten))
                )
            start = end


def _distinct(session_id: str) -> bool:
    return len(session_id) >= MIN_DISTINCT or is_templated(session_id)


def _pattern(ids: list[str]) -> re.Pattern[str]:
    # Longest first, so that an id is never matched as the start of a longer one.
    alternatives = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
    inside = f"[{SESSION_ID_CHARS}]"
    closing = f"[{SESSION_ID_CHARS.replace('.', '').replace(':', '')}]"
    return re.compile(f"(?<!{inside})(?:{alternatives})(?!{closing}|[.:]{inside})")


def _run_key(data: DeltaData) -> tuple[Any, ...]:
    chunk = data.chunk
    call = chunk.id if type(chunk) is ToolCallDelta else None
    return (data.turn, data.step, type(chunk), chunk.index, call)


def _piece(chunk: Any) -> str:
    return chunk.argumentsDelta if type(chunk) is ToolCallDelta else chunk.text


def _with_piece(chunk: Any, piece: str) -> Any:
    if type(chunk) is ToolCallDelta:
        return msgspec.structs.replace(chunk, argumentsDelta=piece)
    return msgspec.structs.replace(chunk, text=piece)


def _cut(joined: str, start: int, end: int, found: list[tuple[int, int, str]]) -> str:
    """The piece ``joined[start:end]`` with each found reference cut out, and its new id where it began."""
    parts = []
    at = start
    for first, last, new in found:
        if last <= start or first >= end:
            continue
        if first >= start:
            parts.append(joined[at:first])
            parts.append(new)
        at = max(at, min(last, end))
    parts.append(joined[at:end])
    return "".join(parts)

"""The logical event model (docs/protocol.md §2).

An `Event` is one JSON object with exactly the keys ``type, seq, time, data`` and the
optional ``ignorable, sourceEventSeqs, surfaceOp, conversationOp``. Absent optional keys
are `UNSET`, never ``None``, so absence survives a round trip.

``data`` is any JSON value, kept as msgspec decodes it: ints stay ints, floats stay
floats and object key order is kept. One refinement makes packing and expansion cheap:
the ``data`` of an ``assistant/chunk`` text, reasoning or tool-call delta whose keys are
exactly, and in order, ``turn, step, chunk`` (with the chunk's own keys exact and in
order) is held as a `DeltaData` Struct. It encodes to the same JSON bytes as the dict it
replaces; this is the *canonical form* that decoders and `expand_row` produce.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, TypeGuard

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from codec.errors import EventValidationError, SessionIdError
from codec.incarnation import Incarnation, derived_incarnation

__all__ = [
    "CHUNK_EVENT_TYPE",
    "MAX_DEPTH",
    "MAX_SAFE_INTEGER",
    "MAX_SESSION_ID",
    "RESERVED_TYPES",
    "SESSION_ID_CHARS",
    "DeltaChunk",
    "DeltaData",
    "Event",
    "ReasoningDelta",
    "ReplaceOp",
    "SafeInt",
    "Seq",
    "SessionHeader",
    "TextDelta",
    "ToolCallDelta",
    "as_delta_data",
    "canonical_event",
    "check_depth",
    "check_session_id",
    "written",
]

MAX_SAFE_INTEGER: Final = 2**53 - 1
CHUNK_EVENT_TYPE: Final = "assistant/chunk"
RESERVED_TYPES: Final = frozenset({"session", "text-chunks", "reasoning-chunks", "tool-call-chunks"})
MAX_SESSION_ID: Final = 200
MAX_DEPTH: Final = 64
# The characters of a session id, as the body of a regex character class (docs/protocol.md §2.4).
SESSION_ID_CHARS: Final = "A-Za-z0-9._:@~{}-"
_SESSION_ID: Final = re.compile(rf"[{SESSION_ID_CHARS}]{{1,{MAX_SESSION_ID}}}")

SafeInt = Annotated[int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
Seq = Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)]
EventType = Annotated[str, Meta(min_length=1, max_length=128)]
# JSON numbers, as the deepseek-harness packer accepts them for turn, step and index.
Number = int | float


class ReplaceOp(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """``{"op":"replace","start","end"}``: an inclusive seq range, ``start <= end``.

    ``op`` is a plain required field, not a msgspec tag: a tag alone in its union would be
    optional on input, and §2.1 wants exactly the three keys.
    """

    op: Literal["replace"]
    start: Seq
    end: Seq

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")


class TextDelta(Struct, frozen=True, gc=False, tag="text-delta", tag_field="type"):
    """``{"type":"text-delta","index","text"}``."""

    index: Number
    text: str


class ReasoningDelta(Struct, frozen=True, gc=False, tag="reasoning-delta", tag_field="type"):
    """``{"type":"reasoning-delta","index","text"}``."""

    index: Number
    text: str


class ToolCallDelta(Struct, frozen=True, gc=False, kw_only=True, tag="tool-call-delta", tag_field="type"):
    """``{"type":"tool-call-delta","index","id","name"?,"argumentsDelta"}``; the presence of ``name`` is data."""

    index: Number
    id: str
    name: str | UnsetType = UNSET
    argumentsDelta: str


DeltaChunk = TextDelta | ReasoningDelta | ToolCallDelta


class DeltaData(Struct, frozen=True, gc=False):
    """The canonical ``data`` of a delta ``assistant/chunk`` event: ``{"turn","step","chunk"}``."""

    turn: Number
    step: Number
    chunk: DeltaChunk


class Event(Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """One logical session event (docs/protocol.md §2).

    ``seq`` is a non-negative safe integer and ``time`` a safe integer (epoch ms; it may go
    backwards). Decoding validates every rule; constructing in Python validates nothing.
    """

    type: EventType
    seq: Seq
    time: SafeInt
    data: Any
    ignorable: Literal[True] | UnsetType = UNSET
    sourceEventSeqs: tuple[Seq, ...] | UnsetType = UNSET
    surfaceOp: Literal["append"] | ReplaceOp | UnsetType = UNSET
    conversationOp: ReplaceOp | UnsetType = UNSET


class SessionHeader(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="session", tag_field="type"):
    """The first line of a session log: ``{"type":"session","version":0,"id","createdAt",...}``.

    ``origin == "subagent"`` together with ``parentSession`` marks a subagent child. The
    owner principal is not part of the header: stores keep it beside it.
    """

    version: Literal[0] = 0
    id: Annotated[str, Meta(min_length=1, max_length=256)]
    createdAt: SafeInt
    cwd: str | UnsetType = UNSET
    parentSession: Annotated[str, Meta(min_length=1, max_length=256)] | UnsetType = UNSET
    seedLength: Seq | UnsetType = UNSET
    origin: str | UnsetType = UNSET
    delegationDepth: Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER)] | UnsetType = UNSET
    agentPreset: str | UnsetType = UNSET
    meta: dict[str, Any] | UnsetType = UNSET
    # When the session expires (epoch ms, docs/protocol.md §6.5): its creator's to set, at create.
    expiresAt: SafeInt | UnsetType = UNSET
    # Set by the store when the session is closed (docs/protocol.md §6.3), never by its creator.
    closedAt: SafeInt | UnsetType = UNSET
    # Set when the session is created (§2.5); a header stored without one has one derived on decode.
    incarnation: Incarnation | UnsetType = UNSET


_DATA_KEYS: Final = ("turn", "step", "chunk")
_TEXT_KEYS: Final = ("type", "index", "text")
_TOOL_KEYS: Final = ("type", "index", "id", "argumentsDelta")
_NAMED_TOOL_KEYS: Final = ("type", "index", "id", "name", "argumentsDelta")
_TEXT_KINDS: Final[dict[str, type[TextDelta] | type[ReasoningDelta]]] = {
    "text-delta": TextDelta,
    "reasoning-delta": ReasoningDelta,
}


def _is_number(value: object) -> TypeGuard[int | float]:
    return type(value) is int or type(value) is float


def as_delta_data(data: object, *, any_order: bool = False) -> DeltaData | None:
    """Return ``data`` as `DeltaData` when it is exactly a delta chunk payload, else ``None``.

    With ``any_order=False`` the keys must also be in canonical order, so that the Struct
    re-encodes to the same bytes. Packing passes ``any_order=True``: a row stores values,
    and expansion writes canonical order, as the deepseek-harness packer does.
    """
    if type(data) is DeltaData:
        return data
    if type(data) is not dict or len(data) != 3:
        return None
    if any_order:
        if data.keys() != set(_DATA_KEYS):
            return None
    elif tuple(data) != _DATA_KEYS:
        return None
    turn, step, chunk = data["turn"], data["step"], data["chunk"]
    if not (_is_number(turn) and _is_number(step)) or type(chunk) is not dict:
        return None
    kind = chunk.get("type")
    index = chunk.get("index")
    if not _is_number(index):
        return None
    keys = chunk.keys() if any_order else tuple(chunk)
    text_cls = _TEXT_KINDS.get(kind) if type(kind) is str else None
    delta: DeltaChunk
    if text_cls is not None:
        text = chunk.get("text")
        if type(text) is not str or keys != (set(_TEXT_KEYS) if any_order else _TEXT_KEYS):
            return None
        delta = text_cls(index, text)
    elif kind == "tool-call-delta":
        call_id, args = chunk.get("id"), chunk.get("argumentsDelta")
        if type(call_id) is not str or type(args) is not str:
            return None
        if "name" in chunk:
            name = chunk["name"]
            if type(name) is not str or keys != (set(_NAMED_TOOL_KEYS) if any_order else _NAMED_TOOL_KEYS):
                return None
            delta = ToolCallDelta(index=index, id=call_id, name=name, argumentsDelta=args)
        else:
            if keys != (set(_TOOL_KEYS) if any_order else _TOOL_KEYS):
                return None
            delta = ToolCallDelta(index=index, id=call_id, argumentsDelta=args)
    else:
        return None
    return DeltaData(turn, step, delta)


def canonical_event(event: Event) -> Event:
    """Return ``event`` in canonical form: a delta chunk's dict ``data`` becomes `DeltaData`."""
    if event.type != CHUNK_EVENT_TYPE or type(event.data) is not dict:
        return event
    delta = as_delta_data(event.data)
    if delta is None:
        return event
    return Event(
        event.type,
        event.seq,
        event.time,
        delta,
        event.ignorable,
        event.sourceEventSeqs,
        event.surfaceOp,
        event.conversationOp,
    )


def check_session_id(value: str, *, where: str = "session id") -> str:
    """Return ``value`` if it is a valid session id, else raise `SessionIdError`.

    An id is 1 to `MAX_SESSION_ID` characters, each an ASCII letter or digit or one of
    ``. _ : @ ~ { } -``, and is neither ``.`` nor ``..``: it is one path segment of a URL
    and one file name, whatever the store. ``{`` and ``}`` are allowed because recorded
    harness logs use literal placeholders such as ``{{sessionId}}`` as ids.
    """
    if type(value) is not str or _SESSION_ID.fullmatch(value) is None or value in (".", ".."):
        shown = value[:40] if type(value) is str else value
        raise SessionIdError(
            f"{where} {shown!r} is not a session id: use 1-{MAX_SESSION_ID} of A-Z a-z 0-9 . _ : @ ~ {{ }} -, "
            "not '.' or '..'"
        )
    return value


def check_depth(value: Any, *, where: str, limit: int = MAX_DEPTH) -> None:
    """Raise `EventValidationError` if ``value`` nests arrays and objects more than ``limit`` levels deep.

    A scalar has depth 0 and a container one more than its deepest member. The walk is a
    loop, not a recursion, so it cannot itself run out of stack.
    """
    if type(value) is not dict and type(value) is not list:
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > limit:
            raise EventValidationError(f"{where}: nests deeper than {limit} levels of arrays and objects")
        for member in container.values() if type(container) is dict else container:
            if type(member) is dict or type(member) is list:
                stack.append((member, depth + 1))


def written(header: SessionHeader) -> SessionHeader:
    """``header`` as a log writes it: without an incarnation that is only the derived one (readers derive it)."""
    if header.incarnation != derived_incarnation(header.id, header.createdAt):
        return header
    return msgspec.structs.replace(header, incarnation=UNSET)

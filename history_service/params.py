"""The query and header parameters of the HTTP API (docs/protocol.md §4.1, §5.1, §12), each declared once.

A query Struct is the whole query of the routes that name it in `history_service.routes`:
each field is one parameter, its `Meta` holds its range and its description, and its
default is the value when the parameter is absent. A default that a setting gives is named
by ``Meta(extra={"setting": ...})``. `history_service.requests.query` parses a request by
these fields, and `history_service.openapi` documents them; both read them through
`parameters`, so neither holds a range of its own.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, ClassVar, Final, Literal, Union, get_args, get_origin, get_type_hints

import msgspec
from msgspec import Meta, Struct

from codec import INCARNATION_PATTERN, MAX_SAFE_INTEGER
from history_service.control import CONTROL_CLASS
from history_service.durations import MOST_MS
from history_service.encoding import Coding, spoken
from persistence import MAX_MATCH, MAX_SEARCH_LIMIT

__all__ = [
    "ACCEPT_ENCODING",
    "CONTENT_ENCODING",
    "CreateParams",
    "FOLLOW_ACCEPT_ENCODING",
    "IF_NONE_MATCH",
    "DEFAULT_LISTED",
    "DEFAULT_MAX_MESSAGES",
    "EVENT_ID_PATTERN",
    "LAST_EVENT_ID",
    "MATCH_PATTERN",
    "MAX_LISTED",
    "MAX_MESSAGES",
    "MAX_TTL_MS",
    "FollowParams",
    "Header",
    "ListParams",
    "NoParams",
    "PageParams",
    "SearchParams",
    "Param",
    "parameters",
    "parameter",
]

MAX_MESSAGES: Final = 1000
DEFAULT_MAX_MESSAGES: Final = 50
# The most sessions one listing answers, and how many it answers by default.
MAX_LISTED: Final = 1000
# The longest ttlMs: 100 years, as for HISTORY_RETENTION, so the expiresAt it gives stays a safe integer.
MAX_TTL_MS: Final = MOST_MS
DEFAULT_LISTED: Final = 50
# The most hits one search answers, and how many it answers by default.
MAX_SEARCHED: Final = MAX_SEARCH_LIMIT
DEFAULT_SEARCHED: Final = 20
MaxMessages = Annotated[int, Meta(ge=1, le=MAX_MESSAGES, description="Most counted messages (§4.3).")]
# A listing's filter: 1 to `MAX_MATCH` characters, none of them a control character.
MATCH_PATTERN: Final = f"^[^{CONTROL_CLASS}]{{1,{MAX_MATCH}}}$"
# A follow's resume cursor: a seq, or -1 for "from the start".
Resume = Annotated[int, Meta(ge=-1, le=MAX_SAFE_INTEGER)]
IncarnationParam = Annotated[
    str,
    Meta(
        pattern=INCARNATION_PATTERN,
        description="The session's incarnation (§2.5); another one answers as an unknown session.",
    ),
]
# An SSE id (§5.1): ``<incarnation>:<seq>``, or a bare seq from a client that predates incarnations. The
# seq is -1 or at most 15 digits, so every value the pattern admits is in range (below 2^53).
EVENT_ID_PATTERN: Final = r"^(?:[0-9a-z]{1,32}:)?(?:-1|[0-9]{1,15})$"


class NoParams(Struct, frozen=True, forbid_unknown_fields=True):
    """The query of a route that takes no parameter: any is refused."""


class CreateParams(Struct, frozen=True, forbid_unknown_fields=True):
    """A create's query (§6.1)."""

    ttlMs: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_TTL_MS,
                description="The session expires this many ms after it is created (§6.5): the header's `expiresAt`.",
            ),
        ]
        | None
    ) = None


class ListParams(Struct, frozen=True, forbid_unknown_fields=True):
    """A session listing's query (§12.1, §12.3)."""

    limit: Annotated[int, Meta(ge=1, le=MAX_LISTED, description="Most sessions in the answer.")] = DEFAULT_LISTED
    cursor: Annotated[str, Meta(description="A `nextCursor` the service returned, unchanged.")] | None = None
    state: (
        Annotated[Literal["open", "closed"], Meta(description="Only the open, or only the closed, sessions (§6.3).")]
        | None
    ) = None
    q: (
        Annotated[
            str,
            Meta(
                pattern=MATCH_PATTERN,
                description="Only the sessions whose id or title holds this text, in any case (§12.1).",
            ),
        ]
        | None
    ) = None


class SearchParams(Struct, frozen=True, forbid_unknown_fields=True):
    """A search's query (§14.1): ``q`` is required, and a ``q`` with no word in it is a 400 too."""

    q: Annotated[
        str, Meta(description='Words, `"quoted phrases"` and `prefix*` terms, all required, as plain text (§14.1).')
    ]
    limit: Annotated[int, Meta(ge=1, le=MAX_SEARCHED, description="Most hits in the answer.")] = DEFAULT_SEARCHED
    cursor: (
        Annotated[str, Meta(description="A `nextCursor` the service returned for this query, unchanged.")] | None
    ) = None
    state: (
        Annotated[Literal["open", "closed"], Meta(description="Only hits in open, or in closed, sessions (§6.3).")]
        | None
    ) = None
    since: (
        Annotated[
            int,
            Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER, description="Only passages whose time is at or after, ms."),
        ]
        | None
    ) = None
    until: (
        Annotated[
            int, Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER, description="Only passages whose time is before, ms.")
        ]
        | None
    ) = None


class PageParams(Struct, frozen=True, forbid_unknown_fields=True):
    """A page's query (§4.1); `history_service.pages.PageQuery` is what the service reads from it."""

    # Which bad parameter a 400 names when several are: `expand` first, then the fields in order.
    CHECK_ORDER: ClassVar[tuple[str, ...]] = ("expand", "through", "before", "maxMessages", "maxBytes", "incarnation")

    through: (
        Annotated[int, Meta(ge=-1, le=MAX_SAFE_INTEGER, description="Inclusive upper seq, at most the head.")] | None
    ) = None
    before: (
        Annotated[int, Meta(ge=0, le=MAX_SAFE_INTEGER, description="Exclusive upper seq, to page backwards.")] | None
    ) = None
    maxMessages: MaxMessages = DEFAULT_MAX_MESSAGES
    maxBytes: (
        Annotated[
            int, Meta(ge=1, le=MAX_SAFE_INTEGER, description="Byte target.", extra={"setting": "default_max_bytes"})
        ]
        | None
    ) = None
    expand: Annotated[Literal["raw"], Meta(description='Every record as `{"event"}`, unpacked.')] | None = None
    incarnation: IncarnationParam | None = None


class FollowParams(Struct, frozen=True, forbid_unknown_fields=True):
    """A follow's query (§5.1); the ``Last-Event-ID`` header, when sent, wins over ``after``."""

    # A bad ``Last-Event-ID`` is named after a bad `after` and before a bad `maxMessages`.
    CHECK_ORDER: ClassVar[tuple[str, ...]] = ("after", "Last-Event-ID", "maxMessages", "incarnation", "packed")

    after: Annotated[Resume, Meta(description="Resume after this seq, with no snapshot.")] | None = None
    maxMessages: MaxMessages = DEFAULT_MAX_MESSAGES
    incarnation: IncarnationParam | None = None
    packed: (
        Annotated[
            int,
            Meta(ge=0, le=1, description="1: the events as `records` frames, packed as a page packs them (§5.5)."),
        ]
        | None
    ) = None


class Param(Struct, frozen=True, kw_only=True):
    """One parameter as both its readers need it.

    ``kind`` is ``"integer"`` (within ``low`` … ``high``), ``"enum"`` (one of ``values``) or
    ``"string"`` (matching ``pattern``, when it has one). ``default`` is the value when it is
    absent, unless ``setting`` names the `history_service.settings.Settings` field that gives it.
    """

    name: str
    kind: Literal["integer", "enum", "string"]
    description: str = ""
    low: int | None = None
    high: int | None = None
    values: tuple[str, ...] = ()
    pattern: str | None = None
    default: Any = None
    setting: str | None = None
    required: bool = False


class Header(Struct, frozen=True):
    """A request header an operation reads: its name, its type (as a query field's) and what it means."""

    name: str
    type: Any
    description: str


def parameter(
    name: str, annotation: Any, *, default: Any = None, description: str = "", required: bool = False
) -> Param:
    """The `Param` an annotation declares: its range, its values or its setting, unwrapped from `Meta`s and ``None``."""
    metas: list[Meta] = []
    while get_origin(annotation) is Annotated:
        annotation, *extras = get_args(annotation)
        metas = [extra for extra in extras if isinstance(extra, Meta)] + metas
    members = get_args(annotation) if get_origin(annotation) in (Union, type(int | None)) else (annotation,)
    members = tuple(member for member in members if member is not type(None))
    if len(members) == 1 and get_origin(members[0]) is Annotated:
        return parameter(name, members[0], default=default, description=description, required=required)
    low = next((int(meta.ge) for meta in metas if meta.ge is not None), None)
    high = next((int(meta.le) for meta in metas if meta.le is not None), None)
    described = next((meta.description for meta in reversed(metas) if meta.description), "")
    setting = next((meta.extra["setting"] for meta in metas if meta.extra and "setting" in meta.extra), None)
    pattern = next((meta.pattern for meta in metas if meta.pattern is not None), None)
    common: dict[str, Any] = {
        "name": name,
        "description": description or described,
        "default": default,
        "required": required,
    }
    if all(get_origin(member) is Literal for member in members):
        values = tuple(value for member in members for value in get_args(member))
        return Param(kind="enum", values=values, **common)
    if members == (int,):
        return Param(kind="integer", low=low, high=high, setting=setting, **common)
    if members == (str,):
        return Param(kind="string", pattern=pattern, **common)
    raise TypeError(f"parameter {name} has a type no parameter may have: {annotation!r}")


@functools.cache
def parameters(query: type[Struct]) -> tuple[Param, ...]:
    """A query Struct's parameters, in the order its fields are declared."""
    hints = get_type_hints(query, include_extras=True)
    return tuple(
        parameter(
            field.encode_name,
            hints[field.name],
            default=None if field.required else field.default,
            required=field.required,
        )
        for field in msgspec.structs.fields(query)
    )


ACCEPT_ENCODING: Final = Header("Accept-Encoding", str, f"{spoken()} (§4.4).")
FOLLOW_ACCEPT_ENCODING: Final = Header(
    "Accept-Encoding", str, "`gzip` codes the stream, each write flushed (§5.4); no other coding is offered."
)
IF_NONE_MATCH: Final = Header("If-None-Match", str, "An immutable page's ETag, or `*`.")
LAST_EVENT_ID: Final = Header(
    "Last-Event-ID",
    Annotated[str, Meta(pattern=EVENT_ID_PATTERN)],
    "An SSE `id` (§5.1), `<incarnation>:<seq>`: as `after` and `incarnation`, and wins over them.",
)
CONTENT_ENCODING: Final = Header("Content-Encoding", Literal["identity"] | Coding, "The body's content coding (§11.2).")

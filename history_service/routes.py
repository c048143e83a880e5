"""The HTTP surface, declared once: each route's path, methods, endpoint, parameters, body, answers and error codes.

`history_service.app` serves `ROUTES`, `history_service.openapi` documents them, and the
endpoints parse the query Structs named here (`history_service.params`). An error code is
one of `history_service.answers.ERRORS`, whose table gives its status; the router's own
``not_found`` answers an address no route matches.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

import msgspec
from msgspec import Struct
from starlette.requests import Request
from starlette.responses import Response

from codec import Event, FollowSnapshot, LiveRecords, Page, SessionHeader
from history_service import bodies, endpoints
from history_service.assets import to_viewer
from history_service.encoding import CODINGS
from history_service.follow_coding import FOLLOW_CODINGS
from history_service.metrics import scrape
from history_service.params import (
    ACCEPT_ENCODING,
    CONTENT_ENCODING,
    FOLLOW_ACCEPT_ENCODING,
    IF_NONE_MATCH,
    LAST_EVENT_ID,
    CreateParams,
    FollowParams,
    Header,
    ListParams,
    NoParams,
    PageParams,
    SearchParams,
)

__all__ = ["ROUTES", "Operation", "Reply", "Route"]

Endpoint = Callable[[Request], Awaitable[Response]]

# Codes several operations answer, named once each.
FAILURES: Final = ("store_unavailable", "internal")
BODY: Final = ("malformed_json", "bad_encoding", "body_too_large", "unsupported_media_type", "unsupported_encoding")
# An address the caller may not read (§8.2). A path segment that decodes to something with a
# "/" in it names no route: 404 not_found.
READ: Final = ("invalid_session_id", "session_not_found", "not_found", "subagent_child", *FAILURES)
CHILD: Final = (*READ, "not_a_direct_child")
# A page or a follow that the budget of bytes in flight, or the cap of follow streams, refuses (§4.6).
LOADED: Final = ("overloaded",)
# An append names its session by its own id, a child's too (§6.2).
ADDRESSED: Final = ("invalid_session_id", "session_not_found", "not_found", *FAILURES)


class Reply(Struct, frozen=True, kw_only=True):
    """A success answer: its status, what it means, its headers, and its body.

    ``body`` is the Struct of a JSON body; ``content`` describes any other, by media type.
    ``links`` are the OpenAPI links a client can follow from it.
    """

    status: int
    description: str
    body: type[Struct] | None = None
    content: Mapping[str, Any] = msgspec.field(default_factory=dict)
    headers: Mapping[str, Any] = msgspec.field(default_factory=dict)
    links: Mapping[str, Any] = msgspec.field(default_factory=dict)


class Operation(Struct, frozen=True, kw_only=True):
    """One method of a route.

    ``query`` is the Struct the endpoint parses its query into, ``headers`` the request
    headers it reads, ``body`` the Struct of its JSON body. ``errors`` are the codes it can
    answer besides the credentials' (which ``auth`` decides): ``caller`` is a service token
    and a principal, ``service`` the token alone, ``none`` neither.
    """

    method: Literal["GET", "POST", "DELETE"]
    name: str
    summary: str
    tag: str
    endpoint: Endpoint
    replies: tuple[Reply, ...]
    errors: tuple[str, ...] = ()
    query: type[Struct] | None = None
    headers: tuple[Header, ...] = ()
    body: type[Struct] | None = None
    auth: Literal["caller", "service", "none"] = "caller"


class Route(Struct, frozen=True, kw_only=True):
    """A path (Starlette's template, as access lines and metrics name it) and its operations.

    ``when`` says whether every app serves it, or only one that serves its metrics on this port.
    """

    path: str
    operations: tuple[Operation, ...]
    when: Literal["always", "metrics"] = "always"


def _link(target: str, parameters: dict[str, str], description: str, **extra: Any) -> dict[str, Any]:
    return {"operationId": target, "parameters": parameters, "description": description, **extra}


# The stateful paths a client walks: create a session, append its first batch, read and follow it.
_CREATED: Final = {
    "GetSession": _link("getSession", {"id": "$response.body#/id"}, "The new session's header and head."),
    "AppendFirstBatch": _link(
        "appendEvents",
        {"id": "$response.body#/id"},
        "A new session's head is -1, so its first batch starts at seq 0.",
        requestBody={"events": [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}]},
    ),
    "ReadPage": _link("readPage", {"id": "$response.body#/id"}, "The newest page: empty until an append."),
    "Follow": _link("followSession", {"id": "$response.body#/id"}, "Follow it live from its snapshot."),
}
_APPENDED: Final = {
    "ReadImmutablePage": _link(
        "readPage",
        {"id": "$request.path.id", "through": "$response.body#/headSeq"},
        "The page that ends at the new head, which never changes.",
    ),
    "Follow": _link("followSession", {"id": "$request.path.id"}, "Follow it live from its snapshot."),
}
_CLOSED: Final = {
    "ReadLastPage": _link(
        "readPage",
        {"id": "$request.path.id", "through": "$response.body#/headSeq"},
        "The closed session's last page, which never changes.",
    ),
    "Follow": _link("followSession", {"id": "$request.path.id"}, "Its snapshot, then the end frame at once."),
    "Delete": _link("deleteSession", {"id": "$request.path.id"}, "Delete it, and its subagent tree."),
}
_READ_STATE: Final = {
    "ReadImmutablePage": _link(
        "readPage",
        {"id": "$request.path.id", "through": "$response.body#/headSeq"},
        "The page that ends at the head read here.",
    ),
}

_PAGE_HEADERS: Final = {
    "Vary": {"required": True, "schema": {"const": "Accept-Encoding"}},
    endpoints.INCARNATION_HEADER: {
        "required": True,
        "description": "The session's incarnation (§2.5): name it as `incarnation` to pin the next pages.",
        "schema": {"type": "string", "pattern": "^[0-9a-z]{1,32}$"},
    },
    "Cache-Control": {
        "required": True,
        "schema": {"enum": ["no-cache", endpoints.IMMUTABLE, endpoints.REVALIDATED]},
    },
    "ETag": {
        "description": "On an immutable page only: an explicit `through`, or a closed session's newest page.",
        "schema": {"type": "string"},
    },
    "Content-Encoding": {"schema": {"enum": list(CODINGS)}},
}
_PAGE: Final = (
    Reply(status=200, description="The page (§4.2).", headers=_PAGE_HEADERS, body=Page),
    Reply(status=304, description="`If-None-Match` holds the immutable page's ETag.", headers=_PAGE_HEADERS),
)
_FRAMES: Final = (
    ("snapshot", FollowSnapshot, "The first frame of a fresh follow; `id` is `<incarnation>:<cursor>`."),
    ("event", Event, "One logical event, unpacked; `id` is `<incarnation>:<seq>`."),
    (
        "records",
        LiveRecords,
        "A packed stream's events (`packed=1`, §5.5): page records of `[fromSeq, toSeq)`; `id` names `toSeq - 1`.",
    ),
    ("error", bodies.FollowError, "The last frame of a stream that cannot go on."),
    ("end", bodies.FollowEnd, "The last frame of a closed session's stream, after its last event."),
)
# Before OpenAPI 3.2, an event stream's schema describes one event: its fields, its data a JSON string.
_FRAME: Final = {
    "oneOf": [
        {
            "description": description,
            "type": "object",
            "required": ["event", "data"],
            "properties": {
                "event": {"const": name},
                "id": {"type": "string", "pattern": "^[0-9a-z]{1,32}:-?[0-9]+$"},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": {"$ref": f"#/components/schemas/{data.__name__}"},
                },
            },
        }
        for name, data, description in _FRAMES
    ]
}
_FOLLOW: Final = Reply(
    status=200,
    description="An endless event stream (§5): `retry:`, then frames, and `: ping` comments while idle.",
    headers={
        "Cache-Control": {"required": True, "schema": {"const": "no-cache"}},
        "X-Accel-Buffering": {"required": True, "schema": {"const": "no"}},
        "Vary": {"required": True, "schema": {"const": "Accept-Encoding"}},
        "Content-Encoding": {"schema": {"enum": list(FOLLOW_CODINGS)}, "description": "The stream's coding (§5.4)."},
    },
    content={"text/event-stream": {"schema": _FRAME}},
)
_LISTED: Final = Reply(status=200, description="One page of the listing.", body=bodies.SessionList)
_STATE: Final = Reply(status=200, description="The header and the head.", body=bodies.SessionState)
_TEXT: Final = {"schema": {"type": "string"}}


def _page(name: str, summary: str, errors: tuple[str, ...]) -> Operation:
    return Operation(
        method="GET",
        name=name,
        summary=summary,
        tag="reading",
        endpoint=endpoints.page,
        replies=_PAGE,
        errors=("invalid_parameter", "not_acceptable", *errors, *LOADED),
        query=PageParams,
        headers=(ACCEPT_ENCODING, IF_NONE_MATCH),
    )


def _follow(name: str, summary: str, errors: tuple[str, ...]) -> Operation:
    return Operation(
        method="GET",
        name=name,
        summary=summary,
        tag="reading",
        endpoint=endpoints.follow,
        replies=(_FOLLOW,),
        errors=("invalid_parameter", "not_acceptable", *errors, *LOADED),
        query=FollowParams,
        headers=(LAST_EVENT_ID, FOLLOW_ACCEPT_ENCODING),
    )


def _public(path: str, name: str, summary: str, endpoint: Endpoint, *replies: Reply) -> Route:
    operation = Operation(
        method="GET", name=name, summary=summary, tag="operations", endpoint=endpoint, replies=replies, auth="none"
    )
    return Route(path=path, operations=(operation,))


ROUTES: Final = (
    Route(
        path="/v1/search",
        operations=(
            Operation(
                method="GET",
                name="search",
                summary="Search what was said and done in the caller's sessions, children included (§14)",
                tag="sessions",
                endpoint=endpoints.search,
                replies=(
                    Reply(status=200, description="A page of hits, the latest written first.", body=bodies.SearchHits),
                ),
                errors=("invalid_parameter", "search_unsupported", *FAILURES),
                query=SearchParams,
            ),
        ),
    ),
    Route(
        path="/v1/sessions",
        operations=(
            Operation(
                method="GET",
                name="listSessions",
                summary="The caller's top-level sessions, newest first (§12.1)",
                tag="sessions",
                endpoint=endpoints.list_sessions,
                replies=(_LISTED,),
                errors=("invalid_parameter", *FAILURES),
                query=ListParams,
            ),
            Operation(
                method="POST",
                name="createSession",
                summary="Create a session (§6.1)",
                tag="writing",
                endpoint=endpoints.create_session,
                replies=(
                    Reply(
                        status=201,
                        description="Created; the caller owns it.",
                        body=bodies.SessionCreated,
                        links=_CREATED,
                    ),
                ),
                errors=(
                    "invalid_parameter",
                    *BODY,
                    "invalid_header",
                    "invalid_session_id",
                    "invalid_parent",
                    "session_exists",
                    *FAILURES,
                ),
                query=CreateParams,
                headers=(CONTENT_ENCODING,),
                body=SessionHeader,
            ),
        ),
    ),
    Route(
        path="/v1/sessions/{session_id}",
        operations=(
            Operation(
                method="GET",
                name="getSession",
                summary="A session's header and head (§12.2)",
                tag="sessions",
                endpoint=endpoints.get_session,
                replies=(msgspec.structs.replace(_STATE, links=_READ_STATE),),
                errors=("invalid_parameter", *READ),
                query=NoParams,
            ),
            Operation(
                method="DELETE",
                name="deleteSession",
                summary="Delete a session and its subagent tree (§6.4)",
                tag="writing",
                endpoint=endpoints.delete_session,
                replies=(
                    Reply(
                        status=204,
                        description="Deleted, durably: the session and every subagent session below it are gone.",
                    ),
                ),
                errors=("invalid_parameter", *ADDRESSED),
                query=NoParams,
            ),
        ),
    ),
    Route(
        path="/v1/sessions/{session_id}/subagents",
        operations=(
            Operation(
                method="GET",
                name="listSubagents",
                summary="A session's direct subagent children, newest first (§12.3)",
                tag="sessions",
                endpoint=endpoints.list_subagents,
                replies=(_LISTED,),
                errors=("invalid_parameter", *ADDRESSED),
                query=ListParams,
            ),
        ),
    ),
    Route(
        path="/v1/sessions/{session_id}/subagents/{child_id}",
        operations=(
            Operation(
                method="GET",
                name="getChildSession",
                summary="A subagent child's header and head (§12.2)",
                tag="sessions",
                endpoint=endpoints.get_session,
                replies=(_STATE,),
                errors=("invalid_parameter", *CHILD),
                query=NoParams,
            ),
        ),
    ),
    Route(
        path="/v1/sessions/{session_id}/events",
        operations=(
            Operation(
                method="POST",
                name="appendEvents",
                summary="Append a batch (§6.2)",
                tag="writing",
                endpoint=endpoints.append_events,
                replies=(
                    Reply(status=201, description="Stored, durably.", body=bodies.Appended, links=_APPENDED),
                    Reply(
                        status=200, description="An exact re-send: nothing stored (`idempotent`).", body=bodies.Appended
                    ),
                ),
                errors=(
                    *BODY,
                    "batch_too_large",
                    "invalid_batch",
                    "invalid_event",
                    "seq_conflict",
                    "session_closed",
                    *ADDRESSED,
                ),
                headers=(CONTENT_ENCODING,),
                body=bodies.AppendBody,
            ),
        ),
    ),
    Route(
        path="/v1/sessions/{session_id}/close",
        operations=(
            Operation(
                method="POST",
                name="closeSession",
                summary="Close a session (§6.3)",
                tag="writing",
                endpoint=endpoints.close_session,
                replies=(
                    Reply(
                        status=200,
                        description="Closed, durably; the same answer for a session already closed.",
                        body=bodies.Closed,
                        links=_CLOSED,
                    ),
                ),
                errors=("invalid_parameter", *ADDRESSED),
                query=NoParams,
            ),
        ),
    ),
    Route(path="/v1/sessions/{session_id}/page", operations=(_page("readPage", "`session.page` (§4)", READ),)),
    Route(
        path="/v1/sessions/{session_id}/subagents/{child_id}/page",
        operations=(_page("readChildPage", "`session.page` of a subagent child (§4)", CHILD),),
    ),
    Route(
        path="/v1/sessions/{session_id}/follow", operations=(_follow("followSession", "`session.follow` (§5)", READ),)
    ),
    Route(
        path="/v1/sessions/{session_id}/subagents/{child_id}/follow",
        operations=(_follow("followChildSession", "`session.follow` of a subagent child (§5)", CHILD),),
    ),
    _public(
        "/",
        "root",
        "The way in: a redirect to the session viewer",
        to_viewer,
        Reply(
            status=308,
            description="To `/viewer/`, which lists the caller's sessions.",
            headers={"Location": {"required": True, "schema": {"const": "/viewer/"}}},
        ),
    ),
    _public(
        "/healthz",
        "healthz",
        "Liveness",
        endpoints.healthz,
        Reply(status=200, description="Serving.", body=bodies.Health),
    ),
    _public(
        "/readyz",
        "readyz",
        "Readiness: the store answers and follow hears every append (§7.6)",
        endpoints.readyz,
        Reply(status=200, description="Ready.", body=bodies.Readiness),
        Reply(status=503, description="Not ready; `reason` says why.", body=bodies.Readiness),
    ),
    _public(
        "/openapi.json",
        "openapi",
        "This document",
        endpoints.document,
        Reply(status=200, description="OpenAPI 3.1.", content={"application/json": {"schema": {"type": "object"}}}),
    ),
    Route(
        path="/metrics",
        when="metrics",
        operations=(
            Operation(
                method="GET",
                name="metrics",
                summary="Prometheus metrics",
                tag="operations",
                endpoint=scrape,
                replies=(
                    Reply(
                        status=200,
                        description="The Prometheus text format, or OpenMetrics when `Accept` asks for it.",
                        content={"text/plain": _TEXT, "application/openmetrics-text": _TEXT},
                    ),
                ),
                # The service token alone: the metrics name no session.
                auth="service",
            ),
        ),
    ),
)

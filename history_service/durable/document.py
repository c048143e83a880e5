"""The ``/ds`` path items of the OpenAPI document (`history_service.openapi`): the Durable Streams protocol, §13.

`history_service.durable.routes` gives each route the item that documents it.

The protocol's answers are plain text or a stream's own bytes, so these operations declare
statuses and headers, not JSON schemas. A stream's name may hold ``/``; OpenAPI cannot say
so of a path parameter, so the document names it as one segment.
"""

from __future__ import annotations

from typing import Any, Final

from history_service.control import CONTROL_CLASS
from history_service.durable.sessions import RECORDS_TYPE
from history_service.durable.streams import MAX_TTL_S, UNKEPT

__all__ = ["TAG", "child_item", "session_item", "stream_item"]

TAG: Final = {
    "name": "durable-streams",
    "description": "The Durable Streams protocol at /ds (§13): generic streams, and sessions read as streams.",
}
_TEXT: Final = {"text/plain": {"schema": {"type": "string"}}}
_ANY: Final[dict[str, Any]] = {"*/*": {"schema": {}}}
_OFFSET: Final = {"description": "The offset after what was read or written (§13.3).", "schema": {"type": "string"}}


def _header(name: str, description: str, **schema: Any) -> dict[str, Any]:
    described = {"type": "string", **schema}
    return {"name": name, "in": "header", "required": False, "description": description, "schema": described}


_COUNT: Final = "^(0|[1-9][0-9]{0,15})$"
_STREAM_OFFSET: Final = "^[0-9]{1,16}_[0-9]{1,16}$"


def _refusals(auth: str, *statuses: int) -> dict[str, Any]:
    meanings = {
        400: "A malformed header, offset or body.",
        401: "Missing or wrong credentials (§8).",
        403: "A producer's stale epoch; `Producer-Epoch` names the current one.",
        404: "No such stream or session.",
        405: "The method is not served here.",
        406: "An `Accept` that refuses `application/json` and does not ask for page records (§13.7).",
        409: "A create that disagrees, a content type, Stream-Seq or producer seq out of turn, or a closed stream.",
        410: "Deleted, but still read through by its forks; or an offset of an earlier life of a session id.",
        413: "The body is past `HISTORY_MAX_BODY_BYTES`, or a JSON-mode body past `HISTORY_MAX_BODY_VALUES` values.",
        422: "A session id outside §2.4.",
        501: f"A store that keeps no generic streams (JSONL) answers: {UNKEPT}.",
        503: "The store is unavailable.",
    }
    answers: dict[str, Any] = {
        str(status): {"description": meanings[status], "content": _TEXT} for status in statuses if status != 401
    }
    if 401 in statuses and auth == "token":
        # Credentials are the API's (§8): refused with its JSON error body, as on every route.
        answers["401"] = {
            "description": meanings[401],
            "headers": {"WWW-Authenticate": {"required": True, "schema": {"const": "Bearer"}}},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        }
    return dict(sorted(answers.items()))


_READ_PARAMETERS: Final = [
    {
        "name": "offset",
        "in": "query",
        "required": False,
        "description": "Where to read from: `-1` (the start), `now` (the tail), or an offset this server gave.",
        "schema": {"type": "string", "pattern": "^(-1|now|[0-9a-z]{1,32}_[0-9]{1,16})$"},
    },
    {
        "name": "live",
        "in": "query",
        "required": False,
        "description": "`long-poll` waits for data; `sse` streams it (§13.4).",
        "schema": {"enum": ["long-poll", "sse"]},
    },
    {
        "name": "cursor",
        "in": "query",
        "required": False,
        "description": "The `Stream-Cursor` of the previous live answer.",
        "schema": {"type": "string"},
    },
    _header("If-None-Match", "An ETag of an earlier read of the same range."),
]
# OpenAPI ignores an Accept parameter: the types a session reads as are its answer's content.
_SESSION_CONTENT: Final = {
    "application/json": {"schema": {"type": "array", "description": "The events (§2), one a value."}},
    RECORDS_TYPE: {
        "schema": {
            "type": "array",
            "description": f"Page records (§4.2), one a value, when `Accept` asks for `{RECORDS_TYPE}` "
            "(§13.7, our extension): a run of deltas is one chunk row.",
        }
    },
    # Before OpenAPI 3.2, an event stream's schema describes one event: its fields, its data a string.
    "text/event-stream": {
        "schema": {
            "type": "object",
            "description": "An SSE read (`live=sse`): `data` events carry the stream's values, `control` events "
            "its next offset and cursor, as JSON.",
            "required": ["data"],
            "properties": {
                "event": {"enum": ["data", "control"]},
                "data": {"type": "string"},
                "id": {"type": "string"},
            },
        }
    },
}
_READ_HEADERS: Final = {
    "Stream-Next-Offset": _OFFSET,
    "Stream-Up-To-Date": {"description": "`true` when the read reached the tail.", "schema": {"const": "true"}},
    "Stream-Closed": {"description": "`true` when the stream is closed and the read reached its end.", "schema": {}},
    "ETag": {"description": "Names the range read.", "schema": {"type": "string"}},
}


def _read(
    auth: str, path: list[dict[str, Any]], operation_id: str, summary: str, *, gone: bool, session: bool = False
) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "description": "`HEAD` answers the same headers with no body: the tail, and how the stream is configured.",
        "tags": [TAG["name"]],
        "parameters": [*path, *_READ_PARAMETERS],
        "responses": {
            "200": {
                "description": "Data, or an SSE stream of it.",
                "headers": _READ_HEADERS,
                "content": _SESSION_CONTENT if session else _ANY,
            },
            "204": {"description": "A long-poll that timed out, or reached a closed end.", "headers": _READ_HEADERS},
            "304": {"description": "The range is unchanged (If-None-Match)."},
            **_refusals(
                auth,
                400,
                401,
                404,
                *((406,) if session else ()),
                *((410,) if gone else ()),
                *((422,) if session else ()),
                501,
                503,
            ),
        },
    }


def _writes(auth: str, path: list[dict[str, Any]]) -> dict[str, Any]:
    producer = [
        _header("Producer-Id", "An idempotent producer's id; with its epoch and seq.", minLength=1),
        _header("Producer-Epoch", "The producer's epoch, 0 to 2^53-1.", pattern=_COUNT),
        _header("Producer-Seq", "The producer's seq within its epoch, 0 to 2^53-1.", pattern=_COUNT),
    ]
    body = {"required": False, "content": _ANY}
    return {
        "put": {
            "operationId": "dsCreateStream",
            "summary": "Create a stream, or confirm one configured alike; a fork with Stream-Forked-From.",
            "tags": [TAG["name"]],
            "parameters": [
                *path,
                _header(
                    "Stream-TTL",
                    f"Seconds the stream lives past its last read or write, at most {MAX_TTL_S} (100 years).",
                    pattern=_COUNT,
                ),
                _header("Stream-Expires-At", "When the stream expires (RFC 3339).", format="date-time"),
                _header("Stream-Closed", "`true`: create it closed.", enum=["true", "false"]),
                _header(
                    "Stream-Forked-From",
                    "The path of the stream to fork.",
                    pattern=f"^/v1/stream/[^{CONTROL_CLASS}]{{1,1024}}$",
                ),
                _header(
                    "Stream-Fork-Offset",
                    "Where the fork leaves its source; its tail by default.",
                    pattern=_STREAM_OFFSET,
                ),
                _header(
                    "Stream-Fork-Sub-Offset",
                    "Bytes (JSON: values) of the source's next append to keep.",
                    pattern=_COUNT,
                ),
            ],
            "requestBody": body,
            "responses": {
                "201": {"description": "Created.", "headers": {"Stream-Next-Offset": _OFFSET}},
                "200": {"description": "It exists, configured alike.", "headers": {"Stream-Next-Offset": _OFFSET}},
                **_refusals(auth, 400, 401, 404, 409, 413, 501, 503),
            },
        },
        "post": {
            "operationId": "dsAppend",
            "summary": "Append the body; with `Stream-Closed: true`, close the stream (an empty body only closes).",
            "tags": [TAG["name"]],
            "parameters": [
                *path,
                _header("Stream-Seq", "A writer's own sequence: each must sort after the last."),
                *producer,
            ],
            "requestBody": body,
            "responses": {
                "200": {"description": "Appended for a producer.", "headers": {"Stream-Next-Offset": _OFFSET}},
                "204": {"description": "Appended, closed, or a duplicate.", "headers": {"Stream-Next-Offset": _OFFSET}},
                **_refusals(auth, 400, 401, 403, 404, 409, 410, 413, 501, 503),
            },
        },
        "delete": {
            "operationId": "dsDeleteStream",
            "summary": "Delete the stream (kept for its forks, as gone, until the last one goes).",
            "tags": [TAG["name"]],
            "parameters": path,
            "responses": {"204": {"description": "Deleted."}, **_refusals(auth, 400, 401, 404, 410, 501, 503)},
        },
    }


_NAME: Final = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "The stream's name.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": f"^[^{CONTROL_CLASS}]+$"},
}


def _id(key: str, text: str) -> dict[str, Any]:
    schema = {"$ref": "#/components/schemas/SessionId"}
    return {"name": key, "in": "path", "required": True, "description": text, "schema": schema}


def stream_item(auth: str) -> dict[str, Any]:
    """The path item of a generic stream, for an app in this auth mode (``token`` adds 401)."""
    return {
        "get": _read(auth, [_NAME], "dsRead", "Read a stream: catch-up, long-poll or SSE.", gone=True),
        **_writes(auth, [_NAME]),
    }


def session_item(auth: str) -> dict[str, Any]:
    """The path item of a session read as a stream."""
    read = _read(
        auth,
        [_id("id", "A session id.")],
        "dsReadSession",
        "A session's events, as a read-only JSON stream.",
        gone=True,
        session=True,
    )
    return {"get": read}


def child_item(auth: str) -> dict[str, Any]:
    """The path item of a subagent child read as a stream, through its parent."""
    read = _read(
        auth,
        [_id("parent", "The parent's id."), _id("child", "The child's id.")],
        "dsReadChild",
        "A child's events, through its parent.",
        gone=True,
        session=True,
    )
    return {"get": read}

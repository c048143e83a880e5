"""The ``/ds`` paths of the OpenAPI document (`history_service.openapi`): the Durable Streams protocol, §13.

The protocol's answers are plain text or a stream's own bytes, so these operations declare
statuses and headers, not JSON schemas. A stream's name may hold ``/``; OpenAPI cannot say
so of a path parameter, so the document names it as one segment.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["TAG", "durable_paths"]

TAG: Final = {
    "name": "durable-streams",
    "description": "The Durable Streams protocol at /ds (§13): generic streams, and sessions read as streams.",
}
_TEXT: Final = {"text/plain": {"schema": {"type": "string"}}}
_ANY: Final[dict[str, Any]] = {"*/*": {"schema": {}}}
_OFFSET: Final = {"description": "The offset after what was read or written (§13.3).", "schema": {"type": "string"}}


def _header(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description, "schema": {"type": "string"}}


def _refusals(*statuses: int) -> dict[str, Any]:
    meanings = {
        400: "A malformed header, offset or body.",
        401: "Missing or wrong credentials (§8).",
        403: "A producer's stale epoch; `Producer-Epoch` names the current one.",
        404: "No such stream or session.",
        405: "The method is not served here.",
        409: "A create that disagrees, a content type, Stream-Seq or producer seq out of turn, or a closed stream.",
        410: "Deleted, but still read through by its forks; or an offset of an earlier life of a session id.",
        413: "The body is past `HISTORY_MAX_BODY_BYTES`.",
        501: "The store keeps no Durable Streams (JSONL).",
        503: "The store is unavailable.",
    }
    return {str(status): {"description": meanings[status], "content": _TEXT} for status in statuses}


_READ_PARAMETERS: Final = [
    {
        "name": "offset",
        "in": "query",
        "required": False,
        "description": "Where to read from: `-1` (the start), `now` (the tail), or an offset this server gave.",
        "schema": {"type": "string"},
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
_READ_HEADERS: Final = {
    "Stream-Next-Offset": _OFFSET,
    "Stream-Up-To-Date": {"description": "`true` when the read reached the tail.", "schema": {"const": "true"}},
    "Stream-Closed": {"description": "`true` when the stream is closed and the read reached its end.", "schema": {}},
    "ETag": {"description": "Names the range read.", "schema": {"type": "string"}},
}


def _read(operation_id: str, summary: str, *, gone: bool) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "tags": [TAG["name"]],
        "parameters": _READ_PARAMETERS,
        "responses": {
            "200": {"description": "Data, or an SSE stream of it.", "headers": _READ_HEADERS, "content": _ANY},
            "204": {"description": "A long-poll that timed out, or reached a closed end.", "headers": _READ_HEADERS},
            "304": {"description": "The range is unchanged (If-None-Match)."},
            **_refusals(400, 401, 404, *((410,) if gone else ()), 501, 503),
        },
    }


def _head(operation_id: str, summary: str) -> dict[str, Any]:
    headers = {"Stream-Next-Offset": _OFFSET, "Stream-Closed": _READ_HEADERS["Stream-Closed"]}
    return {
        "operationId": operation_id,
        "summary": summary,
        "tags": [TAG["name"]],
        "responses": {"200": {"description": "The tail, and how the stream is configured.", "headers": headers}}
        | {str(status): {"description": text} for status, text in ((401, "Credentials."), (404, "Not found."))},
    }


def _writes() -> dict[str, Any]:
    producer = [
        _header("Producer-Id", "An idempotent producer's id; with its epoch and seq."),
        _header("Producer-Epoch", "The producer's epoch, 0 to 2^53-1."),
        _header("Producer-Seq", "The producer's seq within its epoch, 0 to 2^53-1."),
    ]
    body = {"required": False, "content": _ANY}
    return {
        "put": {
            "operationId": "dsCreateStream",
            "summary": "Create a stream, or confirm one configured alike; a fork with Stream-Forked-From.",
            "tags": [TAG["name"]],
            "parameters": [
                _header("Stream-TTL", "Seconds the stream lives past its last read or write."),
                _header("Stream-Expires-At", "When the stream expires (RFC 3339)."),
                _header("Stream-Closed", "`true`: create it closed."),
                _header("Stream-Forked-From", "The path of the stream to fork."),
                _header("Stream-Fork-Offset", "Where the fork leaves its source; its tail by default."),
                _header("Stream-Fork-Sub-Offset", "Bytes (JSON: values) of the source's next append to keep."),
            ],
            "requestBody": body,
            "responses": {
                "201": {"description": "Created.", "headers": {"Stream-Next-Offset": _OFFSET}},
                "200": {"description": "It exists, configured alike.", "headers": {"Stream-Next-Offset": _OFFSET}},
                **_refusals(400, 401, 404, 409, 413, 501, 503),
            },
        },
        "post": {
            "operationId": "dsAppend",
            "summary": "Append the body; with `Stream-Closed: true`, close the stream (an empty body only closes).",
            "tags": [TAG["name"]],
            "parameters": [_header("Stream-Seq", "A writer's own sequence: each must sort after the last."), *producer],
            "requestBody": body,
            "responses": {
                "200": {"description": "Appended for a producer.", "headers": {"Stream-Next-Offset": _OFFSET}},
                "204": {"description": "Appended, closed, or a duplicate.", "headers": {"Stream-Next-Offset": _OFFSET}},
                **_refusals(400, 401, 403, 404, 409, 410, 413, 501, 503),
            },
        },
        "delete": {
            "operationId": "dsDeleteStream",
            "summary": "Delete the stream (kept for its forks, as gone, until the last one goes).",
            "tags": [TAG["name"]],
            "responses": {"204": {"description": "Deleted."}, **_refusals(401, 404, 410, 501, 503)},
        },
    }


def durable_paths() -> dict[str, Any]:
    """The path items of ``/ds``."""
    name = {"name": "name", "in": "path", "required": True, "description": "The stream's name.", "schema": {}}
    name["schema"] = {"type": "string", "minLength": 1, "maxLength": 1024}
    ids = [
        {"name": key, "in": "path", "required": True, "description": "A session id.", "schema": {"type": "string"}}
        for key in ("session_id", "child_id")
    ]
    session_read = _read("dsReadSession", "A session's logical events, as a read-only JSON stream.", gone=True)
    child_read = _read("dsReadChild", "A subagent child's events, through its parent.", gone=True)
    return {
        "/ds/v1/stream/{name}": {
            "parameters": [name],
            "get": _read("dsRead", "Read a stream: catch-up, long-poll or SSE.", gone=True),
            "head": _head("dsHead", "A stream's tail and configuration."),
            **_writes(),
        },
        "/ds/v1/session/{session_id}": {
            "parameters": ids[:1],
            "get": session_read,
            "head": _head("dsHeadSession", "A session's tail, as a stream."),
        },
        "/ds/v1/session/{session_id}/subagents/{child_id}": {
            "parameters": ids,
            "get": child_read,
            "head": _head("dsHeadChild", "A child's tail, as a stream."),
        },
    }

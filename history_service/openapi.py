"""The OpenAPI 3.1 document of the HTTP API (docs/protocol.md), built from the types that read and write the wire.

Every schema comes from `msgspec.json.schema_components` over the Structs that decode
requests (`codec.SessionHeader`, the codec's events and rows) and describe responses
(`codec.Page`, `codec.FollowSnapshot`, `history_service.bodies`), so the document cannot
drift from them. The few rules the decoders check in code rather than in a type are added
by `_refine`, each named there. Error statuses come from the one error table
(`history_service.errors.ERRORS`); which codes each operation can answer is listed here.

The document follows the app's settings: token auth adds its security schemes, 401 and
``duplicate_header``; ``maxBytes`` defaults to the configured byte target; ``/metrics`` is
listed when the app serves it. ``docs/openapi.json`` is the document of a token-mode
deployment with default settings: ``python -m history_service.openapi --write`` regenerates it.
"""

from __future__ import annotations

import argparse
import copy
import functools
import inspect
import sys
from pathlib import Path
from typing import Any, Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from codec import (
    MAX_SAFE_INTEGER,
    RESERVED_TYPES,
    Event,
    FollowSnapshot,
    Page,
    ReasoningChunks,
    SessionHeader,
    TextChunks,
    ToolCallChunks,
    distribution_version,
)
from history_service import bodies
from history_service.errors import ERRORS
from history_service.settings import Settings

__all__ = ["DOCUMENT_PATH", "document", "encode_document", "main", "route"]

DOCUMENT_PATH: Final = Path(__file__).resolve().parent.parent / "docs" / "openapi.json"
_DEFAULTS: Final = Settings()
_REF: Final = "#/components/schemas/{name}"
_TYPES: Final = (
    SessionHeader,
    bodies.AppendBody,
    Event,
    TextChunks,
    ReasoningChunks,
    ToolCallChunks,
    Page,
    FollowSnapshot,
    bodies.SessionCreated,
    bodies.Appended,
    bodies.SessionList,
    bodies.SessionState,
    bodies.Health,
    bodies.Readiness,
    bodies.ErrorBody,
    bodies.FollowError,
)

# The status of every code: the error table's, and the router's own for a path no route matches.
_STATUS: Final = {answer.code: answer.status for answer in ERRORS.values()} | {"not_found": 404}
_CREDENTIALS: Final = ("duplicate_header", "unauthorized")
_BODY: Final = ("malformed_json", "bad_encoding", "body_too_large", "unsupported_media_type", "unsupported_encoding")
_FAILURES: Final = ("store_unavailable", "internal")
# An address the caller may not read (§8.2). A path segment that decodes to something with a
# "/" in it names no route: 404 not_found.
_READ: Final = ("invalid_session_id", "session_not_found", "not_found", "subagent_child", *_FAILURES)
_CHILD: Final = (*_READ, "not_a_direct_child")
# A page or a follow that the budget of bytes in flight, or the cap of follow streams, refuses (§4.6).
_LOADED: Final = ("overloaded",)
# An append names its session by its own id, a child's too (§6.2).
_ADDRESSED: Final = ("invalid_session_id", "session_not_found", "not_found", *_FAILURES)
_IMMUTABLE: Final = "private, max-age=31536000, immutable"
_REVALIDATED: Final = "private, no-cache"

_DESCRIPTION: Final = """\
Session events in, message-aligned pages and live follow out. Section numbers (§) refer to docs/protocol.md.

Authentication (§8): with `HISTORY_AUTH=token` every `/v1` request carries `Authorization: Bearer <service token>` \
and `X-Principal: <user id>`; either missing or wrong is 401 `unauthorized`, two of either is 400 `duplicate_header`. \
With `HISTORY_AUTH=none` (local use) requests carry neither, every caller is the principal `local`, and the document \
a server serves at `/openapi.json` lists no security scheme, 401 or `duplicate_header`.

Every error is `{"error":{"code","message",...}}`; clients branch on `code` (§11). Integers are JSON integers, \
written without a fraction or an exponent: `42.0` is a float (§1.2)."""


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF.format(name=name)}


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(name)}}


def _integer(low: int, high: int, **extra: Any) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high, **extra}


def _parameter(name: str, where: str, schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "in": where, "description": description, "schema": schema, **extra}


def _path(*names: str) -> list[dict[str, Any]]:
    return [_parameter(name, "path", _ref("SessionId"), f"A session id (`{name}`).", required=True) for name in names]


_TOP: Final = _path("id")
_SUBAGENT: Final = _path("parent", "child")
_MAX_MESSAGES: Final = _parameter(
    "maxMessages", "query", _integer(1, 1000, default=50), "Most counted messages (§4.3)."
)
_LISTING: Final = [
    _parameter("limit", "query", _integer(1, 1000, default=50), "Most sessions in the answer."),
    _parameter("cursor", "query", {"type": "string"}, "A `nextCursor` the service returned, unchanged."),
]
_CONTENT_ENCODING: Final = _parameter(
    "Content-Encoding", "header", {"enum": ["identity", "zstd", "br", "gzip"]}, "The body's content coding (§11.2)."
)


def _schemas() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(_TYPES, ref_template=_REF)
    _refine(components)
    for schema in components.values():
        if "description" in schema:
            # A docstring's first paragraph is its contract; the rest speaks to Python callers.
            summary = inspect.cleandoc(schema["description"]).split("\n\n")[0]
            schema["description"] = summary.replace("``", "`").replace("\n", " ")
    return dict(sorted(components.items()))


def _refine(components: dict[str, Any]) -> None:
    """State the rules the decoders check in code rather than in a type."""
    # §2.4: an id is the id rule's characters, and not "." or "..".
    session_id = msgspec.json.schema(bodies.SessionId)
    components["SessionId"] = {**session_id, "not": {"enum": [".", ".."]}, "description": "A session id (§2.4)."}
    header = components["SessionHeader"]["properties"]
    header["id"] = header["parentSession"] = _ref("SessionId")
    # §2.3: a create body may leave out the header's type (its tag), which every header as written has.
    written = components["SessionHeader"]
    components["NewSessionHeader"] = {
        **written,
        "title": "NewSessionHeader",
        "description": "A create body: a session header (§2.3), whose `type` may be left out.",
        "required": [name for name in written["required"] if name != "type"],
    }
    # §2.1: an event's type is never a row's tag or the header's.
    components["Event"]["properties"]["type"]["not"] = {"enum": sorted(RESERVED_TYPES)}
    # §4.2: a page record has exactly one key.
    components["PageRecord"].update(minProperties=1, maxProperties=1)
    del components["PageRecord"]["required"]
    # The codec leaves these records undecoded, to decode them one at a time.
    components["FollowSnapshot"]["properties"]["records"]["items"] = _ref("PageRecord")
    components["AppendBody"]["properties"]["events"]["items"] = _ref("StorageRecord")
    components["StorageRecord"] = {
        "description": "A logical event (§2) or a chunk row (§3), told apart by `type`.",
        "anyOf": [_ref(name) for name in ("Event", "TextChunks", "ReasoningChunks", "ToolCallChunks")],
    }


def _links(target: str, parameters: dict[str, str], description: str, **extra: Any) -> dict[str, Any]:
    return {"operationId": target, "parameters": parameters, "description": description, **extra}


# The stateful paths a client walks: create a session, append its first batch, read and follow it.
_CREATED: Final = {
    "GetSession": _links("getSession", {"id": "$response.body#/id"}, "The new session's header and head."),
    "AppendFirstBatch": _links(
        "appendEvents",
        {"id": "$response.body#/id"},
        "A new session's head is -1, so its first batch starts at seq 0.",
        requestBody={"events": [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}]},
    ),
    "ReadPage": _links("readPage", {"id": "$response.body#/id"}, "The newest page: empty until an append."),
    "Follow": _links("followSession", {"id": "$response.body#/id"}, "Follow it live from its snapshot."),
}
_APPENDED: Final = {
    "ReadImmutablePage": _links(
        "readPage",
        {"id": "$request.path.id", "through": "$response.body#/headSeq"},
        "The page that ends at the new head, which never changes.",
    ),
    "Follow": _links("followSession", {"id": "$request.path.id"}, "Follow it live from its snapshot."),
}
_READ_STATE: Final = {
    "ReadImmutablePage": _links(
        "readPage",
        {"id": "$request.path.id", "through": "$response.body#/headSeq"},
        "The page that ends at the head read here.",
    ),
}


class _Builder:
    """The operations, for an app whose auth mode and page byte target are these."""

    def __init__(self, *, auth: str, default_max_bytes: int) -> None:
        self.auth = auth
        self.default_max_bytes = default_max_bytes

    def errors(self, codes: tuple[str, ...]) -> dict[str, Any]:
        """One response per status: the error body, its code one of those this operation answers with it."""
        if self.auth == "token":
            codes = (*_CREDENTIALS, *codes)
        by_status: dict[int, list[str]] = {}
        for code in codes:
            by_status.setdefault(_STATUS[code], []).append(code)
        responses = {}
        for status, listed in sorted(by_status.items()):
            these = {"properties": {"error": {"properties": {"code": {"enum": listed}}}}}
            response: dict[str, Any] = {
                "description": ", ".join(f"`{code}`" for code in listed) + " (§11).",
                "content": {"application/json": {"schema": {"allOf": [_ref("ErrorBody"), these]}}},
            }
            if status == 401:
                response["headers"] = {"WWW-Authenticate": {"required": True, "schema": {"const": "Bearer"}}}
            if "overloaded" in listed:
                retry = "Seconds to wait, with `overloaded`."
                response["headers"] = {"Retry-After": {"description": retry, "schema": {"type": "integer"}}}
            responses[str(status)] = response
        return responses

    def operation(
        self, operation_id: str, summary: str, tag: str, responses: dict[str, Any], codes: tuple[str, ...], **rest: Any
    ) -> dict[str, Any]:
        answers = {**responses, **self.errors(codes)}
        return {"operationId": operation_id, "summary": summary, "tags": [tag], **rest, "responses": answers}

    def page(
        self, operation_id: str, summary: str, path: list[dict[str, Any]], codes: tuple[str, ...]
    ) -> dict[str, Any]:
        headers = {
            "Vary": {"required": True, "schema": {"const": "Accept-Encoding"}},
            "Cache-Control": {"required": True, "schema": {"enum": ["no-cache", _IMMUTABLE, _REVALIDATED]}},
            "ETag": {"description": "On an immutable page (explicit `through`) only.", "schema": {"type": "string"}},
            "Content-Encoding": {"schema": {"enum": ["zstd", "br", "gzip"]}},
        }
        seq = _integer(0, MAX_SAFE_INTEGER)
        parameters = [
            *path,
            _parameter("through", "query", _integer(-1, MAX_SAFE_INTEGER), "Inclusive upper seq, at most the head."),
            _parameter("before", "query", seq, "Exclusive upper seq, to page backwards."),
            _MAX_MESSAGES,
            _parameter(
                "maxBytes", "query", _integer(1, MAX_SAFE_INTEGER, default=self.default_max_bytes), "Byte target."
            ),
            _parameter("expand", "query", {"enum": ["raw"]}, 'Every record as `{"event"}`, unpacked.'),
            _parameter("Accept-Encoding", "header", {"type": "string"}, "zstd, br or gzip (§4.4)."),
            _parameter("If-None-Match", "header", {"type": "string"}, "An immutable page's ETag, or `*`."),
        ]
        responses = {
            "200": {"description": "The page (§4.2).", "headers": headers, "content": _json("Page")},
            "304": {"description": "`If-None-Match` holds the immutable page's ETag.", "headers": headers},
        }
        codes = ("invalid_parameter", "not_acceptable", *codes)
        return self.operation(operation_id, summary, "reading", responses, codes, parameters=parameters)

    def follow(
        self, operation_id: str, summary: str, path: list[dict[str, Any]], codes: tuple[str, ...]
    ) -> dict[str, Any]:
        cursor = _integer(-1, MAX_SAFE_INTEGER)
        parameters = [
            *path,
            _parameter("after", "query", cursor, "Resume after this seq, with no snapshot."),
            _MAX_MESSAGES,
            _parameter("Last-Event-ID", "header", cursor, "As `after`, and wins over it."),
        ]
        frames = [
            ("snapshot", "FollowSnapshot", "The first frame of a fresh follow; `id` is the cursor."),
            ("event", "Event", "One logical event, never packed; `id` is its seq."),
            ("error", "FollowError", "The last frame of a stream that cannot go on."),
        ]
        # Before OpenAPI 3.2, an event stream's schema describes one event: its fields, its data a JSON string.
        frame = {
            "oneOf": [
                {
                    "description": description,
                    "type": "object",
                    "required": ["event", "data"],
                    "properties": {
                        "event": {"const": name},
                        "id": {"type": "string", "pattern": "^-?[0-9]+$"},
                        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": _ref(data)},
                    },
                }
                for name, data, description in frames
            ]
        }
        headers = {
            "Cache-Control": {"required": True, "schema": {"const": "no-cache"}},
            "X-Accel-Buffering": {"required": True, "schema": {"const": "no"}},
        }
        stream = {
            "description": "An endless event stream (§5): `retry:`, then frames, and `: ping` comments while idle.",
            "headers": headers,
            "content": {"text/event-stream": {"schema": frame}},
        }
        codes = ("invalid_parameter", *codes)
        return self.operation(operation_id, summary, "reading", {"200": stream}, codes, parameters=parameters)

    def sessions(self) -> dict[str, Any]:
        listing = self.operation(
            "listSessions",
            "The caller's top-level sessions, newest first (§12.1)",
            "sessions",
            {"200": {"description": "One page of the listing.", "content": _json("SessionList")}},
            ("invalid_parameter", *_FAILURES),
            parameters=_LISTING,
        )
        create = self.operation(
            "createSession",
            "Create a session (§6.1)",
            "writing",
            {
                "201": {
                    "description": "Created; the caller owns it.",
                    "content": _json("SessionCreated"),
                    "links": _CREATED,
                }
            },
            (*_BODY, "invalid_header", "invalid_session_id", "invalid_parent", "session_exists", *_FAILURES),
            parameters=[_CONTENT_ENCODING],
            requestBody={"required": True, "content": _json("NewSessionHeader")},
        )
        return {"get": listing, "post": create}

    def subagents(self) -> dict[str, Any]:
        return self.operation(
            "listSubagents",
            "A session's direct subagent children, newest first (§12.3)",
            "sessions",
            {"200": {"description": "One page of the listing.", "content": _json("SessionList")}},
            ("invalid_parameter", *_ADDRESSED),
            parameters=[*_TOP, *_LISTING],
        )

    def append(self) -> dict[str, Any]:
        return self.operation(
            "appendEvents",
            "Append a batch (§6.2)",
            "writing",
            {
                "201": {"description": "Stored, durably.", "content": _json("Appended"), "links": _APPENDED},
                "200": {
                    "description": "An exact re-send: nothing stored (`idempotent`).",
                    "content": _json("Appended"),
                },
            },
            (*_BODY, "batch_too_large", "invalid_batch", "invalid_event", "seq_conflict", *_ADDRESSED),
            parameters=[*_TOP, _CONTENT_ENCODING],
            requestBody={"required": True, "content": _json("AppendBody")},
        )

    def state(
        self, operation_id: str, summary: str, path: list[dict[str, Any]], codes: tuple[str, ...], **links: Any
    ) -> dict[str, Any]:
        ok = {"200": {"description": "The header and the head.", "content": _json("SessionState"), **links}}
        return self.operation(operation_id, summary, "sessions", ok, ("invalid_parameter", *codes), parameters=path)

    def metrics(self) -> dict[str, Any]:
        text = {"schema": {"type": "string"}}
        ok = {
            "description": "The Prometheus text format, or OpenMetrics when `Accept` asks for it.",
            "content": {"text/plain": text, "application/openmetrics-text": text},
        }
        operation = _public("metrics", "Prometheus metrics", {"200": ok, **self.errors(())})
        if self.auth == "token":
            # The service token alone: the metrics name no session.
            operation["security"] = [{"serviceToken": []}]
        return operation

    def paths(self, *, metrics: bool) -> dict[str, Any]:
        paths = {
            "/v1/sessions": self.sessions(),
            "/v1/sessions/{id}": {
                "get": self.state("getSession", "A session's header and head (§12.2)", _TOP, _READ, links=_READ_STATE)
            },
            "/v1/sessions/{id}/subagents": {"get": self.subagents()},
            "/v1/sessions/{parent}/subagents/{child}": {
                "get": self.state("getChildSession", "A subagent child's header and head (§12.2)", _SUBAGENT, _CHILD)
            },
            "/v1/sessions/{id}/events": {"post": self.append()},
            "/v1/sessions/{id}/page": {"get": self.page("readPage", "`session.page` (§4)", _TOP, (*_READ, *_LOADED))},
            "/v1/sessions/{parent}/subagents/{child}/page": {
                "get": self.page(
                    "readChildPage", "`session.page` of a subagent child (§4)", _SUBAGENT, (*_CHILD, *_LOADED)
                )
            },
            "/v1/sessions/{id}/follow": {
                "get": self.follow("followSession", "`session.follow` (§5)", _TOP, (*_READ, *_LOADED))
            },
            "/v1/sessions/{parent}/subagents/{child}/follow": {
                "get": self.follow(
                    "followChildSession", "`session.follow` of a subagent child (§5)", _SUBAGENT, (*_CHILD, *_LOADED)
                )
            },
            "/": {
                "get": _public(
                    "root",
                    "The way in: a redirect to the session viewer",
                    {
                        "308": {
                            "description": "To `/viewer/`, which lists the caller's sessions.",
                            "headers": {"Location": {"required": True, "schema": {"const": "/viewer/"}}},
                        }
                    },
                )
            },
            "/healthz": {
                "get": _public("healthz", "Liveness", {"200": {"description": "Serving.", "content": _json("Health")}})
            },
            "/readyz": {
                "get": _public(
                    "readyz",
                    "Readiness: the store answers and follow hears every append (§7.6)",
                    {
                        "200": {"description": "Ready.", "content": _json("Readiness")},
                        "503": {"description": "Not ready; `reason` says why.", "content": _json("Readiness")},
                    },
                )
            },
            "/openapi.json": {
                "get": _public(
                    "openapi",
                    "This document",
                    {
                        "200": {
                            "description": "OpenAPI 3.1.",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        }
                    },
                )
            },
        }
        if metrics:
            paths["/metrics"] = {"get": self.metrics()}
        return paths


def _public(operation_id: str, summary: str, responses: dict[str, Any]) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": summary,
        "tags": ["operations"],
        "security": [],
        "responses": responses,
    }


_SECURITY_SCHEMES: Final = {
    "serviceToken": {"type": "http", "scheme": "bearer", "description": "A service token (`HISTORY_SERVICE_TOKENS`)."},
    "principal": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Principal",
        "description": "The user the request acts for, 1-256 characters; the gateway sets it (§8.1).",
    },
}
_TAGS: Final = [
    {"name": "sessions", "description": "Listing sessions, and reading one's header and head (§12)."},
    {"name": "writing", "description": "Creating sessions and appending events (§6)."},
    {"name": "reading", "description": "Pages and live follow (§4, §5)."},
    {"name": "operations", "description": "Health, readiness, metrics and this document."},
]


def document(
    *, auth: str = "token", default_max_bytes: int = _DEFAULTS.default_max_bytes, metrics: bool = True
) -> dict[str, Any]:
    """The document of an app with these settings: its auth mode, page byte target, and whether it serves /metrics."""
    info = {
        "title": "history-transport",
        "version": distribution_version(),
        "description": _DESCRIPTION,
        "license": {"name": "MIT", "identifier": "MIT"},
    }
    components: dict[str, Any] = {"schemas": _schemas()}
    # The server that serves the document, wherever a gateway mounts it.
    doc: dict[str, Any] = {"openapi": "3.1.0", "info": info, "servers": [{"url": "/"}], "tags": _TAGS}
    if auth == "token":
        components["securitySchemes"] = _SECURITY_SCHEMES
        doc["security"] = [{"serviceToken": [], "principal": []}]
    else:
        # Said outright, so no reader (or linter) takes a missing requirement for a forgotten one.
        doc["security"] = []
    paths = _Builder(auth=auth, default_max_bytes=default_max_bytes).paths(metrics=metrics)
    # A tree of its own: the constants it is built from stay as they are, whatever the caller does with it.
    return copy.deepcopy({**doc, "paths": paths, "components": components})


def encode_document(**settings: Any) -> bytes:
    """The document as ``docs/openapi.json`` holds it: indented, with a final newline."""
    return msgspec.json.format(msgspec.json.encode(document(**settings)), indent=2) + b"\n"


def route(settings: Settings) -> Route:
    """``GET /openapi.json``: the app's own document, encoded on the first request and kept."""

    @functools.cache
    def body() -> bytes:
        served = settings.metrics and settings.metrics_port is None
        own = document(auth=settings.auth, default_max_bytes=settings.default_max_bytes, metrics=served)
        return msgspec.json.encode(own)

    async def openapi(request: Request) -> Response:
        return Response(body(), media_type="application/json")

    return Route("/openapi.json", openapi, methods=["GET"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m history_service.openapi", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write it to docs/openapi.json instead of stdout")
    encoded = encode_document()
    if parser.parse_args(argv).write:
        DOCUMENT_PATH.write_bytes(encoded)
    else:
        sys.stdout.buffer.write(encoded)
    return 0


if __name__ == "__main__":
    sys.exit(main())

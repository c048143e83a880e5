"""The OpenAPI 3.1 document of the HTTP API (docs/protocol.md), built from the route table and the wire types.

Each path, operation, parameter, answer and error code comes from `history_service.routes`
(the parameters' ranges and defaults from `history_service.params`); this module keeps only
what is the document's own: its prose, its security schemes and its components. Every
schema comes from `msgspec.json.schema_components` over the Structs that decode requests
(`codec.SessionHeader`, the codec's events and rows) and describe responses (`codec.Page`,
`codec.FollowSnapshot`, `history_service.bodies`), so the document cannot drift from them.
The few rules the decoders check in code rather than in a type are added by `_refine`, each
named there. Error statuses come from the one error table (`history_service.answers.ERRORS`).

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
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from codec import (
    RESERVED_TYPES,
    Event,
    FollowSnapshot,
    LiveRecords,
    Page,
    ReasoningChunks,
    SessionHeader,
    TextChunks,
    ToolCallChunks,
    distribution_version,
)
from history_service import bodies, routes
from history_service.answers import ERRORS
from history_service.durable import routes as durable_routes
from history_service.durable.document import TAG
from history_service.params import NoParams, Param, parameter, parameters
from history_service.routes import Operation, Reply, Route
from history_service.settings import Settings

__all__ = ["DOCUMENT_PATH", "Served", "document", "documented_path", "encode_document", "main"]

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
    LiveRecords,
    bodies.SessionCreated,
    bodies.Appended,
    bodies.SessionList,
    bodies.SearchHits,
    bodies.SessionState,
    bodies.Health,
    bodies.Readiness,
    bodies.ErrorBody,
    bodies.FollowError,
    bodies.FollowEnd,
    bodies.Closed,
)

# The status of every code: the error table's, and the router's own for a path no route matches.
_STATUS: Final = {answer.code: answer.status for answer in ERRORS.values()} | {"not_found": 404}
_CREDENTIALS: Final = ("duplicate_header", "unauthorized")
# §2.3: a create body may leave out the header's type (its tag); `_refine` states it.
_REQUEST_SCHEMAS: Final[dict[type, str]] = {SessionHeader: "NewSessionHeader"}

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
    written = components["SessionHeader"]
    components["NewSessionHeader"] = {
        **written,
        "title": "NewSessionHeader",
        "description": (
            "A create body: a session header (§2.3) without `closedAt` (§6.3) or `incarnation` (§2.5); "
            "`type` may be left out."
        ),
        "properties": {name: value for name, value in header.items() if name not in ("closedAt", "incarnation")},
        "required": [name for name in written["required"] if name != "type"],
    }
    # §2.1: an event's type is never a row's tag or the header's.
    components["Event"]["properties"]["type"]["not"] = {"enum": sorted(RESERVED_TYPES)}
    # §4.2: a page record has exactly one key.
    components["PageRecord"].update(minProperties=1, maxProperties=1)
    del components["PageRecord"]["required"]
    # The codec leaves these records undecoded, to decode them one at a time.
    components["FollowSnapshot"]["properties"]["records"]["items"] = _ref("PageRecord")
    components["LiveRecords"]["properties"]["records"]["items"] = _ref("PageRecord")
    components["AppendBody"]["properties"]["events"]["items"] = _ref("StorageRecord")
    components["StorageRecord"] = {
        "description": "A logical event (§2) or a chunk row (§3), told apart by `type`.",
        "anyOf": [_ref(name) for name in ("Event", "TextChunks", "ReasoningChunks", "ToolCallChunks")],
    }


def documented_path(path: str) -> str:
    """A route's path as the document names it: a session ``{id}``, a subagent's address ``{parent}``, ``{child}``.

    A parameter's convertor is Starlette's; the document names the parameter alone.
    """
    names = {"session_id": "parent", "child_id": "child"} if "{child_id}" in path else {"session_id": "id"}
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda found: "{" + names.get(found[1], found[1]) + "}", path)


def _schema(param: Param, settings: Mapping[str, Any]) -> dict[str, Any]:
    if param.kind == "enum":
        return {"enum": list(param.values)}
    if param.kind == "string":
        return {"type": "string"} if param.pattern is None else {"type": "string", "pattern": param.pattern}
    schema: dict[str, Any] = {"type": "integer", "minimum": param.low, "maximum": param.high}
    default = param.default if param.setting is None else settings[param.setting]
    if default is not None:
        schema["default"] = default
    return schema


class _Builder:
    """The operations of `history_service.routes`, for an app whose auth mode and settings are these."""

    def __init__(self, *, auth: str, settings: Mapping[str, Any]) -> None:
        self.auth = auth
        self.settings = settings

    def errors(self, codes: tuple[str, ...]) -> dict[str, Any]:
        """One response per status: the error body, its code one of those this operation answers with it."""
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

    def parameters(self, path: str, operation: Operation) -> list[dict[str, Any]]:
        """The path's session ids, then the query Struct's fields, then the headers the operation reads."""
        found = [
            {
                "name": name,
                "in": "path",
                "description": f"A session id (`{name}`).",
                "schema": _ref("SessionId"),
                "required": True,
            }
            for name in re.findall(r"\{(\w+)\}", path)
        ]
        declared = [("query", param) for param in parameters(operation.query or NoParams)] + [
            ("header", parameter(header.name, header.type, description=header.description))
            for header in operation.headers
        ]
        found += [
            {"name": param.name, "in": where, "description": param.description, "schema": _schema(param, self.settings)}
            | ({"required": True} if param.required else {})
            for where, param in declared
        ]
        return found

    def reply(self, reply: Reply) -> dict[str, Any]:
        answer: dict[str, Any] = {"description": reply.description}
        if reply.headers:
            answer["headers"] = dict(reply.headers)
        if reply.body is not None:
            answer["content"] = _json(reply.body.__name__)
        elif reply.content:
            answer["content"] = dict(reply.content)
        if reply.links:
            answer["links"] = dict(reply.links)
        return answer

    def operation(self, path: str, operation: Operation) -> dict[str, Any]:
        credentials = _CREDENTIALS if self.auth == "token" and operation.auth != "none" else ()
        answers = {str(reply.status): self.reply(reply) for reply in operation.replies}
        answers |= self.errors((*credentials, *operation.errors))
        described: dict[str, Any] = {
            "operationId": operation.name,
            "summary": operation.summary,
            "tags": [operation.tag],
        }
        if operation.auth != "caller":
            # The service token alone: a requirement of its own. Public: an empty one, said outright.
            described["security"] = (
                [{"serviceToken": []}] if operation.auth == "service" and self.auth == "token" else []
            )
        parameters = self.parameters(path, operation)
        if parameters:
            described["parameters"] = parameters
        if operation.body is not None:
            name = _REQUEST_SCHEMAS.get(operation.body, operation.body.__name__)
            described["requestBody"] = {"required": True, "content": _json(name)}
        return {**described, "responses": answers}

    def paths(self, routes: Iterable[Route], *, metrics: bool) -> dict[str, Any]:
        paths: dict[str, Any] = {}
        for route in routes:
            if route.when == "metrics" and not metrics:
                continue
            path = documented_path(route.path)
            paths[path] = {operation.method.lower(): self.operation(path, operation) for operation in route.operations}
        return paths


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
    *,
    auth: str = "token",
    default_max_bytes: int = _DEFAULTS.default_max_bytes,
    metrics: bool = True,
    durable_streams: bool = True,
    table: Iterable[Route] | None = None,
) -> dict[str, Any]:
    """The document of an app with these settings: its auth mode, page byte target, whether it serves /metrics and /ds.

    ``table`` is the routes it documents; by default `history_service.routes.ROUTES`, the app's.
    """
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
    builder = _Builder(auth=auth, settings={"default_max_bytes": default_max_bytes})
    paths = builder.paths(routes.ROUTES if table is None else table, metrics=metrics)
    if durable_streams:
        paths |= {
            documented_path(durable_routes.PREFIX + route.path): route.document(auth)
            for route in durable_routes.ROUTES
            if route.document is not None
        }
        doc["tags"] = [*_TAGS, TAG]
    # A tree of its own: the constants it is built from stay as they are, whatever the caller does with it.
    return copy.deepcopy({**doc, "paths": paths, "components": components})


def encode_document(**settings: Any) -> bytes:
    """The document as ``docs/openapi.json`` holds it: indented, with a final newline."""
    return msgspec.json.format(msgspec.json.encode(document(**settings)), indent=2) + b"\n"


class Served:
    """The document an app serves at ``/openapi.json`` (`history_service.endpoints.document`), made when first asked."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    @functools.cached_property
    def body(self) -> bytes:
        settings = self._settings
        served = settings.metrics and settings.metrics_port is None
        return msgspec.json.encode(
            document(
                auth=settings.auth,
                default_max_bytes=settings.default_max_bytes,
                metrics=served,
                durable_streams=settings.durable_streams,
            )
        )


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

"""The edge's bookkeeping for every request, in one pure ASGI layer: its id, its metrics and its access line.

`Edge` is the app's outermost layer, outside Starlette's own outer error handler, so
every response carries ``X-Request-ID``, the 500 that handler sends for an error nothing
else caught included. It wraps ``send`` once for all three concerns:

* the request id (`history_service.logs.request_id`), held in a context variable while the
  request runs, so every record logged for it carries the id, and echoed in the response;
* the metrics (`history_service.metrics.Metrics`): the time to the first body bytes by
  route template, method and status, and the body bytes by content coding;
* the access line (`history_service.logs.log_access`), when the response has ended, so a
  follow stream's comes when the stream closes; at DEBUG, a line when the request arrived.

Pure ASGI, so a follow stream passes through unbuffered.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from history_service.logs import ACCESS_LOGGER, REQUEST_ID, RequestIdSource, log_access, request_id, shown
from history_service.metrics import Metrics, route_label

__all__ = ["Edge"]

_CONTENT_ENCODING: Final = b"content-encoding"


class Edge:
    """Pure ASGI middleware, outermost: request id, metrics and access line, with one wrapper around ``send``."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self.logger = logging.getLogger(ACCESS_LOGGER)
        self.new_id = RequestIdSource()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        rid = request_id(scope["headers"], self.new_id)
        token = REQUEST_ID.set(rid)
        if self.logger.isEnabledFor(logging.DEBUG):
            # A follow stream's access line comes only when it ends, maybe hours later: say when it began.
            self.logger.debug("%s %s started", scope["method"], shown(scope["path"]))
        echoed = (b"x-request-id", rid.encode("latin-1"))
        metrics = self.metrics if self.metrics.enabled else None
        status = 0
        coding = "identity"
        size = 0
        route: str | None = None

        async def sending(message: Message) -> None:
            nonlocal status, coding, size, route
            kind = message["type"]
            if kind == "http.response.start":
                status = message["status"]
                headers = message.get("headers", ())
                for name, value in headers:
                    if name.lower() == _CONTENT_ENCODING:
                        coding = value.decode("latin-1")
                message["headers"] = [*headers, echoed]
            elif kind == "http.response.body":
                body_size = len(message.get("body", b""))
                size += body_size
                if metrics is not None:
                    if route is None:
                        route = route_label(scope)
                        metrics.responded(route, scope["method"], status, time.perf_counter() - started)
                    if body_size:
                        metrics.sent(route, coding, body_size)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if metrics is not None and route is None:
                # No body went out: the app failed, and the server answers 500 (unless it had started).
                metrics.responded(route_label(scope), scope["method"], status or 500, time.perf_counter() - started)
            log_access(self.logger, scope, status or 500, (time.perf_counter() - started) * 1000, size, coding)
        # Left set when the app raised, so the server's own line about the error carries the id too.
        REQUEST_ID.reset(token)

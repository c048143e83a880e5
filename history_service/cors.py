"""Cross-origin browser access: Starlette's `CORSMiddleware` for the origins ``Settings.cors_origins`` lists.

A page on one of those origins may read pages and follow streams and append, with or
without a token; a page on any other origin gets no ``Access-Control-Allow-Origin``, so
its browser withholds every answer, and its preflights are refused with 400.
"""

from __future__ import annotations

from typing import Final

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

__all__ = ["ALLOW_HEADERS", "ALLOW_METHODS", "EXPOSE_HEADERS", "MAX_AGE", "cors_middleware"]

ALLOW_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "DELETE")
# Every request header the service reads that a browser does not send on its own account.
ALLOW_HEADERS: Final = (
    "Authorization",
    "X-Principal",
    "Last-Event-ID",
    "Content-Type",
    "Content-Encoding",
    "If-None-Match",
    "X-Request-ID",
    # Durable Streams (docs/protocol.md §13).
    "Stream-Seq",
    "Stream-TTL",
    "Stream-Expires-At",
    "Stream-Closed",
    "Stream-Forked-From",
    "Stream-Fork-Offset",
    "Stream-Fork-Sub-Offset",
    "Producer-Id",
    "Producer-Epoch",
    "Producer-Seq",
)
# The response headers past the CORS-safelisted ones (Content-Type, Cache-Control...) that a
# page may want: a page's validator, its timing, and the id to quote from the server log.
EXPOSE_HEADERS: Final = (
    "ETag",
    "Server-Timing",
    "Session-Incarnation",
    "X-Request-ID",
    # Durable Streams (docs/protocol.md §13).
    "Location",
    "Stream-Next-Offset",
    "Stream-Cursor",
    "Stream-Up-To-Date",
    "Stream-Closed",
    "Stream-TTL",
    "Stream-Expires-At",
    "Stream-SSE-Data-Encoding",
    "Producer-Epoch",
    "Producer-Seq",
    "Producer-Expected-Seq",
    "Producer-Received-Seq",
)
# Ten minutes: a browser asks again at most this long after the allow-list changed. A longer
# age would save little, since browsers cache a preflight per address and most page
# addresses differ (``through``), and Chromium caps it at two hours anyway.
MAX_AGE: Final = 600


def cors_middleware(origins: tuple[str, ...]) -> Middleware:
    """The CORS middleware for ``origins``, as the service configures it.

    Credentials stay off: a token travels in ``Authorization``, which a page sets itself and
    the preflight allows, never in cookies or the browser's own HTTP authentication, which
    are what ``Access-Control-Allow-Credentials`` would let every allowed origin use.
    """
    return Middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_methods=ALLOW_METHODS,
        allow_headers=ALLOW_HEADERS,
        expose_headers=EXPOSE_HEADERS,
        allow_credentials=False,
        max_age=MAX_AGE,
    )

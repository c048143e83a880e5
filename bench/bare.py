"""The floor of our framework here: a bare Starlette app with one route, on uvicorn with httptools and uvloop.

``python -m bench.bare PORT`` serves ``GET /healthz`` on ``127.0.0.1:PORT`` until SIGTERM,
with no middleware, no access log and no lifespan work: what `bench/test_hot_path.py`
measures our own edge against.
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["app"]


async def healthz(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


app = Starlette(routes=[Route("/healthz", healthz)])

if __name__ == "__main__":
    port = int(sys.argv[1])
    options: dict[str, Any] = {"http": "httptools", "loop": "uvloop", "log_level": "warning", "access_log": False}
    uvicorn.run(app, host="127.0.0.1", port=port, **options)

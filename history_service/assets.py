"""The session viewer's static files: ``/viewer/`` and the JavaScript client it imports, ``/viewer/lib/``.

``/`` redirects to ``/viewer/``, whose page lists the caller's sessions when no session is named.

The viewer is plain files, no bundling: ``history_service/viewer/`` holds the page, and
``/viewer/lib/`` serves the JavaScript client package a UI team uses, so the viewer runs the
very code its tests check. A wheel carries that package as ``history_service/viewer/lib/``
(copied in by ``setup.py``); a source checkout serves ``clients/js/src`` itself. An install
with neither answers the viewer's addresses with 404 ``viewer_unavailable`` and says why.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Final

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from history_service.errors import ViewerUnavailable

__all__ = ["VIEWER_DIR", "JS_CLIENT_DIR", "to_viewer", "viewer_routes"]

VIEWER_DIR: Final = Path(__file__).resolve().parent / "viewer"


def _js_client_dir() -> Path:
    shipped = VIEWER_DIR / "lib"
    return shipped if shipped.is_dir() else Path(__file__).resolve().parent.parent / "clients" / "js" / "src"


JS_CLIENT_DIR: Final = _js_client_dir()


def _import_map_hash() -> str:
    """The CSP source of the page's one inline script, its import map (which names the client package)."""
    page = (VIEWER_DIR / "index.html").read_text(encoding="utf-8") if VIEWER_DIR.is_dir() else ""
    found = re.search(r'<script type="importmap">(.*?)</script>', page, re.S)
    if found is None:
        return ""
    digest = base64.b64encode(hashlib.sha256(found.group(1).encode()).digest()).decode()
    return f" 'sha256-{digest}'"


# The viewer loads only its own files and talks only to this origin.
_HEADERS: Final = {
    "Content-Security-Policy": (
        f"default-src 'self'; script-src 'self'{_import_map_hash()}; object-src 'none'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class _Files(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(_HEADERS)
        return response


async def _unavailable(request: Request) -> Response:
    raise ViewerUnavailable()


async def to_viewer(request: Request) -> Response:
    """``GET /``, the service's way in: the viewer's list of sessions (or why the viewer is not there)."""
    # Relative, so the address never comes from the request's Host header.
    return RedirectResponse("/viewer/", status_code=308)


def viewer_routes() -> list[BaseRoute]:
    """The viewer's routes; `_unavailable` stands in when the client's sources are not installed.

    ``/`` (`to_viewer`) is an API route, declared in `history_service.routes`.
    """
    if not JS_CLIENT_DIR.is_dir() or not VIEWER_DIR.is_dir():
        return [Route("/viewer", _unavailable), Route("/viewer/{path:path}", _unavailable)]
    return [
        Route("/viewer", to_viewer),
        Mount("/viewer/lib", app=_Files(directory=JS_CLIENT_DIR), name="viewer-lib"),
        Mount("/viewer", app=_Files(directory=VIEWER_DIR, html=True), name="viewer"),
    ]

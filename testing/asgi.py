"""The app in process: an httpx client on its ASGI interface, with the lifespan run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette

__all__ = ["serving"]


@asynccontextmanager
async def serving(app: Starlette, *, raise_app_exceptions: bool = True) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the app in process, with the lifespan run and its state in every request scope.

    With ``raise_app_exceptions=False`` an error the app raises after answering 500 is not re-raised
    in the test, so the test can read that answer.
    """
    async with app.router.lifespan_context(app) as state:

        async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
            await app({**scope, "state": dict(state or {})}, receive, send)

        transport = httpx.ASGITransport(app=asgi, raise_app_exceptions=raise_app_exceptions)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            client.app_state = state  # type: ignore[attr-defined]
            yield client

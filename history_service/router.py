"""Routing by path segments: a request tries only the routes its path could match, in the table's order.

Starlette's router tries every route's pattern in turn, so a request for the table's last
route paid for a dozen regular expressions. `SegmentRouter` first looks at the path's
segments: a route whose template is whole segments, literal or ``{name}``, can match only
a path with as many segments and the same literals. What it tries are those routes and
any other route (a mount, a converter), in their order, each with Starlette's own
`Route.matches`; so the route chosen, its parameters and a 405 for another method are
Starlette's. A path that none of them matches goes to Starlette's walk, for its redirect of
a trailing slash and its 404.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from starlette._utils import get_route_path
from starlette.convertors import StringConvertor
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import Receive, Scope, Send

__all__ = ["ANYWHERE", "SegmentRouter", "candidates", "template_literals"]

# A route the segments cannot place: it is tried for every path, in its place.
ANYWHERE: Final = -1

Literals = tuple[tuple[int, str], ...]


def template_literals(route: BaseRoute) -> tuple[int, Literals]:
    """A route's segment count and its literal segments, or `ANYWHERE` when its template is not whole segments."""
    if not isinstance(route, Route) or not all(type(c) is StringConvertor for c in route.param_convertors.values()):
        return ANYWHERE, ()
    segments = route.path.split("/")
    literals = []
    for i, segment in enumerate(segments):
        if segment.startswith("{") and segment.endswith("}") and segment.count("{") == 1:
            continue
        if "{" in segment or "}" in segment:
            return ANYWHERE, ()
        literals.append((i, segment))
    return len(segments), tuple(literals)


def candidates(routes: Sequence[BaseRoute]) -> dict[int, list[tuple[Literals, BaseRoute]]]:
    """For each segment count, the routes a path of that many segments could match, in table order.

    A route its segments cannot place is in every list (with no literals), and under
    `ANYWHERE` for the counts no route names.
    """
    placed = [(*template_literals(route), route) for route in routes]
    counts = {count for count, _, _ in placed if count != ANYWHERE}
    return {
        count: [(literals, route) for length, literals, route in placed if length in (count, ANYWHERE)]
        for count in (*counts, ANYWHERE)
    }


class SegmentRouter(Router):
    """A Starlette `Router` that tries, for each HTTP request, only the routes its path's segments allow."""

    def __init__(self, routes: Sequence[BaseRoute], **options: object) -> None:
        super().__init__(routes=list(routes), **options)  # type: ignore[arg-type]
        self._candidates = candidates(self.routes)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().app(scope, receive, send)
            return
        parts = get_route_path(scope).split("/")
        tried = self._candidates.get(len(parts)) or self._candidates[ANYWHERE]
        partial: tuple[BaseRoute, Scope] | None = None
        for literals, route in tried:
            if any(parts[i] != literal for i, literal in literals):
                continue
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                scope.setdefault("router", self)
                scope["route"] = route
                scope.update(child_scope)
                await route.handle(scope, receive, send)
                return
            if match is Match.PARTIAL and partial is None:
                partial = (route, child_scope)
        if partial is not None:
            route, child_scope = partial
            scope.setdefault("router", self)
            scope["route"] = route
            scope.update(child_scope)
            await route.handle(scope, receive, send)
            return
        await super().app(scope, receive, send)

"""``POST /v1/test-only/seed``: deterministic scenarios written through the normal append path (docs/protocol.md §9).

Mounted, and imported, only when ``HISTORY_ENABLE_TEST_SEED=1``.

Body: ``{"scenario", "seed"?, "sessionId"?, "turns"?, "header"?, "events"?}`` where scenario
is ``dsh-synthetic``, ``multi-turn``, ``subagent``, ``compaction`` or ``explicit`` (which
takes ``header`` and ``events``, plain or packed). Sessions are owned by the caller.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from codec import Event, SessionHeader, encode
from history_service import scenarios
from history_service.auth import principal
from history_service.errors import InvalidSeed
from history_service.requests import parse_events, parse_header, read_json, session_id
from history_service.service import HistoryService

__all__ = ["SeedRequest", "seed"]

BATCH: Final = 512


class SeedRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    scenario: Literal["dsh-synthetic", "multi-turn", "subagent", "compaction", "explicit"]
    seed: int = 0
    sessionId: str | None = None
    turns: int = 5
    header: dict[str, Any] | None = None
    events: list[msgspec.Raw] | None = None


_SEED_REQUEST: Final = msgspec.json.Decoder(SeedRequest)


def _header(session_id: str, **extra: Any) -> SessionHeader:
    return SessionHeader(id=session_id, createdAt=scenarios.TIME_ZERO, **extra)


def _plan(request: SeedRequest, service: HistoryService) -> list[tuple[SessionHeader, list[Event]]]:
    base = session_id(request.sessionId or f"{request.scenario}-{request.seed}", where="sessionId")
    if request.scenario == "dsh-synthetic":
        return [(_header(base), scenarios.dsh_synthetic())]
    if request.scenario == "multi-turn":
        return [(_header(base), scenarios.multi_turn(seed=request.seed, turns=request.turns))]
    if request.scenario == "compaction":
        return [(_header(base), scenarios.compaction(seed=request.seed, turns=request.turns))]
    if request.scenario == "subagent":
        child = {"origin": "subagent", "delegationDepth": 1}
        return [
            (_header(base, delegationDepth=0), scenarios.multi_turn(seed=request.seed, turns=2)),
            (
                _header(f"{base}.child-1", parentSession=base, **child),
                scenarios.multi_turn(seed=request.seed + 1, turns=2),
            ),
            (
                _header(f"{base}.child-2", parentSession=base, **child),
                scenarios.multi_turn(seed=request.seed + 2, turns=1),
            ),
            (
                _header(
                    f"{base}.child-1.grandchild", parentSession=f"{base}.child-1", origin="subagent", delegationDepth=2
                ),
                scenarios.multi_turn(seed=request.seed + 3, turns=1),
            ),
        ]
    if request.header is None or request.events is None:
        raise InvalidSeed("the explicit scenario needs header and events")
    header = parse_header(encode(request.header))
    events = parse_events(encode({"events": request.events}), service.settings)
    return [(header, events)]


async def seed(request: Request) -> Response:
    service: HistoryService = request.state.service
    who = principal(request, service.settings)
    plan = await read_json(request, service.settings, _SEED_REQUEST, invalid=InvalidSeed)
    written = []
    for header, events in _plan(plan, service):
        session_id(header.id, where="id")
        await service.create(who, header)
        for start in range(0, len(events), BATCH):
            await service.append(who, header.id, events[start : start + BATCH])
        written.append({"id": header.id, "headSeq": len(events) - 1})
    return Response(encode({"sessions": written}), status_code=201, media_type="application/json")

"""The service's test-only seeder: settings that enable it, a call to it, and one request per scenario."""

from __future__ import annotations

import json
from typing import Any, Final

import httpx

from history_service.settings import Settings
from testing.golden import GOLDEN_DIR

__all__ = ["SCENARIOS", "SEEDED", "seed"]

SEEDED: Final = Settings(enable_test_seed=True)

_EXPLICIT = (GOLDEN_DIR / "codec" / "text-turn.events.jsonl").read_bytes().splitlines()

SCENARIOS: Final[dict[str, dict[str, Any]]] = {
    "multi-turn": {"scenario": "multi-turn", "seed": 1, "turns": 4},
    "subagent": {"scenario": "subagent", "seed": 2},
    "compaction": {"scenario": "compaction", "seed": 3},
    "explicit": {
        "scenario": "explicit",
        "header": json.loads(_EXPLICIT[0]),
        "events": [json.loads(line) for line in _EXPLICIT[1:]],
    },
    "dsh-synthetic": {"scenario": "dsh-synthetic"},
}
"""One seed request body per seeder scenario; tests/golden/service holds the pages and frames of each."""


async def seed(client: httpx.AsyncClient, scenario: str, **extra: Any) -> list[dict[str, Any]]:
    """Seed ``scenario`` through the test-only endpoint; returns the sessions it made."""
    response = await client.post("/v1/test-only/seed", json={"scenario": scenario, **extra})
    assert response.status_code == 201, response.text
    sessions: list[dict[str, Any]] = response.json()["sessions"]
    return sessions

"""Benchmark fixtures (DESIGN §12). The generators live in `history_service.scenarios`, shared with the seeder."""

from __future__ import annotations

from typing import Final

from history_service.scenarios import TIME_ZERO, dsh_synthetic, dsh_token

__all__ = [
    "DSH_DELTA_RUNS",
    "DSH_LOGICAL_EVENTS",
    "DSH_ORDINARY_EVENTS",
    "DSH_PACKED_RECORDS",
    "TIME_ZERO",
    "dsh_synthetic",
    "dsh_token",
]

DSH_LOGICAL_EVENTS: Final = 416_756
DSH_DELTA_RUNS: Final = 116
DSH_ORDINARY_EVENTS: Final = 580
DSH_PACKED_RECORDS: Final = 696

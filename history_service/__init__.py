"""The history service: HTTP API, test seeder and command line."""

from __future__ import annotations

__all__: list[str] = []

"""What the ``history-service`` commands share: their name, and the failure each reports as one line."""

from __future__ import annotations

from typing import Final

__all__ = ["PROG", "CommandError"]

PROG: Final = "history-service"


class CommandError(Exception):
    """A failure the command reports as one line."""

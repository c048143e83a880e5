"""The cap on open follow streams (`Settings.follower_cap`), one for the whole process.

A ``/v1`` follow (`session.follow`) and a live ``/ds`` read (long-poll or SSE) each hold a
place while they are open, so both kinds together stay within the cap, and a stream that
finds it full is refused with `Overloaded` (a 503) before it opens.
"""

from __future__ import annotations

from history_service.errors import Overloaded

__all__ = ["FollowerCap"]


class FollowerCap:
    """How many follow streams are open, of at most ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def admit(self) -> None:
        """One more open stream; `Overloaded` when ``limit`` are open already. Each admit is given back by `leave`."""
        if self.open >= self.limit:
            raise Overloaded(f"{self.open} follow streams are open, the most this server keeps")
        self.open += 1

    def leave(self) -> None:
        """A stream `admit` let in has ended."""
        self.open -= 1

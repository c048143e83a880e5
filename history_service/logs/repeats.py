"""Records that repeat without end: the first of a kind is shown, the others within a window counted.

`Tracebacks` keeps a failure that repeats, such as every request's during a store outage,
from writing its traceback each time; `Warnings` keeps a warning that a burst repeats to
one line a window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Tracebacks", "Warnings"]


@dataclass
class _Repeats:
    logger: logging.Logger
    shown_at: float
    count: int = 0


class _Windows:
    """Kinds of record that repeat: the first of a kind is shown, then the others within ``window`` seconds counted.

    Once a kind's window has passed, the next record of any kind first logs how many went unshown.
    """

    def __init__(self, window: float, clock: Callable[[], float], level: int, after: str) -> None:
        self.window = window
        self.clock = clock
        self._level = level
        self._after = after
        self._kinds: dict[tuple[str, ...], _Repeats] = {}

    def _shown(self, logger: logging.Logger, kind: tuple[str, ...]) -> bool:
        """Whether a record of ``kind`` is shown now in full; else it is counted."""
        now = self.clock()
        self._report(now)
        seen = self._kinds.get(kind)
        if seen is None:
            self._kinds[kind] = _Repeats(logger, now)
            return True
        seen.count += 1
        return False

    def close(self) -> None:
        """Log the count of every kind still in its window: for when the app stops."""
        self._report(None)

    def _report(self, now: float | None) -> None:
        for kind, seen in list(self._kinds.items()):
            if now is None or now - seen.shown_at >= self.window:
                del self._kinds[kind]
                if seen.count:
                    seen.logger.log(
                        self._level,
                        "%s repeated %d times in the %g s after %s",
                        " from ".join(kind),
                        seen.count,
                        self.window,
                        self._after,
                    )


class Tracebacks(_Windows):
    """Which logged failures carry their traceback: the first of a kind, then one a window; the others are counted.

    A kind is the failure's type and its cause's, so a store outage that fails every
    request is one kind. Each failure is still one line; within ``window`` seconds of its
    kind's last traceback it has none. Once the window has passed, the next failure of
    any kind first logs, for each kind whose window ended, how many went without.
    """

    def __init__(self, *, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(window, clock, logging.ERROR, "its traceback")

    def error(self, logger: logging.Logger, exc: BaseException, message: str, *args: object) -> None:
        """Log ``message % args`` at ERROR, with ``exc``'s traceback unless its kind showed one this window."""
        if self._shown(logger, _kind(exc)):
            logger.error(message, *args, exc_info=exc)
        else:
            logger.error(f"{message} (traceback logged before)", *args)


class Warnings(_Windows):
    """Warnings that can repeat without end (one per subscription a burst touches): one line a kind a window.

    A kind is the warning's message template; the first of a window is logged, the rest
    only counted, and the count is logged once the window has passed.
    """

    def __init__(self, *, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(window, clock, logging.WARNING, "it was logged")

    def warning(self, logger: logging.Logger, message: str, *args: object, exc_info: bool = False) -> None:
        """Log ``message % args`` at WARNING unless a warning of the same ``message`` was logged this window."""
        if self._shown(logger, (message,)):
            logger.warning(message, *args, exc_info=exc_info)


def _kind(exc: BaseException) -> tuple[str, ...]:
    cause = exc.__cause__ or exc.__context__
    names = [type(exc).__qualname__]
    if cause is not None:
        names.append(type(cause).__qualname__)
    return tuple(names)

"""Readiness (``GET /readyz``, docs/protocol.md §1.4): may this process take traffic now?

It may while the store answers a real read (`HistoryStore.check_ready`) and follow hears
every append: in-process (a memory store), or through the store's notifier once it is
``listening``: a PostgreSQL ``LISTEN`` connection that is up, or the log of notices of a SQLite
file or JSONL directory, read (docs/protocol.md §7.6). What
failed, with paths and driver messages, goes to the server log; the answer names only
which part is not ready.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import anyio

from history_service.notices import Notices
from persistence import HistoryStore, StoreError

__all__ = ["PROBE_TIMEOUT", "readiness"]

logger = logging.getLogger(__name__)

# Longer than a healthy store's read by far, and short enough that a probe answers before a gateway gives up on it.
PROBE_TIMEOUT: Final = 5.0
_NOTIFIER_READY: Final = frozenset({"in-process", "listening"})


async def readiness(store: HistoryStore, notices: Notices) -> tuple[bool, dict[str, Any]]:
    """Whether the process is ready, and the body that says so.

    The body is ``{"status": "ready" | "not_ready", "store": "ok" | "unavailable", "notifier": …}``,
    with a ``reason`` for people when not ready.
    """
    store_ok = False
    with anyio.move_on_after(PROBE_TIMEOUT) as probe:
        try:
            await store.check_ready()
            store_ok = True
        except StoreError as exc:
            logger.warning("not ready: the store failed its probe: %s", exc)
    if probe.cancelled_caught:
        logger.warning("not ready: the store did not answer its probe within %.0f s", PROBE_TIMEOUT)
    notifier = notices.state
    reasons = []
    if not store_ok:
        reasons.append("the store failed a read or did not answer; the server log has the details")
    if notifier not in _NOTIFIER_READY:
        reasons.append(f"follow cannot hear other processes' appends (notifier {notifier})")
    body: dict[str, Any] = {
        "status": "not_ready" if reasons else "ready",
        "store": "ok" if store_ok else "unavailable",
        "notifier": notifier,
    }
    if reasons:
        body["reason"] = "; ".join(reasons)
    return not reasons, body

"""Webhook deliveries (docs/protocol.md §13.6): the notification a wake POSTs, signed, and the queue that sends it.

Deliveries wait in a bounded queue for a few workers that share one client; a delivery is
tried `ATTEMPTS` times at most, with backoff, while its wake is still open. What it signs
with is `history_service.durable.signing`'s; where a webhook may go, by its URL and by the
address it connects to, is `history_service.durable.egress`'s: the client the workers share
is its.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, TypeVar

import anyio
import httpx
import msgspec
from anyio.abc import TaskGroup
from msgspec import Struct

from history_service.durable.egress import Egress
from history_service.durable.signing import Signer
from history_service.durable.subscription_bodies import StreamInfo

__all__ = ["ATTEMPTS", "Deliveries", "deliver", "notification"]

logger = logging.getLogger(__name__)

ATTEMPTS: Final = 3
_BACKOFF_S: Final = 1.0
# A receiver's answer is read only for its ``done``; a larger one is not worth holding.
_MAX_ANSWER: Final = 64 * 1024
_WAITING: Final = 256
_WORKERS: Final = 8
# An owner's share: of the workers, and of the deliveries waiting (as many as its subscriptions may be).
_PER_OWNER: Final = 2
_OWNER_WAITING: Final = 64

Job = TypeVar("Job")
Work = Callable[[httpx.AsyncClient, Job], Awaitable[None]]


class _Notification(Struct, frozen=True):
    subscription_id: str
    wake_id: str
    generation: int
    streams: list[StreamInfo]
    callback_url: str
    callback_token: str


class _Answer(Struct, frozen=True):
    done: Any = None


_ANSWER: Final = msgspec.json.Decoder(_Answer)


def notification(
    subscription_id: str, wake_id: str, generation: int, streams: list[StreamInfo], callback_url: str, token: str
) -> bytes:
    """The body POSTed to a webhook for a wake."""
    wake = _Notification(subscription_id, wake_id, generation, streams, callback_url, token)
    return msgspec.json.encode(wake)


class _Lane:
    """One owner's deliveries: how many wait or run, and its share of the workers."""

    def __init__(self) -> None:
        self.queued = 0
        self.slots = anyio.Semaphore(_PER_OWNER)


class Deliveries(Generic[Job]):
    """Deliveries waiting, a bounded number in all and per owner, and the workers that make them through one client.

    Fair per owner: an owner's deliveries run on at most `_PER_OWNER` of the `_WORKERS` slots,
    so one owner's slow endpoints always leave the others room, and since each owner has at
    most that many waiting for a slot, owners take the freed slots in turn.
    """

    def __init__(self, egress: Egress) -> None:
        self._egress = egress
        # While `run` runs: its task group, the work, the client, and the workers' slots.
        self._running: tuple[TaskGroup, Work[Job], httpx.AsyncClient, anyio.Semaphore] | None = None
        self._lanes: dict[str, _Lane] = {}
        self._waiting = 0

    def send(self, owner: str, job: Job) -> bool:
        """Queue ``job`` of ``owner``'s; False when the queue, or the owner's part of it, is full, or no workers run."""
        lane = self._lanes.get(owner)
        if self._running is None or self._waiting >= _WAITING or (lane is not None and lane.queued >= _OWNER_WAITING):
            return False
        if lane is None:
            lane = self._lanes[owner] = _Lane()
        lane.queued += 1
        self._waiting += 1
        self._running[0].start_soon(self._one, owner, lane, job)
        return True

    async def run(self, work: Work[Job]) -> None:
        """Make the deliveries with ``work`` until cancelled; a delivery that raises is logged and dropped."""
        http = self._egress.client(timeout=httpx.Timeout(10.0, connect=5.0), max_connections=_WORKERS)
        async with http, anyio.create_task_group() as tasks:
            self._running = (tasks, work, http, anyio.Semaphore(_WORKERS))
            try:
                await anyio.sleep_forever()
            finally:
                self._running = None
                tasks.cancel_scope.cancel()

    async def _one(self, owner: str, lane: _Lane, job: Job) -> None:
        try:
            if self._running is not None:
                _, work, http, slots = self._running
                async with lane.slots, slots:
                    await work(http, job)
        except Exception:
            logger.exception("a webhook delivery failed")
        finally:
            self._waiting -= 1
            lane.queued -= 1
            if not lane.queued and self._lanes.get(owner) is lane:
                del self._lanes[owner]


async def _post(http: httpx.AsyncClient, url: str, body: bytes, signer: Signer) -> bool | None:
    """One attempt: None when it failed, else whether the receiver answered ``{"done": true}``."""
    headers = {"content-type": "application/json", "webhook-signature": signer.sign(body)}
    answer = bytearray()
    try:
        async with http.stream("POST", url, content=body, headers=headers) as response:
            if not response.is_success:
                logger.debug("webhook %s answered %d", url, response.status_code)
                return None
            async for chunk in response.aiter_bytes():
                answer += chunk
                if len(answer) > _MAX_ANSWER:
                    return False
    except httpx.HTTPError as exc:
        logger.debug("webhook %s failed: %s", url, exc)
        return None
    try:
        return _ANSWER.decode(answer).done is True
    except msgspec.DecodeError:
        return False


async def deliver(
    http: httpx.AsyncClient, url: str, body: bytes, signer: Signer, *, wanted: Callable[[], bool]
) -> bool | None:
    """POST ``body`` until it is taken, up to `ATTEMPTS` times while ``wanted()``; as `_post` answers."""
    for attempt in range(ATTEMPTS):
        if attempt:
            await anyio.sleep(_BACKOFF_S * 2 ** (attempt - 1) * random.uniform(0.8, 1.2))
        if not wanted():
            return None
        outcome = await _post(http, url, body, signer)
        if outcome is not None:
            return outcome
    logger.warning("webhook %s did not take its wake in %d attempts", url, ATTEMPTS)
    return None

"""The rules of a store's subscription records, written once for every store (docs/protocol.md §13.6).

Each function runs inside one of a store's transactions, handed as a `Tx`, as the stream rules
(`persistence.streams.rules`) do. A record changes only over the version it was read at, so
processes that share a store never lose each other's changes: of two that open a wake at
once, one saves it and the other reads the record again. The owner ``""`` is no principal's:
a record of its holds what every process of the store shares (the service's signing keys).
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from persistence.streams.model import SubscriptionRecord

__all__ = ["SHARED_OWNER", "Tx", "change", "create", "remove"]

# The owner of the records that belong to no principal; never counted against a limit.
SHARED_OWNER = ""


class Tx(Protocol):
    """A store's view of its subscription records within one transaction."""

    def subscription(self, owner: str, id: str) -> SubscriptionRecord | None: ...

    def count(self, owner: str | None) -> int:
        """How many records ``owner`` has; ``None``: every principal together (not `SHARED_OWNER`'s)."""

    def put(self, record: SubscriptionRecord) -> None:
        """Insert the record, or replace the one of its owner and id."""

    def drop(self, owner: str, id: str) -> None: ...


def create(tx: Tx, record: SubscriptionRecord, per_owner: int, total: int) -> tuple[SubscriptionRecord, bool] | None:
    """The record of ``record``'s owner and id and whether this created it (at version 1); None past a limit."""
    existing = tx.subscription(record.owner, record.id)
    if existing is not None:
        return existing, False
    if record.owner != SHARED_OWNER and (tx.count(record.owner) >= per_owner or tx.count(None) >= total):
        return None
    created = msgspec.structs.replace(record, version=1)
    tx.put(created)
    return created, True


def change(tx: Tx, record: SubscriptionRecord) -> SubscriptionRecord | None:
    """Save ``record`` over the version it carries, as the next one; None when that is no longer the stored one."""
    stored = tx.subscription(record.owner, record.id)
    if stored is None or stored.version != record.version:
        return None
    saved = msgspec.structs.replace(record, version=record.version + 1)
    tx.put(saved)
    return saved


def remove(tx: Tx, owner: str, id: str) -> bool:
    """Delete the record; whether there was one."""
    if tx.subscription(owner, id) is None:
        return False
    tx.drop(owner, id)
    return True

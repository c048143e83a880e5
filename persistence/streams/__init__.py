"""Generic Durable Streams on the stores (docs/protocol.md §13): one contract, its rules, and each backend's."""

from __future__ import annotations

from persistence.streams.base import ReadResult, StreamStore
from persistence.streams.memory import MemoryStreams
from persistence.streams.model import (
    AppendOutcome,
    AppendRequest,
    Chunk,
    CreateRequest,
    Producer,
    ProducerClaim,
    StreamMeta,
    SubscriptionRecord,
    media_type,
)
from persistence.streams.subscribed import SHARED_OWNER

__all__ = [
    "SHARED_OWNER",
    "AppendOutcome",
    "AppendRequest",
    "Chunk",
    "CreateRequest",
    "MemoryStreams",
    "Producer",
    "ProducerClaim",
    "ReadResult",
    "StreamMeta",
    "StreamStore",
    "SubscriptionRecord",
    "media_type",
]

"""The Python client SDK: exact pages, exact history, and exactly-once live follow.

It imports only the codec and httpx. The codec types a write needs (`SessionHeader`, `Event`,
`ReplaceOp` and the delta data of ``assistant/chunk`` events) are re-exported here, beside
the answers of writes and session reads (`SessionCreated`, `Appended`, `Closed`,
`SessionList`, `SessionState`).
"""

from __future__ import annotations

from codec import DeltaData, Event, ReasoningDelta, ReplaceOp, SessionHeader, TextDelta, ToolCallDelta
from history_client.bodies import (
    Appended,
    Closed,
    ListedSession,
    SearchHit,
    SearchHits,
    SessionCreated,
    SessionList,
    SessionState,
    Usage,
)
from history_client.client import AsyncHistoryClient, HistoryClient
from history_client.errors import (
    ClientError,
    CursorAheadError,
    PageContinuityError,
    ProtocolError,
    ResumeBehindError,
    ServiceError,
    SessionDeletedError,
    StreamOverlapError,
    TransportError,
)
from history_client.follow import Backoff, Reconnected, Retrying
from history_client.pages import HistoryPage, LazyPage, iter_body_events, read_page
from history_client.requests import service_error
from history_client.sse import ServerSentEvent, SSEDecoder
from history_client.text import RowText, has_visible, joined_text

__all__ = [
    "Appended",
    "AsyncHistoryClient",
    "Backoff",
    "ClientError",
    "Closed",
    "CursorAheadError",
    "DeltaData",
    "Event",
    "has_visible",
    "HistoryClient",
    "HistoryPage",
    "iter_body_events",
    "joined_text",
    "LazyPage",
    "ListedSession",
    "PageContinuityError",
    "ProtocolError",
    "read_page",
    "ReasoningDelta",
    "Reconnected",
    "ReplaceOp",
    "ResumeBehindError",
    "Retrying",
    "RowText",
    "SearchHit",
    "SearchHits",
    "ServerSentEvent",
    "service_error",
    "ServiceError",
    "SessionCreated",
    "SessionDeletedError",
    "SessionHeader",
    "SessionList",
    "SessionState",
    "SSEDecoder",
    "StreamOverlapError",
    "TextDelta",
    "ToolCallDelta",
    "TransportError",
    "Usage",
]

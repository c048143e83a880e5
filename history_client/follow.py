"""The follow plan: exactly-once delivery over a stream that may drop, written once for both clients.

The plan does no I/O. It yields `Connect` (open a stream resuming after a seq, or fresh),
`NextFrame` (the reply is the next `ServerSentEvent`, ``None`` when the stream ends, or
`IDLE` when its deadline passed first), `Fetch` (a page body, for gap repair), `ReadHead`
(the session's `SessionState`), `Sleep` and `Emit`. A client reports a broken connection by
throwing `Disconnected` (or the transport's error) into the plan.

The journal rules (the seed's client journal):
- The cursor is the last delivered seq. A snapshot must end exactly at its own cursor,
  and a reconnected stream must not open behind the delivered cursor.
- A live record that ends at or before the cursor is a complete duplicate and is dropped;
  one that starts at or before the cursor but ends after it is a partial overlap and fails.
- A record that starts after ``cursor + 1`` leaves a gap. The plan repairs it from
  ``session.page`` before going on; the live events that arrive meanwhile wait, unread,
  in the stream, and any that the repair already delivered are then dropped as duplicates.
- Any other failure of the connection reconnects with ``Last-Event-ID`` = the cursor,
  after an exponential backoff with jitter; a reconnect that delivers resets the count.

The incarnation rules (docs/protocol.md §2.5, §5.1):
- The follow is of one incarnation: the caller's, or the one the snapshot's header or the
  first frame's ``id:`` (``<incarnation>:<seq>``) names. Every later frame must name it;
  one that names another is a `ProtocolError`.
- A reconnect sends ``Last-Event-ID: <incarnation>:<cursor>`` and gap repairs name it on
  their pages, so a 404 ``session_not_found`` to them means the session is gone: the client
  raises `SessionDeletedError`, as for an ``error`` frame ``session_deleted``, and never
  reconnects (never into a session created again under the id).

An optional hook hears each failure that will be retried (`Retrying`) and each stream
that opens again after failures (`Reconnected`); the failure that exhausts the retries
is raised as `TransportError` instead.

Stopping (the protocol marks no point in a live stream, so the plan keeps its own):
- *Caught up* is having delivered every event up to the head the follow found when it
  started: a fresh open's snapshot ``cursor`` (the head when the stream opened, §5.2), or,
  for a resume (``after``), which replays without a snapshot, the ``headSeq`` of one read
  of the session before the stream opens. ``on_caught_up`` hears that head once, when it
  is reached; ``until="caught_up"`` ends the follow there.
- *Idle* is ``idle`` seconds without a snapshot, event or records frame (pings do not
  count): the follow then ends. The async client ends it on time; the sync client notices
  between reads, so at the latest at the stream's next ping (15 s by default) or, when
  ``idle`` is shorter than a follow's read timeout, when that read times out.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator
from typing import Any, Final, Literal, NamedTuple

import httpx

from codec import (
    CodecError,
    Event,
    PageRecord,
    decode_follow_snapshot,
    decode_json,
    decode_live_record,
    decode_live_records,
    decode_record_range,
    expand_row,
    parse_event_id,
    record_seq_range,
)
from history_client.bodies import SessionState
from history_client.errors import (
    CursorAheadError,
    ProtocolError,
    ResumeBehindError,
    ServiceError,
    SessionDeletedError,
    StreamOverlapError,
    TransportError,
    describe,
)
from history_client.history import Emit, Fetch, fetch
from history_client.incarnations import Pin
from history_client.pages import LazyPage, check_ranges, open_lazy_page
from history_client.sse import ServerSentEvent

__all__ = [
    "DEFAULT_MAX_DELAY",
    "DEFAULT_MAX_RETRIES",
    "IDLE",
    "Backoff",
    "CaughtUpHook",
    "Connect",
    "ConnectionHook",
    "Disconnected",
    "FollowPlan",
    "Idle",
    "NextFrame",
    "ReadHead",
    "Reconnected",
    "Retrying",
    "Sleep",
    "Until",
    "follow_plan",
]

DEFAULT_MAX_RETRIES: Final = 10
DEFAULT_MAX_DELAY: Final = 30.0


class Connect(NamedTuple):
    """Open a follow stream: resuming after ``after``, or fresh when that is ``None``; of ``incarnation`` when known;
    ``packed`` (§5.5) or in one frame per event."""

    after: int | None
    incarnation: str | None = None
    packed: bool = False


class NextFrame(NamedTuple):
    """Read the next event of the open stream; if ``deadline`` (``time.monotonic()``) passes first, reply `IDLE`."""

    deadline: float | None = None


class ReadHead(NamedTuple):
    """Read the session's header and head (docs/protocol.md §12.2); the reply is a `SessionState`."""


class Sleep(NamedTuple):
    seconds: float


class Idle:
    """The reply to a `NextFrame` whose deadline passed before a frame arrived."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "IDLE"


IDLE: Final = Idle()
_NEXT_FRAME: Final = NextFrame()

FollowPlan = Generator[Connect | NextFrame | Fetch | ReadHead | Sleep | Emit, Any, None]
Until = Literal["caught_up"]


class Disconnected(Exception):
    """Thrown into a plan when the stream broke or ended; the plan reconnects."""


class Retrying(NamedTuple):
    """A follow connection failed, and the plan tries again after ``delay`` seconds.

    ``attempt`` counts the failures in a row since an event was last delivered, from 1:
    the count that `Backoff.max_retries` bounds. ``opened`` says whether the stream had
    opened before it failed (a lost stream) or not (a failed connection).
    """

    attempt: int
    error: Exception
    delay: float
    opened: bool

    @property
    def reason(self) -> str:
        """The failure as one line, e.g. ``ConnectError: [Errno 111] Connection refused``."""
        return describe(self.error)


class Reconnected(NamedTuple):
    """A follow stream opened again after ``failures`` failed attempts in a row."""

    failures: int


ConnectionHook = Callable[[Retrying | Reconnected], None]
"""Called synchronously from inside `follow`, in order; in the async client it runs on the event loop."""

CaughtUpHook = Callable[[int], None]
"""Called once, with the head the follow caught up to, after the events up to it were delivered."""


class Backoff:
    """Reconnect delays: exponential from ``base`` up to ``cap``, each drawn from its upper half.

    ``base`` ``None`` follows the server's ``retry`` field (1 s until one arrives).
    ``max_retries`` counts reconnects in a row that deliver nothing; ``None`` never gives up.
    """

    def __init__(
        self,
        *,
        base: float | None = None,
        cap: float = DEFAULT_MAX_DELAY,
        max_retries: int | None = DEFAULT_MAX_RETRIES,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.base = base
        self.cap = cap
        self.max_retries = max_retries
        self.rand = rand

    def delay(self, failures: int, server_retry_ms: int | None) -> float:
        base = self.base if self.base is not None else (server_retry_ms or 1000) / 1000
        ceiling: float = min(self.cap, base * 2 ** (failures - 1))
        return ceiling * (0.5 + 0.5 * self.rand())


_RETRYABLE_STATUS: Final = frozenset({408, 425, 429, 500, 502, 503, 504})


def follow_plan(
    *,
    after: int | None,
    backoff: Backoff,
    on_connection: ConnectionHook | None = None,
    incarnation: str | None = None,
    until: Until | None = None,
    idle: float | None = None,
    on_caught_up: CaughtUpHook | None = None,
    packed: bool = False,
) -> FollowPlan:
    """Deliver every event after ``after`` (or from a fresh snapshot) exactly once, in order, until the session ends.

    ``incarnation`` pins the follow to that incarnation from its first request. ``until``,
    ``idle`` and ``on_caught_up`` are the stopping rules of the module's docstring. ``packed``
    asks for a packed stream (§5.5); a server that predates them refuses the parameter, and
    the plan then follows it in one frame per event.
    """
    journal = _Journal(after, Pin(incarnation))
    caught = _CaughtUp(until, on_caught_up)
    if after is not None and caught.wanted:
        state: SessionState = yield ReadHead()
        named = state.header.incarnation
        if isinstance(named, str):
            if journal.pin.incarnation not in (None, named):
                gone = journal.pin.incarnation
                raise SessionDeletedError(f"the session (incarnation {gone}) was deleted", incarnation=gone)
            journal.pin.learn(named, "the session's header")
        if after > state.head_seq:
            raise CursorAheadError(after, state.head_seq)
        caught.head = state.head_seq
        if caught.reached(journal.cursor):
            return
    deadline = None if idle is None else time.monotonic() + idle
    failures = 0
    while True:
        opened = False
        try:
            yield Connect(journal.cursor, journal.pin.incarnation, packed)
            opened = True
            if failures and on_connection is not None:
                on_connection(Reconnected(failures))
            first = True  # a snapshot may only open a stream; a resumed one needs none
            while True:
                frame: ServerSentEvent | Idle | None = yield _NEXT_FRAME if deadline is None else NextFrame(deadline)
                if frame is IDLE:
                    return
                if frame is None:
                    raise Disconnected("the stream ended")
                assert type(frame) is ServerSentEvent
                if frame.retry is not None:
                    journal.retry_ms = frame.retry
                if frame.event == "snapshot":
                    if not first:
                        raise ProtocolError("the stream sent a snapshot after its opening")
                    yield from journal.open(frame)
                    if caught.head is None:
                        caught.head = journal.cursor
                elif frame.event in ("event", "records"):
                    if journal.cursor is None:
                        raise ProtocolError(f"the stream sent {frame.event} before its snapshot")
                    yield from journal.live(frame) if frame.event == "event" else journal.records(frame)
                elif frame.event == "error":
                    raise _stream_error(frame.data, journal.cursor, journal.pin.incarnation)
                elif frame.event == "end":
                    # The session was closed (docs/protocol.md §6.3): every event is delivered; nothing follows.
                    return
                else:
                    continue
                first = False
                failures = 0
                if idle is not None:
                    deadline = time.monotonic() + idle
                if caught.reached(journal.cursor):
                    return
        except ServiceError as exc:
            if packed and not opened and exc.code == "invalid_parameter" and "packed" in exc.message:
                packed = False
                continue
            if exc.status_code not in _RETRYABLE_STATUS:
                raise
            error: Exception = exc
        except (Disconnected, httpx.TransportError, TransportError) as exc:
            error = exc
        failures += 1
        if backoff.max_retries is not None and failures > backoff.max_retries:
            reason = describe(error)
            raise TransportError(f"the follow stream gave up after attempt {failures} failed: {reason}") from error
        delay = backoff.delay(failures, journal.retry_ms)
        if on_connection is not None:
            on_connection(Retrying(failures, error, delay, opened))
        yield Sleep(delay)


class _CaughtUp:
    """The head a follow catches up to, and whether reaching it is heard (``on_caught_up``) or ends it (``until``)."""

    def __init__(self, until: Until | None, hook: CaughtUpHook | None) -> None:
        self.until = until
        self.hook = hook
        self.head: int | None = None
        self.told = False

    @property
    def wanted(self) -> bool:
        return self.until is not None or self.hook is not None

    def reached(self, cursor: int | None) -> bool:
        """Whether the follow should end now: first telling the hook, once, that ``cursor`` reached the head."""
        if self.head is None or self.told or (cursor if cursor is not None else -1) < self.head:
            return False
        self.told = True
        if self.hook is not None:
            self.hook(self.head)
        return self.until == "caught_up"


def _stream_error(data: bytes, cursor: int | None, incarnation: str | None) -> Exception:
    try:
        value = decode_json(data)
    except CodecError as exc:
        return ProtocolError(f"malformed error frame: {exc}")
    if type(value) is dict and value.get("code") == "cursor_ahead" and type(value.get("headSeq")) is int:
        return CursorAheadError(-1 if cursor is None else cursor, value["headSeq"])
    if type(value) is dict and value.get("code") == "session_deleted":
        # docs/protocol.md §6.4: the session is gone; a reconnect would find nothing, or another session.
        of = "" if incarnation is None else f" (incarnation {incarnation})"
        return SessionDeletedError(f"the session{of} was deleted while it was followed", incarnation=incarnation)
    if type(value) is dict and type(value.get("code")) is str:
        # The service failed after the stream opened (docs/protocol.md §5.1): resume, as after a cut.
        return Disconnected(f"the stream ended with {value['code']}")
    return ProtocolError(f"the stream reported an error: {data[:200]!r}")


class _Journal:
    """The delivered cursor, the incarnation it is of, and the rules that move them."""

    def __init__(self, after: int | None, pin: Pin) -> None:
        self.cursor = after
        self.pin = pin
        self.retry_ms: int | None = None

    def open(self, frame: ServerSentEvent) -> Generator[Fetch | Emit, Any, None]:
        try:
            snapshot = decode_follow_snapshot(frame.data)
        except CodecError as exc:
            raise ProtocolError(f"invalid snapshot: {exc}") from exc
        # A header stored without one is served without it (§2.5): the snapshot's id then names it.
        if isinstance(snapshot.header.incarnation, str):
            self.pin.learn(snapshot.header.incarnation, "the snapshot's header")
        self.pin.learn_event_id(frame.id, "the snapshot")
        page = LazyPage.open(snapshot, through=snapshot.cursor)
        cursor = self.cursor
        if cursor is not None and snapshot.cursor < cursor:
            raise ResumeBehindError(f"resumed at a cursor behind the last applied entry: {snapshot.cursor} < {cursor}")
        if cursor is not None and page.from_seq > cursor + 1:
            yield from self._repair(page.from_seq - 1)
        yield Emit(page.events(after=-1 if self.cursor is None else self.cursor))
        self.cursor = snapshot.cursor

    def live(self, frame: ServerSentEvent) -> Generator[Fetch | Emit, Any, None]:
        self.pin.learn_event_id(frame.id, "a live frame")
        record = _live_record(frame.data)
        first, last = record_seq_range(record)
        if not (yield from self._continues(first, last)):
            return
        event = record.event
        yield Emit((event,) if type(event) is Event else expand_row(record.chunks))  # type: ignore[arg-type]
        self.cursor = last

    def records(self, frame: ServerSentEvent) -> Generator[Fetch | Emit, Any, None]:
        """A packed stream's frame (docs/protocol.md §5.5): the page records of an interval, by the rules of `live`."""
        self.pin.learn_event_id(frame.id, "a records frame")
        try:
            shell = decode_live_records(frame.data)
            ranges = [decode_record_range(record, index=i) for i, record in enumerate(shell.records)]
        except CodecError as exc:
            raise ProtocolError(f"invalid records frame: {exc}") from exc
        first, last = shell.fromSeq, shell.toSeq - 1
        check_ranges(ranges, from_seq=first, to_seq=shell.toSeq, has_more=first > 0, through=last)
        named = parse_event_id(frame.id) if frame.id is not None else None
        if named is not None and named[1] != last:
            raise ProtocolError(f"a records frame of [{first}, {last}] has the id of seq {named[1]}")
        if not (yield from self._continues(first, last)):
            return
        page = LazyPage(shell.records, has_more=first > 0, from_seq=first, to_seq=shell.toSeq)
        yield Emit(page.events())
        self.cursor = last

    def _continues(self, first: int, last: int) -> Generator[Fetch | Emit, Any, bool]:
        """Whether ``[first, last]`` is new after the cursor: a duplicate is not, a partial overlap fails, and a
        gap before it is repaired from pages first."""
        cursor = -1 if self.cursor is None else self.cursor
        if last <= cursor:
            return False
        if first <= cursor:
            raise StreamOverlapError(
                f"the stream emitted a partially overlapping entry: [{first}, {last}] after {cursor}"
            )
        if first > cursor + 1:
            yield from self._repair(first - 1)
        return True

    def _repair(self, target: int) -> Generator[Fetch | Emit, Any, None]:
        """Deliver ``(cursor, target]`` from pages, newest fetched first, replayed oldest first."""
        cursor = -1 if self.cursor is None else self.cursor
        pages: list[LazyPage] = []
        through = target
        while through > cursor:
            body = yield from fetch(self.pin, through)
            page = open_lazy_page(body, through=through)
            pages.append(page)
            through = page.from_seq - 1
        for page in reversed(pages):
            yield Emit(page.events(after=cursor))
        self.cursor = target


def _live_record(data: bytes) -> PageRecord:
    try:
        return decode_live_record(data)
    except CodecError as exc:
        raise ProtocolError(f"invalid live frame: {exc}") from exc

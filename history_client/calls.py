"""The client's operations, each written once as a plan that does no I/O.

A single request is a `Call`: what to send and how to read the answer. A paged or live read
is a `Walk`: a paging or follow plan (`history_client.history`, `history_client.follow`) and
the session it reads. `Calls` holds one method per public operation of the clients, with its
parameters and promises; `AsyncHistoryClient` and `HistoryClient` are generated from it and
only run its plans, one with an ``httpx.AsyncClient`` and one with an ``httpx.Client``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Literal, NamedTuple, ParamSpec, TypeVar

import httpx

from codec import Event, SessionHeader, encode
from history_client.bodies import (
    Appended,
    Closed,
    SearchHits,
    SessionCreated,
    SessionList,
    SessionState,
    read_body,
)
from history_client.follow import Backoff, CaughtUpHook, Connect, ConnectionHook, FollowPlan, Until, follow_plan
from history_client.history import Fetch, PageAnswer, Plan, history_plan, pages_plan
from history_client.incarnations import INCARNATION_HEADER, Pin
from history_client.pages import HistoryPage, read_page
from history_client.requests import Requests, answer_error, auth_headers, service_error

__all__ = ["Call", "Calls", "Walk"]

P = ParamSpec("P")
T = TypeVar("T")
B = TypeVar("B", Appended, Closed, SearchHits, SessionCreated, SessionList, SessionState)
ListState = Literal["open", "closed"]


class Call(NamedTuple, Generic[T]):
    """One request, and how to read its answer: ``read`` returns the result or raises the error."""

    method: str
    path: str
    headers: Mapping[str, str]
    read: Callable[[httpx.Response], T]
    params: Mapping[str, int | str] | None = None
    body: bytes | None = None

    def build(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        return http.build_request(self.method, self.path, params=self.params, content=self.body, headers=self.headers)


class Walk(NamedTuple, Generic[T]):
    """A paging or follow plan over one session (or child); it emits ``T`` values."""

    plan: Plan | FollowPlan
    session: str
    child: str | None
    max_messages: int | None = None
    idle: float | None = None


def _raw(page: Callable[P, Call[HistoryPage]]) -> Callable[P, Call[bytes]]:
    """The same request as ``page``, read as the bare body."""

    def page_body(*args: P.args, **kwargs: P.kwargs) -> Call[bytes]:
        call = page(*args, **kwargs)
        return Call(call.method, call.path, call.headers, _body, call.params)

    page_body.__doc__ = "The raw JSON body of a page, decompressed but not decoded (see `iter_body_events`)."
    return page_body


class Calls:
    """Every operation of the clients as a `Call` or a `Walk`, and the requests a walk needs."""

    def __init__(
        self,
        *,
        token: str | None,
        principal: str | None,
        timeout: float,
        follow_read_timeout: float,
        max_messages: int | None,
        max_bytes: int | None,
        backoff: Backoff | None,
    ) -> None:
        self._headers = auth_headers(token, principal)
        self._requests = Requests(max_messages=max_messages, max_bytes=max_bytes)
        self._timeout = timeout
        self._follow_read_timeout = follow_read_timeout
        self.backoff = backoff or Backoff()

    def create_session(self, header: SessionHeader) -> Call[SessionCreated]:
        """Create a session from its header (docs/protocol.md §6.1).

        Returns a `SessionCreated`: its ``id``, ``head_seq`` -1 and the new session's ``incarnation`` (§2.5).

        A subagent child is created the same way, with ``parentSession`` naming a session the
        caller owns and ``origin="subagent"``. Raises `ServiceError` with ``code``
        ``session_exists`` (even for the same header), ``invalid_header``,
        ``invalid_session_id`` or ``invalid_parent``; `TransportError` when the service
        cannot be reached.
        """
        return self._post("/v1/sessions", encode(header), SessionCreated)

    def append(self, session: str, events: Sequence[Event]) -> Call[Appended]:
        """Append one atomic batch to a session, or a subagent child, by its own id (§6.2).

        The batch must continue the head: its first ``seq`` is ``headSeq + 1`` and the seqs
        run without gaps. Delta ``assistant/chunk`` events (``data`` a `DeltaData`) are packed
        into chunk rows by the service. Returns an `Appended` (``first_seq``, ``head_seq``); the
        exact batch sent again is a no-op whose answer has ``idempotent`` True, so a batch
        whose answer was lost can be re-sent. Raises `ServiceError` with ``code`` ``seq_conflict`` (its
        ``response`` body holds the ``headSeq`` to continue from), ``invalid_batch``,
        ``invalid_event``, ``batch_too_large`` or ``session_not_found``.
        """
        return self._post(Requests.path(session, None, "events"), encode({"events": events}), Appended)

    def close_session(self, session: str) -> Call[Closed]:
        """Close a session, or a subagent child, by its own id (§6.3); returns `Closed` (``head_seq``, ``closed_at``).

        Idempotent: a closed session answers the same. Its follow streams end after its last
        event, and a later append raises `ServiceError` with ``code`` ``session_closed``.
        """
        return self._post(Requests.path(session, None, "close"), b"", Closed)

    def delete_session(self, session: str) -> Call[None]:
        """Delete a session and its whole subagent tree, by the session's own id (§6.4).

        Durable when it returns. Its followers end with `SessionDeletedError`, and the id may
        be created again, as a new incarnation (§2.5). Raises `ServiceError` with ``code``
        ``session_not_found`` for an unknown id (a deleted one too) or another principal's.
        """
        return Call("DELETE", Requests.address(session), self._headers, _deleted)

    def list_sessions(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        state: ListState | None = None,
        q: str | None = None,
    ) -> Call[SessionList]:
        """One page of the caller's sessions that are not subagent children, newest first (§12.1).

        Pass ``next_cursor`` back as ``cursor`` for the next page (``None``: none). ``limit``
        is 1-1000 (default 50); ``state`` ``"open"`` or ``"closed"`` lists only those; ``q``
        only those whose id or title holds it, ignoring case.
        """
        return self._get("/v1/sessions", _list_params(limit, cursor, state, q), _reader(SessionList))

    def subagents(
        self,
        session: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        state: ListState | None = None,
        q: str | None = None,
    ) -> Call[SessionList]:
        """One page of a session's direct subagent children, newest first, named in its events or not (§12.3).

        A child's own children are listed at the child's id. Paged as `list_sessions`.
        """
        return self._get(
            Requests.path(session, None, "subagents"), _list_params(limit, cursor, state, q), _reader(SessionList)
        )

    def search(
        self,
        q: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        state: ListState | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> Call[SearchHits]:
        """One page of the passages of the caller's sessions that match ``q``, the latest written first (§14.1).

        ``q`` holds words, ``"quoted phrases"`` and ``prefix*`` terms, all required. Pass
        ``next_cursor`` back as ``cursor``, with the same query, for the next page. ``limit`` is
        1-100 (default 20); ``state`` keeps hits in open or closed sessions, and ``since`` and
        ``until`` (epoch ms) those whose passage's time is in ``[since, until)``. A hit's ``seq``
        opens its page with ``page(hit.session, child=..., through=hit.seq)``; a child's hit
        names its ``parent``. Raises `ServiceError` ``search_unsupported`` from a JSONL store.
        """
        params = {"q": q, "limit": limit, "cursor": cursor, "state": state, "since": since, "until": until}
        given = {name: value for name, value in params.items() if value is not None}
        return self._get("/v1/search", given, _reader(SearchHits))

    def session(self, session: str, *, child: str | None = None) -> Call[SessionState]:
        """A session's header and head (§12.2), or a subagent child's, read through its parent.

        Raises `ServiceError` ``session_not_found`` for an unknown or foreign id, and
        ``subagent_child`` for a child asked for without its parent.
        """
        return self._get(Requests.address(session, child), {}, _reader(SessionState))

    def page(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        before: int | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        incarnation: str | None = None,
    ) -> Call[HistoryPage]:
        """One validated page. Its records cover exactly ``[from_seq, to_seq)`` and it ends at the cursor asked for.

        Its ``incarnation`` is the one the service named (§2.5). Given ``incarnation``, the page
        must be of it: once that session is deleted, `SessionDeletedError` is raised.
        """
        params = self._requests.page_params(
            through=through, before=before, max_messages=max_messages, max_bytes=max_bytes, incarnation=incarnation
        )

        def read(response: httpx.Response) -> HistoryPage:
            body = _body(response)
            pin = Pin(incarnation)
            pin.learn(response.headers.get(INCARNATION_HEADER), "the page")
            return read_page(body, through=through, before=before, incarnation=pin.incarnation)

        return self._get(Requests.path(session, child, "page"), params, read)

    page_body = _raw(page)

    def iter_pages(
        self,
        session: str,
        *,
        child: str | None = None,
        through: int | None = None,
        after: int = -1,
        incarnation: str | None = None,
    ) -> Walk[HistoryPage]:
        """Validated pages, newest first, back to the one holding ``after + 1``; each joins the last.

        Every page is of one incarnation: ``incarnation``, or the first page's. If the session is
        deleted meanwhile (and perhaps created again), `SessionDeletedError` is raised.
        """
        return Walk(pages_plan(through=through, after=after, incarnation=incarnation), session, child)

    def iter_history(
        self,
        session: str,
        *,
        child: str | None = None,
        after: int = -1,
        through: int | None = None,
        incarnation: str | None = None,
    ) -> Walk[Event]:
        """The exact events with ``after < seq <= through`` (default: to the head), in seq order.

        Pages back from ``through``, keeping each page's body on disk, never decoded as a
        whole, and replays them oldest first one row at a time (see `history_plan`). The pages
        are of one incarnation, as in `iter_pages`.
        """
        return Walk(history_plan(through=through, after=after, incarnation=incarnation), session, child)

    def follow(
        self,
        session: str,
        *,
        child: str | None = None,
        after: int | None = None,
        max_messages: int | None = None,
        on_connection: ConnectionHook | None = None,
        incarnation: str | None = None,
        packed: bool = True,
        until: Until | None = None,
        idle: float | None = None,
        on_caught_up: CaughtUpHook | None = None,
    ) -> Walk[Event]:
        """Every event after ``after`` (or from a fresh snapshot's tail page), exactly once, in order, live.

        Reconnects with ``Last-Event-ID: <incarnation>:<seq>`` on any break, as ``backoff``
        says; repairs gaps from pages. It ends when the session is closed (after its last
        event), when the caller stops iterating, or when an error that retrying cannot fix is
        raised: `SessionDeletedError` once the session is deleted, without reconnecting.
        ``on_connection`` hears each failure that will be retried (`Retrying`) and each
        stream that opens again after failures (`Reconnected`).

        The follow is of one incarnation (§2.5): ``incarnation`` (say a page's, to follow on
        from it), or the one its first frame names. Without it, a resume with ``after`` that
        is cut before any event arrives reconnects to whichever session then holds the id.

        ``packed`` (the default) asks for the packed stream (§5.5): the deltas of each write
        arrive as chunk rows, and are expanded to the same events. ``False`` asks for one
        frame per event, as a plain ``EventSource`` reads; so does a server that predates
        packed streams, which refuses the parameter.

        Stopping early (the stream itself never says "caught up", so the client keeps count):

        - ``until="caught_up"`` ends the follow once it has delivered every event up to the
          head it found when it started: a fresh follow's snapshot cursor, or, with ``after``,
          the head of one read of the session (`session`) before the stream opens.
        - ``on_caught_up`` hears that head once, when it is reached, and the follow goes on
          live (unless ``until`` ends it).
        - ``idle`` (seconds) ends the follow once no event has arrived for that long; pings
          do not count. The async client ends it on time; the sync client notices at its
          next read, which comes by ``idle`` when it is shorter than ``follow_read_timeout``,
          else at the stream's next ping (every 15 s by default).
        """
        if until not in (None, "caught_up"):
            raise ValueError(f"until must be None or 'caught_up', not {until!r}")
        if idle is not None and not idle > 0:
            raise ValueError(f"idle must be a positive number of seconds, not {idle!r}")
        plan = follow_plan(
            after=after,
            backoff=self.backoff,
            on_connection=on_connection,
            incarnation=incarnation,
            until=until,
            idle=idle,
            on_caught_up=on_caught_up,
            packed=packed,
        )
        return Walk(plan, session, child, max_messages, idle)

    def fetch(self, page_path: str, action: Fetch) -> Call[PageAnswer]:
        """The page at ``page_path`` that a walk's `Fetch` asks for."""
        params = self._requests.page_params(
            through=action.through,
            before=action.before,
            max_messages=None,
            max_bytes=None,
            incarnation=action.incarnation,
        )
        return self._get(page_path, params, _answer)

    def connect(self, http: httpx.Client | httpx.AsyncClient, walk: Walk[Any], action: Connect) -> httpx.Request:
        """The follow request a walk's `Connect` asks for; its answer is streamed."""
        return http.build_request(
            "GET",
            Requests.path(walk.session, walk.child, "follow"),
            params=Requests.follow_params(action.after, action.incarnation, walk.max_messages, packed=action.packed),
            headers={**self._headers, **Requests.follow_headers(action.after, action.incarnation)},
            timeout=httpx.Timeout(self._timeout, read=min(self._follow_read_timeout, walk.idle or math.inf)),
        )

    def _get(self, path: str, params: Mapping[str, int | str], read: Callable[[httpx.Response], T]) -> Call[T]:
        return Call("GET", path, self._headers, read, params=params)

    def _post(self, path: str, body: bytes, answer: type[B]) -> Call[B]:
        headers = {**self._headers, "Content-Type": "application/json"}
        return Call("POST", path, headers, _reader(answer), body=body)


def _reader(kind: type[B]) -> Callable[[httpx.Response], B]:
    return functools.partial(read_body, kind)


def _list_params(limit: int | None, cursor: str | None, state: ListState | None, q: str | None) -> dict[str, int | str]:
    params = {"limit": limit, "cursor": cursor, "state": state, "q": q}
    return {name: value for name, value in params.items() if value is not None}


def _body(response: httpx.Response) -> bytes:
    """The body of a successful read; a failed one raises its error."""
    if not response.is_success:
        raise answer_error(response)
    return response.content


def _answer(response: httpx.Response) -> PageAnswer:
    return PageAnswer(_body(response), response.headers.get(INCARNATION_HEADER))


def _deleted(response: httpx.Response) -> None:
    if not response.is_success:
        raise service_error(response)

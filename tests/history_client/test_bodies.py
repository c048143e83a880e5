"""The client's answers are the service's bodies: the same keys, read tolerantly, by one decoder each."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from codec import SessionHeader, encode
from history_client import (
    Appended,
    Closed,
    ListedSession,
    ProtocolError,
    SearchHit,
    SearchHits,
    ServiceError,
    SessionCreated,
    SessionList,
    SessionState,
    Usage,
)
from history_client.bodies import read_body
from history_service import bodies as service

TWINS = [
    (SessionCreated, service.SessionCreated),
    (Appended, service.Appended),
    (Closed, service.Closed),
    (ListedSession, service.ListedSession),
    (SessionList, service.SessionList),
    (SessionState, service.SessionState),
    (Usage, service.Usage),
    (SearchHit, service.SearchHit),
    (SearchHits, service.SearchHits),
]


def keys(kind: Any) -> dict[str, bool]:
    """Each wire key of a Struct, and whether it is required."""
    return {field.encode_name: field.required for field in msgspec.structs.fields(kind)}


@pytest.mark.parametrize(("client", "server"), TWINS, ids=[client.__name__ for client, _ in TWINS])
def test_each_answer_has_the_keys_of_the_services_body(client: Any, server: Any) -> None:
    assert keys(client) == keys(server)


def answer(status: int, body: bytes) -> httpx.Response:
    return httpx.Response(status, content=body, request=httpx.Request("GET", "http://test/v1/sessions"))


SAFE = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
HEAD = st.integers(min_value=-1, max_value=2**53 - 1)
COUNT = st.integers(min_value=0, max_value=2**53 - 1)
listed = st.builds(
    service.ListedSession,
    id=st.from_regex(r"[a-z0-9.:-]{1,20}", fullmatch=True),
    createdAt=SAFE,
    headSeq=HEAD,
    childCount=st.integers(min_value=0, max_value=10**6),
    closedAt=st.one_of(st.just(msgspec.UNSET), SAFE),
    expiresAt=st.one_of(st.just(msgspec.UNSET), SAFE),
    title=st.one_of(st.just(msgspec.UNSET), st.text(min_size=1, max_size=20)),
    lastEventAt=st.one_of(st.just(msgspec.UNSET), SAFE),
    usage=st.one_of(st.just(msgspec.UNSET), st.builds(service.Usage, COUNT, COUNT)),
)


@settings(max_examples=50, deadline=None)
@given(st.lists(listed, max_size=4), st.one_of(st.none(), st.text(max_size=8)))
def test_a_listing_the_service_encodes_reads_back_with_every_value(
    sessions: list[service.ListedSession], cursor: str | None
) -> None:
    sent = service.SessionList(sessions, cursor, len(sessions))
    got = read_body(SessionList, answer(200, encode(sent)))
    assert (got.next_cursor, got.total) == (cursor, len(sessions))
    assert [msgspec.structs.asdict(s) for s in got.sessions] == [
        {
            "id": s.id,
            "created_at": s.createdAt,
            "head_seq": s.headSeq,
            "child_count": s.childCount,
            "closed_at": s.closedAt,
            "expires_at": s.expiresAt,
            "title": s.title,
            "last_event_at": s.lastEventAt,
            "usage": s.usage if isinstance(s.usage, msgspec.UnsetType) else Usage(*msgspec.structs.astuple(s.usage)),
        }
        for s in sessions
    ]


def test_a_key_the_client_does_not_know_is_ignored_and_a_missing_one_is_a_protocol_error() -> None:
    header = encode(SessionHeader(id="s", createdAt=5))
    state = read_body(SessionState, answer(200, b'{"header":%b,"headSeq":3,"newKey":"later"}' % header))
    assert state == SessionState(SessionHeader(id="s", createdAt=5), 3)
    assert read_body(Appended, answer(200, b'{"firstSeq":0,"headSeq":1,"idempotent":true}')).idempotent is True
    with pytest.raises(ProtocolError, match="/v1/sessions: Object missing required field `headSeq`"):
        read_body(Closed, answer(200, b'{"closedAt":9}'))
    with pytest.raises(ServiceError, match="404 session_not_found"):
        read_body(Closed, answer(404, b'{"error":{"code":"session_not_found","message":"no"}}'))

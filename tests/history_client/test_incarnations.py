"""The incarnation pin: learned once, named on every later request, and a pinned 404 means the session is gone."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given, strategies as st

from codec import MAX_SAFE_INTEGER
from history_client import ProtocolError, ServiceError, SessionDeletedError
from history_client.incarnations import Pin, deleted_error
from history_client.requests import Requests, answer_error, named_incarnation

incarnations = st.text("0123456789abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=32)
cursors = st.integers(-1, MAX_SAFE_INTEGER)


def not_found(request: httpx.Request) -> httpx.Response:
    body = {"error": {"code": "session_not_found", "message": "no session 's'"}}
    response = httpx.Response(404, json=body)
    response.request = request
    return response


@given(incarnations, cursors)
def test_a_resume_names_the_incarnation_and_cursor_it_continues(incarnation: str, after: int) -> None:
    headers = Requests.follow_headers(after, incarnation)
    assert headers["Last-Event-ID"] == f"{incarnation}:{after}"
    request = httpx.Request("GET", "http://test/v1/sessions/s/follow", headers=headers)
    assert named_incarnation(request) == incarnation
    pin = Pin()
    pin.learn_event_id(headers["Last-Event-ID"], "a frame")
    assert pin.incarnation == incarnation


@given(incarnations)
def test_a_fresh_open_and_a_page_name_the_incarnation_as_a_parameter(incarnation: str) -> None:
    assert Requests.follow_params(None, incarnation, None) == {"incarnation": incarnation}
    assert Requests.follow_params(5, incarnation, 3) == {"maxMessages": 3}  # Last-Event-ID names it
    params = Requests(max_messages=None, max_bytes=None).page_params(
        through=9, before=None, max_messages=None, max_bytes=None, incarnation=incarnation
    )
    request = httpx.Request("GET", "http://test/v1/sessions/s/page", params=params)
    assert named_incarnation(request) == incarnation


def test_without_an_incarnation_a_resume_sends_the_bare_cursor() -> None:
    assert Requests.follow_headers(41, None)["Last-Event-ID"] == "41"
    assert "Last-Event-ID" not in Requests.follow_headers(None, None)
    request = httpx.Request("GET", "http://test/v1/sessions/s/follow", headers={"Last-Event-ID": "41"})
    assert named_incarnation(request) is None


def test_the_pin_is_set_once_and_every_later_answer_must_name_it() -> None:
    pin = Pin()
    pin.learn(None, "a page")  # a service from before incarnations names none
    assert pin.incarnation is None
    pin.learn("5d0c1e9a7b22", "a page")
    pin.learn("5d0c1e9a7b22", "a page")
    assert pin.incarnation == "5d0c1e9a7b22"
    with pytest.raises(ProtocolError, match="names incarnation 0123, but the read is of 5d0c1e9a7b22"):
        pin.learn("0123", "a page")
    with pytest.raises(ProtocolError, match="names no incarnation"):
        pin.learn(None, "a page")
    with pytest.raises(ProtocolError, match="names no incarnation"):
        pin.learn_event_id("41", "a live frame")
    with pytest.raises(ProtocolError, match="malformed id"):
        Pin().learn_event_id("ABC:1", "a live frame")


def test_a_404_means_deleted_only_for_a_request_that_named_an_incarnation() -> None:
    pinned = not_found(httpx.Request("GET", "http://test/v1/sessions/s/page?incarnation=5d0c1e9a7b22"))
    deleted = answer_error(pinned)
    assert isinstance(deleted, SessionDeletedError) and deleted.incarnation == "5d0c1e9a7b22"
    assert isinstance(deleted.__cause__, ServiceError) and deleted.__cause__.code == "session_not_found"
    resumed = not_found(
        httpx.Request("GET", "http://test/v1/sessions/s/follow", headers={"Last-Event-ID": "5d0c1e9a7b22:7"})
    )
    assert isinstance(answer_error(resumed), SessionDeletedError)
    unpinned = answer_error(not_found(httpx.Request("GET", "http://test/v1/sessions/s/page")))
    assert type(unpinned) is ServiceError and unpinned.code == "session_not_found"


def test_other_errors_of_a_pinned_request_stay_service_errors() -> None:
    unavailable = ServiceError("draining", status_code=503, code="store_unavailable")
    no_route = ServiceError("no route", status_code=404, code="not_found")
    assert deleted_error(unavailable, "5d0c1e9a7b22") is None
    assert deleted_error(no_route, "5d0c1e9a7b22") is None

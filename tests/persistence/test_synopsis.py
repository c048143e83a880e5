"""The synopsis rules: a title, the last event's time and the tokens, folded the same however a session is batched."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from codec import MAX_SAFE_INTEGER, Event
from persistence.synopsis import EMPTY, MAX_TITLE, Synopsis, matches, synopsis_of, title_text
from testing.events import chunk_event, text


def user(seq: int, words: Any, kind: str | None = "user") -> Event:
    data: dict[str, Any] = {"content": words} if not isinstance(words, str) else {"text": words}
    if kind is not None:
        data["source"] = {"kind": kind}
    return Event("user/message", seq, seq, data)


def named(seq: int, title: Any) -> Event:
    return Event("session/title", seq, seq, {"title": title})


def usage(seq: int, tokens_in: Any, tokens_out: Any) -> Event:
    return chunk_event(seq, seq, {"type": "usage", "usage": {"inputTokens": tokens_in, "outputTokens": tokens_out}})


# Events whose every kind moves the synopsis, or tries to and must not.
event_kinds = st.sampled_from(
    [
        lambda seq: user(seq, f"asked {seq}"),
        lambda seq: user(seq, "context", kind="plugin"),
        lambda seq: user(seq, [{"type": "text", "text": f"parts {seq}"}], kind=None),
        lambda seq: named(seq, f"title {seq}"),
        lambda seq: named(seq, "   "),
        lambda seq: usage(seq, seq, 1),
        lambda seq: text(seq, seq, "x"),
        lambda seq: Event("assistant/message", seq, seq, {"message": {"usage": {"inputTokens": 2}}}),
        lambda seq: Event("assistant/message", seq, seq, {"usage": {"inputTokens": 50}}, sourceEventSeqs=(0,)),
    ]
)


@st.composite
def split_sessions(draw: st.DrawFn) -> tuple[list[Event], list[list[Event]]]:
    makers = draw(st.lists(event_kinds, min_size=1, max_size=30))
    events = [make(seq) for seq, make in enumerate(makers)]
    cuts = sorted(draw(st.sets(st.integers(1, len(events)), max_size=6)) | {len(events)})
    return events, [events[a:b] for a, b in zip([0, *cuts], cuts, strict=False)]


def usage_of(event: Event) -> dict[str, int]:
    """The usage an event of `event_kinds` counts: a usage chunk's, or a message's that no deltas built."""
    data = event.data
    if event.type == "assistant/chunk" and isinstance(data, dict):
        return dict(data["chunk"]["usage"])
    if event.type == "assistant/message" and not event.sourceEventSeqs:
        return dict(data["message"]["usage"])
    return {}


def model(events: list[Event]) -> Synopsis:
    """The synopsis as §12.1 says it, read from the whole session at once."""
    titles = [e.data["title"].strip() for e in events if e.type == "session/title" and e.data["title"].strip()]
    asked = [e for e in events if e.type == "user/message" and e.data.get("source", {"kind": "user"})["kind"] == "user"]
    first = asked[0].data.get("text") or asked[0].data["content"][0]["text"] if asked else None
    counted = [usage_of(e) for e in events]
    tokens_in = sum(found.get("inputTokens", 0) for found in counted)
    tokens_out = sum(found.get("outputTokens", 0) for found in counted)
    return Synopsis(titles[-1] if titles else first, events[-1].time, tokens_in, tokens_out)


@given(split_sessions())
def test_the_synopsis_is_the_model_however_the_session_is_batched(split: tuple[list[Event], list[list[Event]]]) -> None:
    events, batches = split
    assert synopsis_of(batches) == synopsis_of([events]) == model(events)


def test_a_session_with_no_events_has_the_empty_synopsis() -> None:
    assert synopsis_of([]) == synopsis_of([[]]) == EMPTY == Synopsis(None, None, 0, 0)


@pytest.mark.parametrize(
    ("given", "title"),
    [
        ("  Fix\tthe \n\n tests ", "Fix the tests"),
        ("a\x00b\x1bc\u2028d", "a b c d"),
        ("\ud800lone", "lone"),
        (" \n\t ", None),
        ("x" * MAX_TITLE, "x" * MAX_TITLE),
        ("x" * (MAX_TITLE + 1), "x" * (MAX_TITLE - 1) + "…"),
        ("word " * 10_000, ("word " * 40)[: MAX_TITLE - 1].rstrip() + "…"),
    ],
    ids=["whitespace", "controls", "surrogate", "blank", "longest", "cut", "huge"],
)
def test_a_title_is_one_printable_line_of_at_most_max_title(given: str, title: str | None) -> None:
    assert title_text(given) == title


def test_tokens_are_positive_safe_integers_and_their_sums_stop_at_the_largest() -> None:
    nonsense = [usage(0, -1, 1.5), usage(1, True, "3"), usage(2, MAX_SAFE_INTEGER + 1, None)]
    assert synopsis_of([nonsense]) == Synopsis(None, 2, 0, 0)
    big = [usage(seq, MAX_SAFE_INTEGER, MAX_SAFE_INTEGER) for seq in range(3)]
    assert synopsis_of([big[:1], big[1:]]) == Synopsis(None, 2, MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)


@pytest.mark.parametrize(
    ("session_id", "title", "needle", "kept"),
    [
        ("abc", None, None, True),
        ("Run-7", None, "run-", True),
        ("s", "Straße", "STRASSE", True),
        ("s", "100% sure", "0% s", True),
        ("s", "a_b", "a%b", False),
        ("s", None, "x", False),
    ],
)
def test_the_filter_is_a_case_folded_substring_of_the_id_or_the_title(
    session_id: str, title: str | None, needle: str | None, kept: bool
) -> None:
    assert matches(session_id, title, needle) is kept

"""Rewriting references to renamed ids: whole ids only, distinct ids only, deltas split anywhere."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings, strategies as st

from codec import Event, SessionHeader, ToolCallDelta
from history_service.cli.references import MIN_DISTINCT, References
from testing.events import plain, reasoning, text, tool

CHILD = "c0ffee00-5eed-4c01-8d00-000000000c01"
NEW = "scenario.1"


def test_every_string_naming_the_id_is_rewritten_keys_and_nested_values_too():
    data = {
        "childId": CHILD,
        "source": {"kind": "subagent-report", "senderSessionId": CHILD},
        "content": [{"type": "text", "text": f"Background subagent {CHILD} reported:"}],
        CHILD: {"state": "done"},
        "count": 3,
    }
    [event] = References({CHILD: NEW}).events([plain(0, "agent/inbox/spliced", data)])
    assert event.data == {
        "childId": NEW,
        "source": {"kind": "subagent-report", "senderSessionId": NEW},
        "content": [{"type": "text", "text": f"Background subagent {NEW} reported:"}],
        NEW: {"state": "done"},
        "count": 3,
    }


def test_an_id_inside_json_arguments_is_rewritten_and_the_json_stays_valid():
    arguments = json.dumps({"subagent_id": CHILD, "message": "again"})
    [event] = References({CHILD: NEW}).events([plain(0, "tool/call", {"name": "send_message", "arguments": arguments})])
    assert json.loads(event.data["arguments"]) == {"subagent_id": NEW, "message": "again"}


@pytest.mark.parametrize(
    ("text_", "expected"),
    [
        (f"started subagent {CHILD}", f"started subagent {NEW}"),
        (f"started subagent {CHILD}.", f"started subagent {NEW}."),
        (f"({CHILD}): done", f"({NEW}): done"),
        (f"{CHILD}-copy", f"{CHILD}-copy"),
        (f"x{CHILD}", f"x{CHILD}"),
        (f"{CHILD}.jsonl", f"{CHILD}.jsonl"),
        (f"{CHILD}:7", f"{CHILD}:7"),
    ],
    ids=["word", "sentence-end", "punctuation", "longer-id", "prefixed", "file-name", "event-id"],
)
def test_only_a_whole_id_is_a_reference(text_, expected):
    assert References({CHILD: NEW}).text(text_) == expected


def test_a_short_id_is_a_word_too_and_is_left_alone_but_a_placeholder_is_not():
    short = "main"
    assert len(short) < MIN_DISTINCT
    references = References({short: "renamed", "{{sessionId}}": "folder"})
    assert references.text("merged into main; session {{sessionId}}") == "merged into main; session folder"
    assert not References({short: "renamed"})


def test_unchanged_events_are_the_same_objects():
    events = [plain(0, data={"text": "nothing here"}), text(1, 5, "nor here")]
    assert all(a is b for a, b in zip(References({CHILD: NEW}).events(events), events, strict=True))


def test_a_reference_split_across_tool_call_deltas_moves_whole_into_the_delta_where_it_began():
    arguments = json.dumps({"subagent_id": CHILD})
    cut = [0, 10, 24, 30, 31, 50, len(arguments)]
    pieces = [arguments[a:b] for a, b in zip(cut, cut[1:], strict=False)]
    events = [tool(seq, 100 + seq, piece, call_id="call-1") for seq, piece in enumerate(pieces)]
    events.insert(2, tool(9, 9, CHILD[:5], call_id="call-2"))  # another call's run: its own text
    rewritten = References({CHILD: NEW}).events(events)
    assert [e.data.chunk.argumentsDelta for e in rewritten if e.data.chunk.id == "call-2"] == [CHILD[:5]]
    run = [e for e in rewritten if e.data.chunk.id == "call-1"]
    assert json.loads("".join(e.data.chunk.argumentsDelta for e in run)) == {"subagent_id": NEW}
    assert [(e.seq, e.time) for e in run] == [(e.seq, e.time) for e in events if e.data.chunk.id == "call-1"]
    assert run[1].data.chunk.argumentsDelta.endswith(NEW) and run[2].data.chunk.argumentsDelta == ""


def test_runs_of_text_and_reasoning_are_apart_even_when_their_texts_would_join_into_an_id():
    events = [reasoning(0, 1, CHILD[:9]), text(1, 1, CHILD[9:])]
    assert References({CHILD: NEW}).events(events) == events


def test_a_header_meta_is_rewritten_and_its_id_and_parent_are_not():
    header = SessionHeader(id=CHILD, createdAt=1, parentSession=CHILD, meta={"root": CHILD})
    assert References({CHILD: NEW}).header(header) == SessionHeader(
        id=CHILD, createdAt=1, parentSession=CHILD, meta={"root": NEW}
    )


@settings(max_examples=60, deadline=None)
@given(
    before=st.text(alphabet=" ab:.{}\"'", max_size=6),
    after=st.text(alphabet=" ab:.{}\"'", max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=8),
    kind=st.sampled_from([text, reasoning, tool]),
)
def test_deltas_split_anywhere_join_to_the_rewritten_text_of_the_whole(before, after, cuts, kind):
    whole = f"{before}{CHILD}{after}"
    bounds = sorted({0, len(whole), *(min(c, len(whole)) for c in cuts)})
    events: list[Event] = [kind(seq, seq, whole[a:b]) for seq, (a, b) in enumerate(itertools.pairwise(bounds))]
    references = References({CHILD: NEW})
    rewritten = references.events(events)

    def joined(run: list[Event]) -> str:
        chunks = [e.data.chunk for e in run]
        return "".join(c.argumentsDelta if isinstance(c, ToolCallDelta) else c.text for c in chunks)

    assert joined(rewritten) == references.text(whole)
    assert [(e.seq, e.time, e.type) for e in rewritten] == [(e.seq, e.time, e.type) for e in events]
